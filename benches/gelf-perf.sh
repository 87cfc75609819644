#!/usr/bin/env bash
# The gelf input over TCP against the tcp input with the json parser on the
# same messages: MESSAGES GELF messages (as Docker's gelf driver writes
# them: version, host, short_message, timestamp, level and seven `_`
# fields) sent over one TCP connection, NUL-ended to the gelf input and
# newline-ended to the tcp input (the floor: the same JSON parsed into the
# same kind of record, without GELF's mapping), each forwarded to
# `flowbench sink`. Prints, per run, messages per second over the sink's
# active window and per nagare CPU-second, then the medians and the ratio
# gelf / tcp+json.
#
#   benches/gelf-perf.sh [MESSAGES] [RUNS]
#   defaults: 1000000 messages, 3 runs
set -euo pipefail
cd "$(dirname "$0")/.."
MESSAGES=${1:-1000000}
RUNS=${2:-3}
. benches/common.sh
results_dir gelf
PORT=${SINK_PORT:-36321}
IN_PORT=${IN_PORT:-36322}
python3 - "$OUT" "$MESSAGES" <<'PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
nul, nl = open(f"{out}/msgs.nul", "w"), open(f"{out}/msgs.nl", "w")
for i in range(n):
    m = json.dumps({"version": "1.1", "host": "docker-host-1", "short_message": f"GET /api/items/{i} 200 {i % 977}ms",
        "timestamp": 1764320000.123 + i / 1000, "level": 6, "_command": "nginx -g daemon off;",
        "_container_id": "4f3c2b1a0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a",
        "_container_name": "web-1", "_created": "2026-11-28T10:00:00.000000000Z",
        "_image_id": "sha256:0123456789abcdef", "_image_name": "nginx:1.27", "_tag": "web-1"})
    nul.write(m + "\0"); nl.write(m + "\n")
PY
echo "messages: $MESSAGES ($(du -m "$OUT/msgs.nl" | cut -f1) MB)" >&2

run() { # run gelf|tcp: one measurement; prints "msgs/s msgs-per-CPU-s"
    if [ "$1" = gelf ]; then
        input="type = \"gelf\"
protocol = \"tcp\""
        file=$OUT/msgs.nul
    else
        input="type = \"tcp\"
[input.parser]
type = \"json\""
        file=$OUT/msgs.nl
    fi
    cat > "$OUT/$1.toml" <<TOML
[[input]]
bind = "127.0.0.1:$IN_PORT"
tag = "perf"
$input
$(sink_output "$PORT")
TOML
    sink_run "$OUT/$1.toml" "$PORT" "$MESSAGES" "$MESSAGES" "$IN_PORT" "$file"
}

gelf=(); tcp=(); gelf_cpu=(); tcp_cpu=()
for i in $(seq "$RUNS"); do
    read -r r c < <(run tcp); tcp+=("$r"); tcp_cpu+=("$c")
    echo "run $i tcp+json: $r msgs/s, $c per CPU-s" >&2
    read -r r c < <(run gelf); gelf+=("$r"); gelf_cpu+=("$c")
    echo "run $i gelf:     $r msgs/s, $c per CPU-s" >&2
done
python3 - "${tcp[*]}" "${gelf[*]}" "${tcp_cpu[*]}" "${gelf_cpu[*]}" <<'PY'
import statistics as st, sys
tcp, gelf, tcpu, gcpu = ([float(x) for x in a.split()] for a in sys.argv[1:5])
t, g = st.median(tcp), st.median(gelf)
print(f"median msgs/s: tcp+json {t:,.0f}, gelf {g:,.0f}, gelf/tcp+json {g / t:.2f}")
print(f"median msgs per nagare CPU-s: tcp+json {st.median(tcpu):,.0f}, gelf {st.median(gcpu):,.0f}, "
      f"gelf/tcp+json {st.median(gcpu) / st.median(tcpu):.2f}")
PY
