#!/usr/bin/env bash
# The cost of a json parser filter (benches/filter-parser.toml), and that
# tags no filter selects do not pay for it:
#
# 1. `nagare gen` sends N events {"seq", "message": "<JSON line>"} in
#    PackedForward frames of 200 as fast as nagare takes them → nagare
#    (forward in, parser filter, forward out) → flowbench's sink, which
#    checks every seq. Tag app.load goes through the filter; tag other.load
#    through the same daemon without it. Reports events/s at the sink over
#    its active window and events per nagare CPU-second.
# 2. `flowbench relay` (size 100, batch 200) through benches/relay.toml (no
#    filters) and through benches/filter-parser.toml with tag bench.load (a
#    filter is configured, none selects the tag). NAGARE_BASE_BIN=path adds
#    that binary on relay.toml (e.g. a build from before filters existed).
#
#   benches/filter-parser.sh [RUNS] [EVENTS] [DURATION]   (defaults: 3, 2000000, 8s)
#
# Needs Go (to build flowbench from ../shared/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
EVENTS=${2:-2000000}
DURATION=${3:-8s}
. benches/common.sh
results_dir filter
SUT=${SUT_PORT:-36324}
SINK=${SINK_PORT:-36325}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

gen_run() { # gen_run TAG
  local tag=$1 cfg="$OUT/gen-$1.toml"
  printf 'forward = "127.0.0.1:%s"\ntag = "%s"\n' "$SUT" "$tag" > "$cfg"
  cat benches/filter-parser-gen.toml >> "$cfg"
  "$FB" sink --listen "127.0.0.1:$SINK" --verify --expect "$EVENTS" --idle-exit 5s --quiet \
    --json-summary "$OUT/sink.json" > /dev/null 2>> "$OUT/sink.log" &
  local sink=$!
  FLOWBENCH_SUT_PORT=$SUT FLOWBENCH_SINK_PORT=$SINK "$NAGARE" run -c benches/filter-parser.toml \
    > "$OUT/nagare-$tag.log" 2>&1 &
  local sut=$!
  wait_port "$SUT" || true
  local c0; c0=$(cpu_ticks "$sut")
  "$NAGARE" gen -c "$cfg" --count "$EVENTS" 2>> "$OUT/gen-$tag.log"
  wait "$sink"
  local c1; c1=$(cpu_ticks "$sut")
  kill -TERM "$sut"; wait "$sut" || true
  python3 - "$OUT/sink.json" "$tag" "$(( c1 - c0 ))" "$(getconf CLK_TCK)" >> "$OUT/gen.jsonl" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
cpu = int(sys.argv[3]) / int(sys.argv[4])
print(json.dumps({"tag": sys.argv[2], "events": s["events"], "missing": s.get("missing", 0),
  "duplicates": s.get("duplicates", 0), "events_per_s": s["events_per_s"],
  "cpu_s": cpu, "events_per_cpu_s": s["events"] / cpu if cpu else 0}))
PY
}

relay_run() { # relay_run NAME BINARY CONFIG
  "$FB" relay --sut-port "$SUT" --sink-port "$SINK" --duration "$DURATION" --warmup 3s \
    --size 100 --batch 200 --quiet --tag bench.load \
    --sut-cmd "exec $2 run -c $ROOT/$3" 2>/dev/null | tail -n 1 >> "$OUT/relay-$1.jsonl"
}

for i in $(seq "$RUNS"); do
  echo "run $i" >&2
  gen_run app.load
  gen_run other.load
  relay_run plain "$NAGARE" benches/relay.toml
  relay_run unselected "$NAGARE" benches/filter-parser.toml
  if [ -n "${NAGARE_BASE_BIN:-}" ]; then
    relay_run base "$NAGARE_BASE_BIN" benches/relay.toml
  fi
done

python3 - "$OUT" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/gen.jsonl") if l.strip()]
med = lambda rs, k: statistics.median(r[k] for r in rs)
print("| tag | filter | events/s at the sink | events per nagare CPU-s | missing | duplicated |")
print("| --- | --- | --- | --- | --- | --- |")
for tag, what in (("app.load", "json parser"), ("other.load", "none selects the tag")):
    rs = [r for r in rows if r["tag"] == tag]
    print(f"| {tag} | {what} | {med(rs,'events_per_s'):,.0f} | {med(rs,'events_per_cpu_s'):,.0f} | "
          f"{sum(r['missing'] for r in rs)} | {sum(r['duplicates'] for r in rs)} |")
print()
print("| relay (size 100, batch 200) | steady ev/s | ev per CPU-s | lost | duplicated |")
print("| --- | --- | --- | --- | --- |")
for name, what in (("base", "NAGARE_BASE_BIN, relay.toml"), ("plain", "relay.toml (no filters)"),
                   ("unselected", "filter-parser.toml, tag bench.load (no filter selects it)")):
    p = f"{out}/relay-{name}.jsonl"
    if not os.path.exists(p):
        continue
    rs = [json.loads(l) for l in open(p) if l.strip()]
    print(f"| {what} | {med(rs,'steady_events_per_s'):,.0f} | {med(rs,'sut_events_per_cpu_s'):,.0f} | "
          f"{sum(r['lost'] for r in rs)} | {sum(r['duplicates'] for r in rs)} |")
PY
