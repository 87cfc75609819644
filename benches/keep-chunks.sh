#!/usr/bin/env bash
# What `keep_chunks` does to a relay that acks only delivered events
# (forward input `ack = "delivered"`, benches/relay-delivered.toml): flowbench
# sends frames of 200 events and waits for each ack, through nagare with
# keep_chunks = true (each acked chunk sent on at once, with a derived id)
# and = false (merged into the buffer's chunks, sent at flush_interval),
# RUNS times each, alternating; prints a Markdown table of medians.
#
#   benches/keep-chunks.sh [RUNS] [DURATION]       (defaults: 3 runs of 6s)
#
# Ports: SUT_PORT, SINK_PORT (defaults 36234, 36235). Needs Go (flowbench).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
DURATION=${2:-6s}
SIZE=${SIZE:-100}
. benches/common.sh
results_dir keep-chunks
sed 's/^keep_chunks = true/keep_chunks = false/' benches/relay-delivered.toml > "$OUT/merged.toml"
grep -q '^keep_chunks = false' "$OUT/merged.toml"

run() { # run NAME CONFIG
  "$FB" relay --sut-port "${SUT_PORT:-36234}" --sink-port "${SINK_PORT:-36235}" --duration "$DURATION" --warmup 2s \
    --size "$SIZE" --batch 200 --ack --quiet --sut-cmd "exec $NAGARE run -c $2" 2>/dev/null | tail -n 1 >> "$OUT/$1.jsonl"
}
for i in $(seq "$RUNS"); do
  echo "run $i" >&2
  run kept "$ROOT/benches/relay-delivered.toml"
  run merged "$OUT/merged.toml"
done

python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def load(name):
    with open(f"{out}/{name}.jsonl") as f:
        return [json.loads(l) for l in f if l.strip()]
print("| keep_chunks | events/s (median) | runs | nagare ev per CPU-s | lost | duplicated |")
print("| --- | --- | --- | --- | --- | --- |")
for name, label in (("kept", "true"), ("merged", "false")):
    rows = load(name)
    print(f"| {label} | {statistics.median(r['steady_events_per_s'] for r in rows):,.0f} | "
          f"{' / '.join(format(r['steady_events_per_s'], ',.0f') for r in rows)} | "
          f"{statistics.median(r['sut_events_per_cpu_s'] for r in rows):,.0f} | "
          f"{sum(r['lost'] for r in rows)} | {sum(r['duplicates'] for r in rows)} |")
PY
