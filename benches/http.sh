#!/usr/bin/env bash
# HTTP input throughput (issue 13): wrk POSTs NDJSON bodies of 1,000 events
# over keep-alive connections to nagare's http input, which forwards them to
# a flowbench sink (events counted: every event of every 2xx answer must
# arrive); then, in the same sitting, `flowbench relay` measures the
# forward input (benches/relay.toml) at the same event size. Prints both
# rates and their ratio (the bar: http >= 0.5x forward).
#
#   benches/http.sh [DURATION]        (default 10s; SIZES="100 1024")
#
# Needs wrk (Debian package wrk) and Go (flowbench). Ports: SUT_PORT and
# SINK_PORT (defaults 40180, 40181).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10s}
SIZES=${SIZES:-"100 1024"}
CONNECTIONS=${CONNECTIONS:-8}
export SUT_PORT=${SUT_PORT:-40180} SINK_PORT=${SINK_PORT:-40181}
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)" >&2; exit 1; }
. benches/common.sh
results_dir http

for size in $SIZES; do
  # 1,000 NDJSON events of about $size bytes each.
  export BODY_FILE=$OUT/body-$size.ndjson
  python3 - "$size" > "$BODY_FILE" <<'PY'
import sys
size = int(sys.argv[1])
for i in range(1000):
    head = '{"seq":%d,"message":"' % i
    print(head + "x" * max(1, size - len(head) - 2) + '"}')
PY
  "$FB" sink --listen "127.0.0.1:$SINK_PORT" --quiet --idle-exit 3s --timeout 600s \
      --json-summary "$OUT/sink-$size.json" >/dev/null 2>&1 &
  sink=$!
  "$NAGARE" run -c benches/http.toml 2>"$OUT/nagare-$size.log" &
  nagare=$!
  wait_port "$SUT_PORT"
  wrk -t 2 -c "$CONNECTIONS" -d "$DURATION" -s benches/http-post.lua \
      "http://127.0.0.1:$SUT_PORT/bench.http" > "$OUT/wrk-$size.txt"
  kill -TERM "$nagare"; wait "$nagare" || true
  wait "$sink" || true
  "$FB" relay --sut-port "$SUT_PORT" --sink-port "$SINK_PORT" --duration "$DURATION" --warmup 3s \
      --size "$size" --batch 200 --quiet --sut-cmd "exec $NAGARE run -c $ROOT/benches/relay.toml" \
      2>/dev/null | tail -n 1 > "$OUT/forward-$size.json"
done

python3 - "$OUT" $SIZES <<'PY'
import json, re, sys
out, sizes = sys.argv[1], sys.argv[2:]
# wrk stops counting at its deadline while its last requests are still
# answered: the sink may hold up to CONNECTIONS x 1000 events more than wrk
# counted, never fewer (fewer would be events lost).
print("| bytes/event | http in ev/s | forward in ev/s | http / forward | http requests | non-2xx | events at sink | sink - counted |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for s in sizes:
    w = dict(re.findall(r"(\w+)=(\d+)", open(f"{out}/wrk-{s}.txt").read().split("WRK", 1)[1]))
    ok = int(w["requests"]) - int(w["non2xx"])
    sink = json.load(open(f"{out}/sink-{s}.json"))
    got = sink.get("events", sink.get("total_events", 0))
    http_rate = ok * 1000 / (int(w["duration_us"]) / 1e6)
    fwd = json.loads(open(f"{out}/forward-{s}.json").read())["steady_events_per_s"]
    print(f"| {s} | {http_rate:,.0f} | {fwd:,.0f} | {http_rate / fwd:.2f} | {w['requests']} | {w['non2xx']} | {got:,} | {ok * 1000 - got} |")
PY
