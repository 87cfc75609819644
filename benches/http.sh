#!/usr/bin/env bash
# HTTP input throughput (issue 13): wrk POSTs NDJSON bodies of 1,000 events
# over keep-alive connections to nagare's http input, which forwards them to
# a flowbench sink (events counted: every event of every 2xx answer must
# arrive); then, in the same sitting, `flowbench relay` measures the
# forward input (benches/relay.toml) at the same event size. RUNS pairs per
# size, alternating; prints the medians of both rates, their ratio (the
# bar: http >= 0.5x forward) and the CPU seconds of every process.
#
#   benches/http.sh [DURATION] [RUNS]   (defaults 10s, 3; SIZES="100 1024")
#
# Needs wrk (Debian package wrk), GNU time and Go (flowbench). Ports:
# SUT_PORT and SINK_PORT (defaults 40180, 40181).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10s}
RUNS=${2:-3}
SIZES=${SIZES:-"100 1024"}
CONNECTIONS=${CONNECTIONS:-8}
export SUT_PORT=${SUT_PORT:-40180} SINK_PORT=${SINK_PORT:-40181}
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)" >&2; exit 1; }
. benches/common.sh
results_dir http
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

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
  for i in $(seq "$RUNS"); do
    echo "size $size run $i" >&2
    "$FB" sink --listen "127.0.0.1:$SINK_PORT" --quiet --idle-exit 3s --timeout 600s \
        --json-summary "$OUT/sink-$size-$i.json" >/dev/null 2>&1 &
    sink=$!
    "$NAGARE" run -c benches/http.toml 2>"$OUT/nagare-$size-$i.log" &
    nagare=$!
    wait_port "$SUT_PORT"
    /usr/bin/time -f "WRKCPU %U %S" -o "$OUT/wrk-cpu-$size-$i.txt" \
        wrk -t 2 -c "$CONNECTIONS" -d "$DURATION" -s benches/http-post.lua \
        "http://127.0.0.1:$SUT_PORT/bench.http" > "$OUT/wrk-$size-$i.txt"
    # The sink holds every event once it has been idle (or nagare is stopped).
    cpu "$nagare" > "$OUT/nagare-cpu-$size-$i.txt"
    kill -TERM "$nagare"; wait "$nagare" || true
    wait "$sink" || true
    "$FB" relay --sut-port "$SUT_PORT" --sink-port "$SINK_PORT" --duration "$DURATION" --warmup 3s \
        --size "$size" --batch 200 --quiet --sut-cmd "exec $NAGARE run -c $ROOT/benches/relay.toml" \
        2>/dev/null | tail -n 1 > "$OUT/forward-$size-$i.json"
  done
done

python3 - "$OUT" "$RUNS" $SIZES <<'PY'
import json, re, statistics, sys
out, runs, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = statistics.median
# wrk stops counting at its deadline while its last requests are still
# answered: the sink may hold up to CONNECTIONS x 1000 events more than wrk
# counted, never fewer (fewer would be events lost).
print(f"medians of {runs} runs each, alternating (http, forward, http, ...)\n")
print("| bytes/event | http in ev/s | forward in ev/s | http / forward | nagare (http) cores | wrk cores | nagare (forward) cores | flowbench cores (forward) | http ev per nagare CPU-s | forward ev per nagare CPU-s | non-2xx | sink - counted (min, max) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for s in sizes:
    rows = []
    for i in range(1, runs + 1):
        w = dict(re.findall(r"(\w+)=(\d+)", open(f"{out}/wrk-{s}-{i}.txt").read().split("WRK", 1)[1]))
        ok = int(w["requests"]) - int(w["non2xx"])
        secs = int(w["duration_us"]) / 1e6
        sink = json.load(open(f"{out}/sink-{s}-{i}.json"))
        got = sink.get("events", sink.get("total_events", 0))
        u, sy = open(f"{out}/wrk-cpu-{s}-{i}.txt").read().split("WRKCPU", 1)[1].split()
        ncpu = float(open(f"{out}/nagare-cpu-{s}-{i}.txt").read())
        fwd = json.loads(open(f"{out}/forward-{s}-{i}.json").read())
        rows.append(dict(http=ok * 1000 / secs, fwd=fwd["steady_events_per_s"], non2xx=int(w["non2xx"]),
            extra=got - ok * 1000, ncores=ncpu / secs, wcores=(float(u) + float(sy)) / secs,
            fcores=fwd["sut_cores"], hcores=fwd["harness_cpu_s"] / (fwd["warmup_s"] + fwd["duration_s"]),
            hper=ok * 1000 / ncpu, fper=fwd["sut_events_per_cpu_s"]))
    m = lambda k: med(r[k] for r in rows)
    ratio = med(r["http"] / r["fwd"] for r in rows)
    print(f"| {s} | {m('http'):,.0f} | {m('fwd'):,.0f} | {ratio:.2f} | {m('ncores'):.2f} | {m('wcores'):.2f} | "
          f"{m('fcores'):.2f} | {m('hcores'):.2f} | {m('hper'):,.0f} | {m('fper'):,.0f} | "
          f"{sum(r['non2xx'] for r in rows)} | {min(r['extra'] for r in rows)}, {max(r['extra'] for r in rows)} |")
PY
