#!/usr/bin/env bash
# Issue 3's measurement: relay throughput with a file buffer as a ratio of the
# memory buffer, without and with acks (flowbench --ack: every frame carries a
# chunk id and waits for its ack; nagare fsyncs before acking), RUNS times
# each, interleaved; prints a Markdown table of medians.
#
#   benches/durability-compare.sh [RUNS] [DURATION] [CONNS]   (defaults: 3, 10s, 4)
#
# SIZES (default "100 1024") sets the bytes per event, BATCH (default 200)
# the events per frame.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
DURATION=${2:-10s}
CONNS=${3:-4}
SIZES=${SIZES:-"100 1024"}
BATCH=${BATCH:-200}
. benches/common.sh
results_dir durability

run() { # run NAME SIZE ACKFLAG CONFIG
  local bufdir
  bufdir=$(mktemp -d /tmp/nagare-bench-buf-XXXX)
  NAGARE_BUFFER_DIR=$bufdir "$FB" relay --sut-port "${SUT_PORT:-36224}" --sink-port "${SINK_PORT:-36225}" \
    --duration "$DURATION" --warmup 3s --size "$2" --batch "$BATCH" --conns "$CONNS" $3 --quiet \
    --sut-cmd "exec $NAGARE run -c $ROOT/benches/$4" 2>/dev/null | tail -n 1 >> "$OUT/$1-$2.jsonl"
  rm -rf "$bufdir"
}
for size in $SIZES; do
  for i in $(seq "$RUNS"); do
    echo "size $size run $i" >&2
    run memory "$size" "" relay-memory.toml
    run file "$size" "" relay-file.toml
    run memory-ack "$size" "--ack" relay-memory.toml
    run file-ack "$size" "--ack" relay-file.toml
  done
done

python3 - "$OUT" $SIZES <<'PY'
import json, statistics, sys
out, sizes = sys.argv[1], sys.argv[2:]
def load(name, size):
    with open(f"{out}/{name}-{size}.jsonl") as f:
        return [json.loads(l) for l in f if l.strip()]
med = lambda rows, k: statistics.median(r[k] for r in rows)
print("| bytes/event | buffer | acks | ev/s | vs memory, no ack | nagare cores | ev per CPU-s | peak RSS MB | lost | dup |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for s in sizes:
    base = med(load("memory", s), "steady_events_per_s")
    for name in ["memory", "file", "memory-ack", "file-ack"]:
        rows = load(name, s)
        ev = med(rows, "steady_events_per_s")
        print(f"| {s} | {name.split('-')[0]} | {'yes' if 'ack' in name else 'no'} | {ev:,.0f} | {ev/base:.2f} | "
              f"{med(rows,'sut_cores'):.2f} | {med(rows,'sut_events_per_cpu_s'):,.0f} | "
              f"{max(r['sut_peak_rss_mb'] for r in rows):.1f} | {sum(r['lost'] for r in rows)} | {sum(r['duplicates'] for r in rows)} |")
PY
