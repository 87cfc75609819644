#!/usr/bin/env bash
# The Scribe relay of issue 13: scribe-bench sends Log calls into nagare's
# scribe input, nagare relays them with its scribe output to scribe-bench's
# sink (benches/scribe-relay.toml). A seed-style table of messages/s for
# bytes/msg x msg/call, next to the forward relay (flowbench relay with
# benches/relay.toml) at the same sizes and batch sizes.
#
#   benches/scribe.sh [DURATION]      (default 10s per cell)
#
# SIZES and PER_CALL (space-separated) override the grid; SUT_PORT and
# SINK_PORT the ports. Needs Go (flowbench, from ../shared/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10s}
SIZES=${SIZES:-"100 400 1200 4800"}
PER_CALL=${PER_CALL:-"50 200 800"}
export SCRIBE_SUT_PORT=${SUT_PORT:-40300} SCRIBE_SINK_PORT=${SINK_PORT:-40301}
. benches/common.sh
results_dir scribe
# SCRIBE_BENCH=path uses that scribe-bench binary instead (no build).
if [ -z "${SCRIBE_BENCH:-}" ]; then
  cargo build --release -p nagare-bench --bin scribe-bench --manifest-path "$ROOT/Cargo.toml" >&2
fi
SB=${SCRIBE_BENCH:-$ROOT/target/release/scribe-bench}

for size in $SIZES; do
  for n in $PER_CALL; do
    echo "size $size, $n per call" >&2
    "$NAGARE" run -c "$ROOT/benches/scribe-relay.toml" & pid=$!
    wait_port "$SCRIBE_SUT_PORT" || { kill "$pid"; echo "nagare did not listen" >&2; exit 1; }
    "$SB" --sut-port "$SCRIBE_SUT_PORT" --sink-port "$SCRIBE_SINK_PORT" --size "$size" \
      --per-call "$n" --duration "$DURATION" >> "$OUT/scribe.jsonl"
    kill "$pid"; wait "$pid" || true
    "$FB" relay --sut-port "$SCRIBE_SUT_PORT" --sink-port "$SCRIBE_SINK_PORT" --duration "$DURATION" \
      --warmup 2s --size "$size" --batch "$n" --quiet \
      --sut-cmd "exec $NAGARE run -c $ROOT/benches/relay.toml" 2>/dev/null | tail -n 1 \
      | python3 -c "import json,sys; r=json.load(sys.stdin); r.update(size=$size, per_call=$n); print(json.dumps(r))" \
      >> "$OUT/forward.jsonl"
  done
done

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
load = lambda n: {(r["size"], r["per_call"]): r for r in map(json.loads, open(f"{out}/{n}.jsonl"))}
sc, fw = load("scribe"), load("forward")
print("| bytes/msg | msg/call | scribe relay msg/s | Mbps | forward relay ev/s | scribe / forward | lost | duplicated | TRY_LATER |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for key in sorted(sc):
    s, f = sc[key], fw.get(key, {})
    fe = f.get("steady_events_per_s", 0)
    ratio = f"{s['msg_per_s'] / fe:.2f}" if fe else "-"
    print(f"| {key[0]} | {key[1]} | {s['msg_per_s']:,.0f} | {s['mbps']:,.0f} | {fe:,.0f} | {ratio} | {s['lost']} | {s['duplicated']} | {s['try_later']} |")
PY
