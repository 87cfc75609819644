#!/usr/bin/env bash
# The cost of one filter on a forward relay: `flowbench relay` (100-byte
# events {"seq", "message"}, PackedForward frames of 200, as fast as nagare
# takes them) through benches/relay.toml (no filter) and through
# benches/filter-FILTER.toml (the same relay with one filter that selects
# every event and keeps every event, so the sink's seq check still holds),
# interleaved, RUNS times each. Prints the medians of events per nagare
# CPU-second and at the sink, and the ratio filtered / plain.
#
#   benches/filters.sh FILTER [RUNS] [DURATION]   (FILTER: grep, modify, rewrite_tag, throttle, sample, exec, exec-msgpack, lua, lua-lazy;
#                                                  defaults: 3 runs of 8s)
#
# Needs Go (to build flowbench from ../shared/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
FILTER=${1:?usage: benches/filters.sh FILTER [RUNS] [DURATION]}
RUNS=${2:-3}
DURATION=${3:-8s}
[ -f "benches/filter-$FILTER.toml" ] || { echo "no benches/filter-$FILTER.toml" >&2; exit 2; }
. benches/common.sh
results_dir "filters-$FILTER"
SUT=${SUT_PORT:-36326}
SINK=${SINK_PORT:-36327}

relay_run() { # relay_run NAME CONFIG
  "$FB" relay --sut-port "$SUT" --sink-port "$SINK" --duration "$DURATION" --warmup 3s \
    --size 100 --batch 200 --quiet --tag bench.load \
    --sut-cmd "exec $NAGARE run -c $ROOT/$2" 2>/dev/null | tail -n 1 >> "$OUT/relay-$1.jsonl"
}

for i in $(seq "$RUNS"); do
  echo "run $i" >&2
  relay_run plain benches/relay.toml
  relay_run "$FILTER" "benches/filter-$FILTER.toml"
done

python3 - "$OUT" "$FILTER" <<'PY'
import json, statistics, sys
out, name = sys.argv[1], sys.argv[2]
def rows(n):
    return [json.loads(l) for l in open(f"{out}/relay-{n}.jsonl") if l.strip()]
med = lambda rs, k: statistics.median(r[k] for r in rs)
print("| relay (size 100, batch 200) | steady ev/s at the sink | ev per nagare CPU-s | lost | duplicated |")
print("| --- | --- | --- | --- | --- |")
for n, what in (("plain", "relay.toml (no filter)"), (name, f"filter-{name}.toml")):
    rs = rows(n)
    print(f"| {what} | {med(rs,'steady_events_per_s'):,.0f} | {med(rs,'sut_events_per_cpu_s'):,.0f} | "
          f"{sum(r['lost'] for r in rs)} | {sum(r['duplicates'] for r in rs)} |")
ratio = med(rows(name), 'sut_events_per_cpu_s') / med(rows("plain"), 'sut_events_per_cpu_s')
print(f"\nratio of events per CPU-second, {name} / plain: {ratio:.2f}")
PY
