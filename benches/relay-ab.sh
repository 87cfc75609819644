#!/usr/bin/env bash
# Before/after pairs of the forward relay, alternated in one sitting, with the
# socat byte pipe in each round; prints a Markdown table of medians:
#
#   benches/relay-ab.sh BEFORE_BIN AFTER_BIN [ROUNDS] [DURATION]   (3 rounds of 8s)
#
# SIZES (default "100 1024") picks the event sizes. Needs Go (flowbench from
# ../shared/bench) and socat. docs/benchmarks/relay.md, session 15.
set -euo pipefail
B=$1 A=$2 ROUNDS=${3:-3} DUR=${4:-8s}
NAGARE_BIN=$A
. "$(dirname "$0")/common.sh"
CFG=$ROOT/benches/relay.toml
results_dir relay-ab
run() { # name size cmd
  "$FB" relay --sut-port 36224 --sink-port 36225 --duration "$DUR" --warmup 3s \
    --size "$2" --batch 200 --quiet --sut-cmd "$3" 2>/dev/null | tail -n 1 >> "$OUT/$1-$2.jsonl"
}
for size in ${SIZES:-100 1024}; do
  for i in $(seq "$ROUNDS"); do
    echo "size $size round $i $(cat /proc/loadavg)" >&2
    run socat "$size" 'exec socat -b 262144 TCP-LISTEN:$FLOWBENCH_SUT_PORT,reuseaddr,fork TCP:127.0.0.1:$FLOWBENCH_SINK_PORT'
    if [ $((i % 2)) = 1 ]; then run before "$size" "exec $B run -c $CFG"; run after "$size" "exec $A run -c $CFG"
    else run after "$size" "exec $A run -c $CFG"; run before "$size" "exec $B run -c $CFG"; fi
  done
done
python3 - "$OUT" ${SIZES:-100 1024} <<'PY'
import json, statistics, sys
out, sizes = sys.argv[1], sys.argv[2:]
load = lambda n, s: [json.loads(l) for l in open(f"{out}/{n}-{s}.jsonl") if l.strip()]
print("| bytes/event | socat ev/s | before ev/s | after ev/s | after / before (per-round median) | before / socat | after / socat | after ev per CPU-s | lost | dup |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for s in sizes:
    so, b, a = load("socat", s), load("before", s), load("after", s)
    m = lambda rows: statistics.median(r["steady_events_per_s"] for r in rows)
    ab = statistics.median(x["steady_events_per_s"] / y["steady_events_per_s"] for x, y in zip(a, b))
    bs = statistics.median(x["steady_events_per_s"] / y["steady_events_per_s"] for x, y in zip(b, so))
    as_ = statistics.median(x["steady_events_per_s"] / y["steady_events_per_s"] for x, y in zip(a, so))
    cpu = statistics.median(r["sut_events_per_cpu_s"] for r in a)
    print(f"| {s} | {m(so):,.0f} | {m(b):,.0f} | {m(a):,.0f} | {ab:.2f} | {bs:.2f} | {as_:.2f} | {cpu:,.0f} | {sum(r['lost'] for r in a+b)} | {sum(r['duplicates'] for r in a+b)} |")
    print("per-round after/before:", [round(x["steady_events_per_s"] / y["steady_events_per_s"], 3) for x, y in zip(a, b)], file=sys.stderr)
PY
