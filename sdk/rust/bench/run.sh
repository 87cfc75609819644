#!/usr/bin/env bash
# Benchmark: events/s and emit() cost from one thread, 100-byte records, into
# the flowbench sink; nagare-logger against tracing-fluentd 0.5.
#   sdk/rust/bench/run.sh            (N=2000000 events, RUNS=3, median reported)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
N="${N:-2000000}"
RUNS="${RUNS:-3}"
IMPLS="${IMPLS:-nagare nagare-tracing tracing-fluentd}"
FB="${FLOWBENCH:-/work/shared/bench/bin/flowbench}"
if [ ! -x "$FB" ]; then
  (cd /work/shared/bench/flowbench && go build -o ../bin/flowbench ./...)
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/sdk-rust-bench}"
cargo build --release --manifest-path "$HERE/Cargo.toml"
BIN="$CARGO_TARGET_DIR/release/nagare-logger-bench"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

for impl in $IMPLS; do
  for r in $(seq 1 "$RUNS"); do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$FB" sink --listen "127.0.0.1:$port" --idle-exit 3s --quiet --verify >"$OUT/sink.json" &
    sink=$!
    for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    "$BIN" "$impl" "127.0.0.1:$port" "$N" >"$OUT/client.json"
    wait "$sink"
    python3 - "$OUT/client.json" "$OUT/sink.json" "$r" >>"$OUT/results.jsonl" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); s = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
c.update(run=int(sys.argv[3]), sink_events=s["events"], sink_missing=s.get("missing"),
         sink_duplicates=s.get("duplicates"), sink_events_per_s=round(s["events_per_s"]))
print(json.dumps(c))
PY
    tail -n 1 "$OUT/results.jsonl"
  done
done

python3 - "$OUT/results.jsonl" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
print()
print(f"{'impl':<16} {'events/s (median)':>18} {'emit ns mean':>13} {'emit ns p50':>12} {'emit ns p99':>12} {'received':>10}")
med = {}
for impl in dict.fromkeys(r["impl"] for r in rows):
    rs = [r for r in rows if r["impl"] == impl]
    eps = st.median(r["events_per_s"] for r in rs); med[impl] = eps
    print(f"{impl:<16} {eps:>18,.0f} {st.median(r['emit_ns_mean'] for r in rs):>13.1f} "
          f"{st.median(r['emit_ns_p50'] for r in rs):>12.0f} {st.median(r['emit_ns_p99'] for r in rs):>12.0f} "
          f"{min(r['sink_events'] for r in rs):>10}")
if "tracing-fluentd" in med:
    for k in ("nagare", "nagare-tracing"):
        if k in med:
            print(f"{k} / tracing-fluentd: {med[k] / med['tracing-fluentd']:.1f}x")
PY
