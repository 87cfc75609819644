#!/usr/bin/env bash
# Benchmark: nagare-logger vs Fluency 2.7.0 vs fluent-logger 0.3.4, one emitting thread,
# 100-byte records, into flowbench's forward sink. Prints one JSON line per run and the medians.
#   usage: bench/run.sh [RUNS=3] [COUNT=2000000] [WARMUP=500000]
# LIBS="nagare fluency" runs only those libraries (default: nagare fluency fluent-logger);
# record-only in LIBS runs the loop with no library (the record alone), and the summary then
# also gives each library's emit CPU with the record's CPU taken off.
# fluent-logger (synchronous, one write per event) gets COUNT/10 events to keep the run short.
# BENCH_RECORD=reuse gives every emit the same map (its "seq" replaced) instead of a new
# LinkedHashMap per event: the emit loop then measures emit() without the benchmark's own
# allocation, which is most of a profile of the loop (both libraries encode inside emit()).
# NAGARE_SINK=1 sends into the nagare daemon instead ($NAGARE_BIN, default target/release/nagare:
# forward input -> null output, with its monitor); a run ends when the monitor's null output count
# reaches WARMUP + COUNT.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
runs="${1:-3}"; count="${2:-2000000}"; warmup="${3:-500000}"
fb="$root/../shared/bench/bin/flowbench"
[ -x "$fb" ] || fb=/work/shared/bench/bin/flowbench
nagare_sink="${NAGARE_SINK:-0}"
nagare_bin="${NAGARE_BIN:-$root/target/release/nagare}"
if [ "$nagare_sink" = 1 ]; then
  [ -x "$nagare_bin" ] || { echo "$nagare_bin missing: cargo build --release" >&2; exit 1; }
  echo "receiver: nagare ($nagare_bin), forward input -> null output" >&2
elif [ ! -x "$fb" ]; then
  (cd "$(dirname "$fb")/../flowbench" && go build -o ../bin/flowbench ./...)
fi
(cd "$here/.." && mvn -B -q install -DskipTests -Dspotless.check.skip=true)
(cd "$here" && mvn -B -q package dependency:build-classpath -Dmdep.outputFile=target/cp.txt)
cp="$here/target/classes:$(cat "$here/target/cp.txt")"
out="$here/target/results"; mkdir -p "$out"; : > "$out/all.jsonl"
port=$((30000 + RANDOM % 20000))
sink=""
trap '[ -z "$sink" ] || kill "$sink" 2>/dev/null || true' EXIT
# Run by run, each library in turn (nagare, fluency, fluent-logger, nagare...):
# a load change on a busy machine lands on every side, not on one library's runs.
for r in $(seq 1 "$runs"); do
  for lib in ${LIBS:-nagare fluency fluent-logger}; do
    n=$count; w=$warmup
    if [ "$lib" = fluent-logger ]; then n=$((count / 10)); w=$((warmup / 10)); fi
    port=$((port + 1))
    metrics=()
    if [ "$lib" = record-only ]; then
      # no library and no receiver: the CPU the loop spends on the record alone
      line=$(java -Xms1g -Xmx4g -cp "$cp" dev.nagare.bench.Bench "$lib" 0 "$w" "$n")
      echo "$line {\"events\": $((w + n)), \"missing\": 0, \"duplicates\": null, \"errors\": null}" | tee -a "$out/all.jsonl"
      continue
    fi
    if [ "$nagare_sink" = 1 ]; then
      # ports the OS says are free (a random one may be some connection's ephemeral port)
      read -r port mport < <(python3 -c 'import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')
      printf '[[input]]\ntype = "forward"\nbind = "127.0.0.1:%s"\n\n[[output]]\ntype = "null"\nmatch = "**"\n\n[monitor]\nbind = "127.0.0.1:%s"\n' \
        "$port" "$mport" > "$out/nagare.toml"
      "$nagare_bin" run -c "$out/nagare.toml" > "$out/nagare-$lib-$r.log" 2>&1 &
      metrics=("http://127.0.0.1:$mport/metrics")
    else
      "$fb" sink --listen "127.0.0.1:$port" --idle-exit 3s --verify --expect $((w + n)) \
        --quiet --json-summary "$out/sink-$lib-$r.json" > /dev/null 2>&1 &
    fi
    sink=$!
    sleep 0.5
    line=$(java -Xms1g -Xmx4g -cp "$cp" dev.nagare.bench.Bench "$lib" "$port" "$w" "$n" "${metrics[@]}")
    if [ "$nagare_sink" = 1 ]; then
      kill -TERM "$sink"
      wait "$sink" || true
      # nagare's monitor count (warm-up included) when the run ended; nagare does not check seqs
      sinkline=$(python3 -c "import json;d=json.loads('$line');print(json.dumps({'events':d['received'],'missing':$((w + n))-d['received'],'duplicates':None,'errors':None}))")
    else
      wait "$sink" || true
      sinkline=$(python3 -c "import json;d=json.load(open('$out/sink-$lib-$r.json'));print(json.dumps({k:d.get(k) for k in ('events','missing','duplicates','errors')}))")
    fi
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
    cpu = statistics.median(r["emit_cpu_ns_per_call"] for r, _ in rs)
    ok = all(s["missing"] == 0 and s["events"] == s["events"] for _, s in rs)
    med[lib] = (eps, ns, cpu)
    print(f"{lib:14s} median events/s {eps:12,.0f}   emit {ns:8.1f} ns/call"
          f" ({cpu:8.1f} ns CPU)   sink complete: {ok}")
for other in ("fluency", "fluent-logger"):
    if other in med and "nagare" in med:
        (e, n, c), (oe, on, oc) = med["nagare"], med[other]
        print(f"nagare / {other}: events/s {e / oe:.1f}x, emit {on / n:.1f}x cheaper"
              f" ({oc / c:.1f}x in CPU time)")
        if "record-only" in med:
            rc = med["record-only"][2]
            print(f"  emit() alone (CPU minus the record's {rc:.1f} ns): nagare {c - rc:.1f} ns,"
                  f" {other} {oc - rc:.1f} ns: {(oc - rc) / (c - rc):.1f}x")
PY
