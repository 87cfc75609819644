#!/usr/bin/env bash
# The Scribe relay of issue 13: scribe-bench sends Log calls into nagare's
# scribe input, nagare relays them with its scribe output to scribe-bench's
# sink (benches/scribe-relay.toml). A seed-style table of messages/s for
# bytes/msg x msg/call, next to the forward relay (flowbench relay with
# benches/relay.toml) at the same sizes and batch sizes.
#
#   benches/scribe.sh [DURATION] [RUNS]   (defaults: 10s per cell, 1 run)
#
# With RUNS > 1 every cell is measured RUNS times (scribe, forward, scribe,
# ...) and the table holds medians. The floor column is the same sender
# straight into its own sink, no relay; the proxy floor column the same
# sender through `scribe-bench proxy` (the least any Scribe relay must do:
# read each call, answer it, send its entries on unchanged to the sink,
# several calls in flight), the most any relay could reach.
# The CPU columns are nagare's cores
# (CPU seconds over the sending time) in either relay and the senders'.
# SIZES and PER_CALL (space-separated) override the grid; SUT_PORT and
# SINK_PORT the ports. CONNS (default 4) is the number of client
# connections on both sides: scribe-bench's senders, and flowbench's
# (a Scribe client waits for each call's answer, so one connection moves
# one call per round trip; the forward sender gets the same number).
# Needs Go (flowbench, from ../shared/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10s}
RUNS=${2:-1}
SIZES=${SIZES:-"100 400 1200 4800"}
PER_CALL=${PER_CALL:-"50 200 800"}
CONNS=${CONNS:-4}
export SCRIBE_SUT_PORT=${SUT_PORT:-40300} SCRIBE_SINK_PORT=${SINK_PORT:-40301}
. benches/common.sh
results_dir scribe
# SCRIBE_BENCH=path uses that scribe-bench binary instead (no build).
if [ -z "${SCRIBE_BENCH:-}" ]; then
  cargo build --release -p nagare-bench --bin scribe-bench --manifest-path "$ROOT/Cargo.toml" >&2
fi
SB=${SCRIBE_BENCH:-$ROOT/target/release/scribe-bench}
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

# through NAME KEY CMD...: one run of the sender through the relay CMD
# (listening on the SUT port) into scribe-bench's sink; appends the run to
# $OUT/NAME.jsonl with the relay's cores as KEY and the sender's as bench_cores.
through() {
  local name=$1 key=$2 pid ncpu
  shift 2
  "$@" & pid=$!
  wait_port "$SCRIBE_SUT_PORT" || { kill "$pid"; echo "$name: the relay did not listen" >&2; exit 1; }
  /usr/bin/time -f "%U %S" -o "$OUT/sb-cpu.txt" \
    "$SB" --sut-port "$SCRIBE_SUT_PORT" --sink-port "$SCRIBE_SINK_PORT" --size "$size" \
    --per-call "$n" --duration "$DURATION" --connections "$CONNS" > "$OUT/sb.json"
  ncpu=$(cpu "$pid")
  kill "$pid"; wait "$pid" || true
  python3 -c "import json; r=json.load(open('$OUT/sb.json')); u,s=open('$OUT/sb-cpu.txt').read().split()[-2:]; r.update($key=$ncpu/r['seconds'], bench_cores=(float(u)+float(s))/r['seconds']); print(json.dumps(r))" \
    >> "$OUT/$name.jsonl"
}

for size in $SIZES; do
  for n in $PER_CALL; do
   for i in $(seq "$RUNS"); do
    echo "size $size, $n per call, run $i" >&2
    through scribe nagare_cores "$NAGARE" run -c "$ROOT/benches/scribe-relay.toml"
    # The floor: the same sender straight into scribe-bench's own sink (a
    # Scribe server that only reads each call, checks it and answers OK),
    # no relay. No relay can beat it: the input side of one does at least
    # this work per call, and the relay's output and sink come on top.
    "$SB" --sut-port "$SCRIBE_SINK_PORT" --sink-port "$SCRIBE_SINK_PORT" --size "$size" \
      --per-call "$n" --duration "$DURATION" --connections "$CONNS" >> "$OUT/floor.jsonl"
    # The proxy floor: a relay that does nothing but what every Scribe
    # relay must (two Scribe hops), in place of nagare.
    through proxy proxy_cores "$SB" proxy --listen "$SCRIBE_SUT_PORT" --to "$SCRIBE_SINK_PORT"
    "$FB" relay --sut-port "$SCRIBE_SUT_PORT" --sink-port "$SCRIBE_SINK_PORT" --duration "$DURATION" \
      --warmup 2s --size "$size" --batch "$n" --conns "$CONNS" --quiet \
      --sut-cmd "exec $NAGARE run -c $ROOT/benches/relay.toml" 2>/dev/null | tail -n 1 \
      | python3 -c "import json,sys; r=json.load(sys.stdin); r.update(size=$size, per_call=$n); print(json.dumps(r))" \
      >> "$OUT/forward.jsonl"
   done
  done
done

python3 - "$OUT" <<'PY'
import json, statistics, sys
from collections import defaultdict
out = sys.argv[1]
def load(n):
    d = defaultdict(list)
    for r in map(json.loads, open(f"{out}/{n}.jsonl")):
        d[(r["size"], r["per_call"])].append(r)
    return d
sc, fw, fl, px = load("scribe"), load("forward"), load("floor"), load("proxy")
med = lambda rows, k: statistics.median(r[k] for r in rows) if rows else 0
print("| bytes/msg | msg/call | scribe relay msg/s | Mbps | forward relay ev/s | scribe / forward | floor (no relay) msg/s | floor / forward | scribe relay / floor | proxy floor msg/s | proxy floor / forward | scribe relay / proxy floor | nagare cores (scribe) | scribe-bench cores | proxy cores | nagare cores (forward) | lost | duplicated | TRY_LATER |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
def ratio(xs, ys, kx, ky):
    r = [a[kx] / b[ky] for a, b in zip(xs, ys) if b[ky]]
    return f"{statistics.median(r):.2f}" if r else "-"
for key in sorted(sc):
    s, f = sc[key], fw.get(key, [])
    lo, p = fl.get(key, []), px.get(key, [])
    print(f"| {key[0]} | {key[1]} | {med(s,'msg_per_s'):,.0f} | {med(s,'mbps'):,.0f} | {med(f,'steady_events_per_s'):,.0f} | "
          f"{ratio(s, f, 'msg_per_s', 'steady_events_per_s')} | {med(lo,'msg_per_s'):,.0f} | "
          f"{ratio(lo, f, 'msg_per_s', 'steady_events_per_s')} | {ratio(s, lo, 'msg_per_s', 'msg_per_s')} | "
          f"{med(p,'msg_per_s'):,.0f} | {ratio(p, f, 'msg_per_s', 'steady_events_per_s')} | {ratio(s, p, 'msg_per_s', 'msg_per_s')} | "
          f"{med(s,'nagare_cores'):.2f} | {med(s,'bench_cores'):.2f} | {med(p,'proxy_cores'):.2f} | {med(f,'sut_cores'):.2f} | "
          f"{sum(r['lost'] for r in s + p)} | {sum(r['duplicated'] for r in s + p)} | {sum(r['try_later'] for r in s + p)} |")
PY
