#!/usr/bin/env bash
# Benchmark: events/s and emit() cost from one thread, 100-byte records, into
# the flowbench sink; nagare-logger against tracing-fluentd 0.5.
#   sdk/rust/bench/run.sh            (N=2000000 events, RUNS=3, median reported)
# NAGARE_SINK=1 sends into the nagare daemon instead ($NAGARE_BIN, default
# target/release/nagare: forward input -> null output, with its monitor); a run
# ends when the monitor's null output count reaches N.
#   NAGARE_SINK=1 N=1000000 sdk/rust/bench/run.sh
# tracing-noop is tracing::info! into a layer that does nothing (it sends
# nothing): the floor under both tracing layers' figures (tracing's dispatch
# and the timer's own clock reads); the summary also gives each layer's cost
# above it.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
N="${N:-2000000}"
RUNS="${RUNS:-3}"
IMPLS="${IMPLS:-nagare nagare-tracing tracing-fluentd tracing-noop}"
FB="${FLOWBENCH:-/work/shared/bench/bin/flowbench}"
NAGARE_SINK="${NAGARE_SINK:-0}"
NAGARE_BIN="${NAGARE_BIN:-$ROOT/target/release/nagare}"
if [ "$NAGARE_SINK" = 1 ]; then
  [ -x "$NAGARE_BIN" ] || { echo "$NAGARE_BIN missing: cargo build --release" >&2; exit 1; }
  echo "receiver: nagare ($NAGARE_BIN), forward input -> null output" >&2
elif [ ! -x "$FB" ]; then
  (cd /work/shared/bench/flowbench && go build -o ../bin/flowbench ./...)
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/sdk-rust-bench}"
nice -n 10 cargo build --release --manifest-path "$HERE/Cargo.toml"
BIN="$CARGO_TARGET_DIR/release/nagare-logger-bench"
# BEFORE_BIN: a bench binary built from another revision of the library; an
# IMPLS entry "before:<impl>" runs <impl> with it, in turn with the others
# (before/after in one sitting).
BEFORE_BIN="${BEFORE_BIN:-}"
OUT="$(mktemp -d)"
sink=""
trap '[ -z "$sink" ] || kill "$sink" 2>/dev/null || true; rm -rf "$OUT"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Run by run, each library in turn (nagare, tracing-fluentd, nagare...): a load
# change on a busy machine lands on every side, not on one library's runs.
for r in $(seq 1 "$RUNS"); do
  for impl in $IMPLS; do
    port=$(free_port)
    metrics=()
    if [ "$impl" = tracing-noop ]; then
      # sends nothing: no receiver
      sink=""
      "$BIN" "$impl" "127.0.0.1:$port" "$N" >"$OUT/client.json"
      echo '{"receiver": "none"}' >"$OUT/sink.json"
    else
      if [ "$NAGARE_SINK" = 1 ]; then
        mport=$(free_port)
        printf '[[input]]\ntype = "forward"\nbind = "127.0.0.1:%s"\n\n[[output]]\ntype = "null"\nmatch = "**"\n\n[monitor]\nbind = "127.0.0.1:%s"\n' \
          "$port" "$mport" >"$OUT/nagare.toml"
        "$NAGARE_BIN" run -c "$OUT/nagare.toml" >"$OUT/nagare.log" 2>&1 &
        metrics=("http://127.0.0.1:$mport/metrics")
        echo '{"receiver": "nagare"}' >"$OUT/sink.json"
      else
        "$FB" sink --listen "127.0.0.1:$port" --idle-exit 3s --quiet --verify >"$OUT/sink.json" &
      fi
      sink=$!
      for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
      for _ in $(seq 50); do [ -z "${mport:-}" ] || (exec 3<>"/dev/tcp/127.0.0.1/$mport") 2>/dev/null && break; sleep 0.1; done
      bin="$BIN" run_impl="$impl"
      if [ "${impl#before:}" != "$impl" ]; then
        [ -x "$BEFORE_BIN" ] || { echo "$impl needs BEFORE_BIN" >&2; exit 1; }
        bin="$BEFORE_BIN" run_impl="${impl#before:}"
      fi
      "$bin" "$run_impl" "127.0.0.1:$port" "$N" "${metrics[@]}" >"$OUT/client.json"
      [ "$NAGARE_SINK" != 1 ] || kill -TERM "$sink"
      wait "$sink"
      sink=""
    fi
    python3 - "$OUT/client.json" "$OUT/sink.json" "$r" "$impl" >>"$OUT/results.jsonl" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); s = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
c["impl"] = sys.argv[4]
if s.get("receiver") == "none":  # tracing-noop: events/s of the emit loop alone
    s = {"events": c["events"], "missing": 0, "duplicates": None, "events_per_s": c["events_per_s"]}
elif s.get("receiver") == "nagare":
    # nagare's monitor count when the run ended (total_s ends then); no seq check
    s = {"events": c["received"], "missing": c["events"] - c["received"], "duplicates": None,
         "events_per_s": c["received"] / c["total_s"]}
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
print(f"{'impl':<16} {'events/s (median)':>18} {'emit ns mean':>13} {'emit ns p50':>12} {'emit ns p99':>12} {'emit CPU ns':>12} {'received':>10}")
med = {}
for impl in dict.fromkeys(r["impl"] for r in rows):
    rs = [r for r in rows if r["impl"] == impl]
    m = {k: st.median(r[k] for r in rs) for k in ("events_per_s", "emit_ns_mean", "emit_ns_p50", "emit_ns_p99", "emit_cpu_ns")}
    med[impl] = m
    print(f"{impl:<16} {m['events_per_s']:>18,.0f} {m['emit_ns_mean']:>13.1f} {m['emit_ns_p50']:>12.0f} "
          f"{m['emit_ns_p99']:>12.0f} {m['emit_cpu_ns']:>12.1f} {min(r['sink_events'] for r in rs):>10}")
if "tracing-fluentd" in med:
    t = med["tracing-fluentd"]
    for k in ("nagare", "nagare-tracing", "before:nagare", "before:nagare-tracing"):
        if k in med:
            m = med[k]
            print(f"{k} / tracing-fluentd: {m['events_per_s'] / t['events_per_s']:.1f}x events/s; emit "
                  f"{t['emit_ns_mean'] / m['emit_ns_mean']:.1f}x cheaper (mean), "
                  f"{t['emit_ns_p50'] / m['emit_ns_p50']:.1f}x (median call), "
                  f"{t['emit_cpu_ns'] / m['emit_cpu_ns']:.1f}x (emitting thread's CPU)")
# before/after, paired by round (the two ran one after the other): on a
# shared machine the load drifts between rounds more than within one.
for k in ("nagare", "nagare-tracing"):
    if k in med and "before:" + k in med:
        by = {(r["run"], r["impl"]): r for r in rows}
        pairs = [(by[(n, "before:" + k)], by[(n, k)]) for n in sorted({r["run"] for r in rows})
                 if (n, k) in by and (n, "before:" + k) in by]
        for f in ("emit_ns_p50", "emit_cpu_ns"):
            q = [a[f] / b[f] for a, b in pairs if b[f] > 0]
            print(f"{k}: before / after {f}, median of {len(q)} paired rounds: {st.median(q):.2f}x "
                  f"(after cheaper in {sum(x > 1 for x in q)} of {len(q)})")
if "tracing-noop" in med:
    f = med["tracing-noop"]
    above = {k: med[k]["emit_ns_p50"] - f["emit_ns_p50"] for k in ("nagare-tracing", "tracing-fluentd") if k in med}
    print(f"median call above tracing-noop's {f['emit_ns_p50']:.0f} ns (tracing's dispatch and the timer): "
          + ", ".join(f"{k} {v:.0f} ns" for k, v in above.items())
          + (f"; ratio {above['tracing-fluentd'] / above['nagare-tracing']:.1f}x" if len(above) == 2 and above["nagare-tracing"] > 0 else ""))
PY
