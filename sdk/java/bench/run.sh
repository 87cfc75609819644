#!/usr/bin/env bash
# Benchmark: nagare-logger vs Fluency 2.7.0 vs fluent-logger 0.3.4, one emitting thread,
# 100-byte records, into flowbench's forward sink. Prints one JSON line per run and the medians.
#   usage: bench/run.sh [RUNS=3] [COUNT=2000000] [WARMUP=500000]
# fluent-logger (synchronous, one write per event) gets COUNT/10 events to keep the run short.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
runs="${1:-3}"; count="${2:-2000000}"; warmup="${3:-500000}"
fb="$root/../shared/bench/bin/flowbench"
[ -x "$fb" ] || fb=/work/shared/bench/bin/flowbench
if [ ! -x "$fb" ]; then
  (cd "$(dirname "$fb")/../flowbench" && go build -o ../bin/flowbench ./...)
fi
(cd "$here/.." && mvn -B -q install -DskipTests -Dspotless.check.skip=true)
(cd "$here" && mvn -B -q package dependency:build-classpath -Dmdep.outputFile=target/cp.txt)
cp="$here/target/classes:$(cat "$here/target/cp.txt")"
out="$here/target/results"; mkdir -p "$out"; : > "$out/all.jsonl"
port=$((30000 + RANDOM % 20000))
for lib in nagare fluency fluent-logger; do
  n=$count; w=$warmup
  if [ "$lib" = fluent-logger ]; then n=$((count / 10)); w=$((warmup / 10)); fi
  for r in $(seq 1 "$runs"); do
    port=$((port + 1))
    "$fb" sink --listen "127.0.0.1:$port" --idle-exit 3s --verify --expect $((w + n)) \
      --quiet --json-summary "$out/sink-$lib-$r.json" > /dev/null 2>&1 &
    sink=$!
    sleep 0.5
    line=$(java -Xms1g -Xmx4g -cp "$cp" dev.nagare.bench.Bench "$lib" "$port" "$w" "$n")
    wait "$sink" || true
    sinkline=$(python3 -c "import json;d=json.load(open('$out/sink-$lib-$r.json'));print(json.dumps({k:d.get(k) for k in ('events','missing','duplicates','errors')}))")
    echo "$line $sinkline" | tee -a "$out/all.jsonl"
  done
done
python3 - "$out/all.jsonl" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    a, b = line.strip().split("} {")
    r = json.loads(a + "}"); s = json.loads("{" + b)
    rows.setdefault(r["lib"], []).append((r, s))
med = {}
for lib, rs in rows.items():
    eps = statistics.median(r["events_per_s"] for r, _ in rs)
    ns = statistics.median(r["emit_ns_per_call"] for r, _ in rs)
    ok = all(s["missing"] == 0 and s["events"] == s["events"] for _, s in rs)
    med[lib] = eps
    print(f"{lib:14s} median events/s {eps:12,.0f}   emit {ns:8.1f} ns/call   sink complete: {ok}")
for other in ("fluency", "fluent-logger"):
    if other in med and "nagare" in med:
        print(f"nagare / {other}: {med['nagare'] / med[other]:.1f}x")
PY
