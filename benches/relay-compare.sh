#!/usr/bin/env bash
# The relay comparison of issue 2: for each event size, `flowbench relay
# --baseline` (sender → SUT → sink, plus the no-SUT direct baseline) with
# nagare (benches/relay.toml) and with a socat byte pipe as the physical
# reference, RUNS times each, interleaved; prints a Markdown table of medians.
#
#   benches/relay-compare.sh [RUNS] [DURATION]      (defaults: 3 runs of 10s)
#
# NAGARE_BEFORE=path adds that binary as "before", run in every round beside
# the pipe and nagare (in alternating order), and a column of the per-round
# after / before ratios: before/after pairs in one sitting.
#
# Needs Go (to build flowbench from ../shared/bench) and socat.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
DURATION=${2:-10s}
SIZES=${SIZES:-"100 1024 4800"}
command -v socat >/dev/null || { echo "socat is needed (apt-get install socat)" >&2; exit 1; }
. benches/common.sh
results_dir relay

run() { # run NAME SIZE CMD
  "$FB" relay --sut-port "${SUT_PORT:-36224}" --sink-port "${SINK_PORT:-36225}" --duration "$DURATION" --warmup 3s \
    --baseline --size "$2" --batch 200 --quiet --sut-cmd "$3" 2>/dev/null | tail -n 1 >> "$OUT/$1-$2.jsonl"
}
for size in $SIZES; do
  for i in $(seq "$RUNS"); do
    echo "size $size run $i" >&2
    run socat "$size" 'exec socat -b 262144 TCP-LISTEN:$FLOWBENCH_SUT_PORT,reuseaddr,fork TCP:127.0.0.1:$FLOWBENCH_SINK_PORT'
    if [ -z "${NAGARE_BEFORE:-}" ]; then
      run nagare "$size" "exec $NAGARE run -c $ROOT/benches/relay.toml"
    elif [ $((i % 2)) = 1 ]; then
      run before "$size" "exec $NAGARE_BEFORE run -c $ROOT/benches/relay.toml"
      run nagare "$size" "exec $NAGARE run -c $ROOT/benches/relay.toml"
    else
      run nagare "$size" "exec $NAGARE run -c $ROOT/benches/relay.toml"
      run before "$size" "exec $NAGARE_BEFORE run -c $ROOT/benches/relay.toml"
    fi
  done
done

python3 - "$OUT" $SIZES <<'PY'
import json, os, statistics, sys
out, sizes = sys.argv[1], sys.argv[2:]
def load(name, size):
    with open(f"{out}/{name}-{size}.jsonl") as f:
        return [json.loads(l) for l in f if l.strip()]
med = lambda rows, k: statistics.median(r[k] for r in rows)
print("| bytes/event | socat ev/s | nagare ev/s | nagare Mbps | nagare / socat | efficiency (vs direct) | nagare ev per CPU-s | nagare cores | peak RSS MB | lost | duplicated |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for s in sizes:
    so, na = load("socat", s), load("nagare", s)
    ratio = statistics.median(n["steady_events_per_s"] / o["steady_events_per_s"] for n, o in zip(na, so))
    print(f"| {s} | {med(so,'steady_events_per_s'):,.0f} | {med(na,'steady_events_per_s'):,.0f} | {med(na,'steady_mbps'):,.0f} | "
          f"{ratio:.2f} | {med(na,'efficiency'):.2f} | {med(na,'sut_events_per_cpu_s'):,.0f} | {med(na,'sut_cores'):.2f} | "
          f"{max(r['sut_peak_rss_mb'] for r in na):.1f} | {sum(r['lost'] for r in na)} | {sum(r['duplicates'] for r in na)} |")
if os.path.exists(f"{out}/before-{sizes[0]}.jsonl"):
    print()
    print("| bytes/event | before ev/s | nagare ev/s | nagare / before (median of rounds) | each round | before ev per CPU-s | nagare ev per CPU-s | before lost, dup |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in sizes:
        be, na = load("before", s), load("nagare", s)
        rounds = [n["steady_events_per_s"] / b["steady_events_per_s"] for n, b in zip(na, be)]
        print(f"| {s} | {med(be,'steady_events_per_s'):,.0f} | {med(na,'steady_events_per_s'):,.0f} | {statistics.median(rounds):.2f} | "
              f"{', '.join(f'{r:.2f}' for r in rounds)} | {med(be,'sut_events_per_cpu_s'):,.0f} | {med(na,'sut_events_per_cpu_s'):,.0f} | "
              f"{sum(r['lost'] for r in be)}, {sum(r['duplicates'] for r in be)} |")
PY
