#!/usr/bin/env bash
# Issue 5's first measurement: a file from `flowbench genfile`, read from its
# head by the tail input (parser none) and forwarded to `flowbench sink
# --expect N`; prints lines/s, MB/s and lines per nagare CPU-second.
#
#   benches/tail-perf.sh SIZE COUNT      e.g. 13 5000000, 1024 1000000, 4096 250000
# (genfile's plain lines are at least 13 bytes: its stand-in for "10 B".)
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-1024}
COUNT=${2:-1000000}
. benches/common.sh
W=$(mktemp -d /tmp/nagare-tailperf-XXXX)
PORT=${SINK_PORT:-36301}
"$FB" genfile --path "$W/in.log" --size "$SIZE" --count "$COUNT" >/dev/null 2>&1
cat > "$W/tail.toml" <<TOML
[[input]]
type = "tail"
path = "$W/in.log"
tag = "perf"
read_from_head = true
$(sink_output "$PORT")
TOML
"$FB" sink --listen "127.0.0.1:$PORT" --expect "$COUNT" --idle-exit 5s --quiet > "$W/sink.json" 2>/dev/null &
SINK=$!
wait_port "$PORT"
"$NAGARE" run -c "$W/tail.toml" 2>"$W/nagare.log" &
PID=$!
wait "$SINK" || true
CPU=$(awk '{print ($14+$15)/100}' "/proc/$PID/stat")
kill -TERM "$PID"; wait "$PID" || true
python3 - "$W/sink.json" "$CPU" "$SIZE" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); cpu = float(sys.argv[2]); size = int(sys.argv[3])
ev, s = d["events"], d["active_s"]
print(f"size {size} B: {ev:,} lines in {s:.2f}s = {ev/s:,.0f} lines/s, {ev*(size+1)/s/1e6:,.0f} MB/s, "
      f"nagare CPU {cpu:.2f}s = {ev/cpu:,.0f} lines per CPU-s, sink errors {d.get('errors')}")
PY
rm -rf "$W"
