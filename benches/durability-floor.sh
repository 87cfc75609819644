#!/usr/bin/env bash
# How close the file buffer's acked path comes to what this machine's disk
# allows. Runs, interleaved, RUNS times per connection count:
#   memory+ack  nagare relay, memory buffer, every frame acked (relay-memory.toml)
#   file+ack    nagare relay, file buffer, fsync before each ack (relay-file.toml)
#   floor       examples/ack_floor.rs: writes each frame to a file, fdatasync
#               (group commit), acks; no routing, no buffer, no forwarding: the
#               fastest any durable acker can be here
#   floor-nosync  the same without the fdatasync (its network and CPU cost)
# and prints a Markdown table of medians (acked events/s as the sender saw them).
#
#   benches/durability-floor.sh [RUNS] [DURATION] [CONNS...]   (defaults: 3, 6s, 1 4 16)
#
# SIZE (default 100) sets the bytes per event, BATCH (default 200) the
# events per frame.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
DURATION=${2:-6s}
shift 2 2>/dev/null || true
CONNS=${*:-"1 4 16"}
SIZE=${SIZE:-100}
BATCH=${BATCH:-200}
. benches/common.sh
results_dir durability-floor
cargo build --release -p nagare --example ack_floor --manifest-path "$ROOT/Cargo.toml" >&2
FLOOR=$ROOT/target/release/examples/ack_floor
PORT=${SUT_PORT:-36230}

relay() { # relay NAME CONNS CONFIG
  local bufdir
  bufdir=$(mktemp -d /tmp/nagare-bench-buf-XXXX)
  NAGARE_BUFFER_DIR=$bufdir "$FB" relay --sut-port "$PORT" --sink-port "$((PORT + 1))" \
    --duration "$DURATION" --warmup 2s --size "$SIZE" --batch "$BATCH" --conns "$2" --ack --quiet \
    --sut-cmd "exec $NAGARE run -c $ROOT/benches/$3" 2>/dev/null | tail -n 1 >> "$OUT/$1-$2.jsonl"
  rm -rf "$bufdir"
}

floor() { # floor NAME CONNS sync|nosync
  local dir pid
  dir=$(mktemp -d /tmp/nagare-bench-floor-XXXX)
  "$FLOOR" "127.0.0.1:$PORT" "$dir" "$3" 2>/dev/null &
  pid=$!
  wait_port "$PORT" || { echo "ack_floor did not listen on $PORT" >&2; exit 1; }
  "$FB" send --addr "127.0.0.1:$PORT" --duration "$DURATION" --size "$SIZE" --batch "$BATCH" \
    --conns "$2" --ack 2>/dev/null | tail -n 1 >> "$OUT/$1-$2.jsonl"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}

for c in $CONNS; do
  for i in $(seq "$RUNS"); do
    echo "conns $c run $i" >&2
    relay memory-ack "$c" relay-memory.toml
    relay file-ack "$c" relay-file.toml
    floor floor "$c" sync
    floor floor-nosync "$c" nosync
  done
done

python3 - "$OUT" $CONNS <<'PY'
import json, statistics, sys
out, conns = sys.argv[1], sys.argv[2:]
# relay lines (memory-ack, file-ack) and send lines (floor) name their figures differently
def events(r): return r["send_events_per_s"] if "send_events_per_s" in r else r["events_per_s"]
def unacked(r): return r["lost"] if "lost" in r else r["events"] - r["acked"]
def med(name, c):
    with open(f"{out}/{name}-{c}.jsonl") as f:
        rows = [json.loads(l) for l in f if l.strip()]
    return statistics.median(events(r) for r in rows), sum(unacked(r) for r in rows)
print("| conns | memory+ack ev/s | file+ack ev/s | floor ev/s | floor, no fsync, ev/s | file+ack / memory+ack | floor / memory+ack | file+ack / floor | unacked |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for c in conns:
    (m, l1), (f, l2), (fl, l3), (fn, l4) = (med(n, c) for n in ["memory-ack", "file-ack", "floor", "floor-nosync"])
    print(f"| {c} | {m:,.0f} | {f:,.0f} | {fl:,.0f} | {fn:,.0f} | {f/m:.2f} | {fl/m:.2f} | {f/fl:.2f} | {l1+l2+l3+l4} |")
PY
