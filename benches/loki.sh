#!/usr/bin/env bash
# The loki output against VictoriaLogs (issue 30), beside a floor that POSTs
# pre-built push bodies of the same events (benches/loki-floor.rs) to the
# same server, in one sitting, RUNS pairs alternating.
#
#   benches/loki.sh [EVENTS] [RUNS]      (defaults 1000000, 3; SIZE=100)
#
# nagare run: flowbench sends EVENTS events ({"seq","message"}, SIZE bytes
# of message, 200 per PackedForward frame, over 2 connections without acks:
# SEND_FLAGS) to nagare's forward input; nagare's loki output (benches/loki.toml: protobuf + snappy, one
# stream, 2 flush workers) pushes them. The time runs from the first send
# until the output's events_out_total (on nagare's monitor, MON_PORT, read
# every 10 ms) is EVENTS: it counts a request's entries once VictoriaLogs
# answered it 2xx, as the floor's clock stops at its last answer.
# VictoriaLogs' own row counter (vl_rows_ingested_total) is then awaited
# too, so every row is checked there, but it is not the clock: it moves in
# steps of up to a second behind the requests it counts. Floor run: the same
# number of events, in requests of as many entries as nagare's requests
# held on average (VictoriaLogs' request counter), over FLOOR_CONNS
# connections (default 2),
# every body built before the clock starts.
#
# Prints a Markdown table of medians: events/s of each, their ratio, CPU
# microseconds per event of nagare and of VictoriaLogs (both runs), nagare's
# peak RSS.
#
# FLUENT_BIT=/path/to/fluent-bit adds a third run to each pair: flowbench
# sends the same events to Fluent Bit's in_forward, its `loki` output
# (JSON: it has no protobuf; one stream {job="bench"}; Workers 2; Flush
# 0.1 s) pushes them to the same VictoriaLogs, timed the same way (rows of
# type loki_json); its CPU and peak RSS from /proc. Unset: skipped with a
# message. Needs Go (flowbench, and victoria-logs: scripts/test-all.sh
# installs it into ~/.cache/nagare-test/gobin). Ports: SUT_PORT, VL_PORT
# (defaults 40190, 40191).
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS=${1:-1000000}
RUNS=${2:-3}
SIZE=${SIZE:-100}
SEND_FLAGS=${SEND_FLAGS:---conns 2}
# The floor's connections: 2 (one per flush worker of benches/loki.toml);
# 8 matches the requests nagare may have in flight (2 flush workers × the
# default request_concurrency of 4).
FLOOR_CONNS=${FLOOR_CONNS:-2}
# LOKI_TOML=path: another nagare config (default benches/loki.toml).
LOKI_TOML=${LOKI_TOML:-benches/loki.toml}
export SUT_PORT=${SUT_PORT:-40190} VL_PORT=${VL_PORT:-40191} MON_PORT=${MON_PORT:-40192}
VL=${VICTORIA_LOGS:-$HOME/.cache/nagare-test/gobin/victoria-logs}
[ -x "$VL" ] || { echo "victoria-logs not found at $VL (see scripts/test-all.sh)" >&2; exit 1; }
. benches/common.sh
results_dir loki
# FLOOR=skip leaves the floor out (no release build of the example): only
# nagare, and Fluent Bit when FLUENT_BIT is set. LOKI_FLOOR_BIN=path: that
# floor program instead (no build).
if [ "${FLOOR:-}" = skip ]; then
  :
elif [ -n "${LOKI_FLOOR_BIN:-}" ]; then
  FLOOR=$LOKI_FLOOR_BIN
else
  cargo build --release -p nagare --example loki-floor --manifest-path "$ROOT/Cargo.toml" >&2
  FLOOR=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/loki-floor
fi
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
ingested() { # rows VictoriaLogs took over the Loki API so far (protobuf and JSON)
  curl -s "http://127.0.0.1:$VL_PORT/metrics" |
    awk '/^vl_rows_ingested_total\{type="loki_(protobuf|json)"\}/ {n += $2} END {print n + 0}'
}
requests() {
  curl -s "http://127.0.0.1:$VL_PORT/metrics" |
    awk '/^vl_http_requests_total\{path="\/insert\/loki\/api\/v1\/push",format="protobuf"\}/ {print $2; found=1} END {if (!found) print 0}'
}
delivered() { # entries nagare's loki output has had answered 2xx so far
  curl -s "http://127.0.0.1:$MON_PORT/metrics" |
    awk '/^nagare_events_out_total\{plugin="loki#0",/ {print $NF; found=1} END {if (!found) print 0}'
}
wait_delivered() { # wait_delivered TARGET PID: until nagare's output has delivered TARGET; prints the time
  while [ "$(delivered)" -lt "$1" ]; do
    kill -0 "$2" 2>/dev/null || { echo "nagare exited" >&2; exit 1; }
    sleep 0.01
  done
  date +%s.%N
}
wait_rows() { # wait_rows TARGET: until the counter reaches TARGET; prints the time
  while [ "$(ingested)" -lt "$1" ]; do sleep 0.05; done
  date +%s.%N
}

"$VL" -storageDataPath="$OUT/vl-data" -httpListenAddr="127.0.0.1:$VL_PORT" \
  -loki.disableMessageParsing -retentionPeriod=100y -loggerLevel=ERROR 2>"$OUT/vl.log" &
vl=$!
trap 'kill $vl 2>/dev/null || true' EXIT
wait_port "$VL_PORT"

for i in $(seq "$RUNS"); do
  echo "run $i: nagare" >&2
  "$NAGARE" run -c "$LOKI_TOML" 2>"$OUT/nagare-$i.log" &
  nagare=$!
  wait_port "$SUT_PORT"
  base=$(ingested); req0=$(requests); vl0=$(cpu "$vl")
  start=$(date +%s.%N)
  "$FB" send --addr "127.0.0.1:$SUT_PORT" --tag "bench.loki.$i" --size "$SIZE" --batch 200 \
    --count "$EVENTS" $SEND_FLAGS >"$OUT/send-$i.log" 2>&1
  sent=$(date +%s.%N)
  end=$(wait_delivered "$EVENTS" "$nagare")
  ncpu=$(cpu "$nagare")
  wait_rows $((base + EVENTS)) >/dev/null
  vcpu=$(awk -v a="$(cpu "$vl")" -v b="$vl0" 'BEGIN {print a - b}')
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$nagare/status")
  reqs=$(awk -v a="$(requests)" -v b="$req0" 'BEGIN {print a - b}')
  kill -TERM "$nagare"; wait "$nagare" || true
  echo "{\"events\":$EVENTS,\"seconds\":$(awk -v a="$end" -v b="$start" 'BEGIN {print a - b}'),\"send_seconds\":$(awk -v a="$sent" -v b="$start" 'BEGIN {print a - b}'),\"nagare_cpu\":$ncpu,\"vl_cpu\":$vcpu,\"rss_kb\":$rss,\"requests\":$reqs}" > "$OUT/nagare-$i.json"

  if [ "${FLOOR:-}" != skip ]; then
    echo "run $i: floor" >&2
    per=$(awk -v e="$EVENTS" -v r="$reqs" 'BEGIN {n = int(e / r + 0.5); print (n < 1 ? 1 : n)}')
    base=$(ingested); vl0=$(cpu "$vl")
    "$FLOOR" "127.0.0.1:$VL_PORT" /insert/loki/api/v1/push "bench.floor.$i" "$EVENTS" "$per" "$SIZE" "$FLOOR_CONNS" > "$OUT/floor-$i.out"
    wait_rows $((base + EVENTS)) >/dev/null
    vcpu=$(awk -v a="$(cpu "$vl")" -v b="$vl0" 'BEGIN {print a - b}')
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["vl_cpu"]=float(sys.argv[2]); d["per_request"]=int(sys.argv[3]); d["conns"]=int(sys.argv[4]); print(json.dumps(d))' \
      "$OUT/floor-$i.out" "$vcpu" "$per" "$FLOOR_CONNS" > "$OUT/floor-$i.json"
  fi

  [ -n "${FLUENT_BIT:-}" ] || continue
  echo "run $i: fluent-bit" >&2
  cat >"$OUT/fluentbit-$i.conf" <<CONF
[SERVICE]
    Flush      0.1
    Log_Level  warn
[INPUT]
    Name   forward
    Listen 127.0.0.1
    Port   $SUT_PORT
[OUTPUT]
    Name        loki
    Match       *
    Host        127.0.0.1
    Port        $VL_PORT
    Uri         /insert/loki/api/v1/push
    Labels      job=bench
    Line_Format json
    Retry_Limit False
    Workers     2
CONF
  "$FLUENT_BIT" -c "$OUT/fluentbit-$i.conf" >"$OUT/fluentbit-$i.log" 2>&1 &
  fbit=$!
  wait_port "$SUT_PORT"
  base=$(ingested); vl0=$(cpu "$vl")
  start=$(date +%s.%N)
  "$FB" send --addr "127.0.0.1:$SUT_PORT" --tag "bench.fluentbit.$i" --size "$SIZE" --batch 200 \
    --count "$EVENTS" $SEND_FLAGS >"$OUT/send-fluentbit-$i.log" 2>&1
  end=$(wait_rows $((base + EVENTS)))
  fcpu=$(cpu "$fbit"); vcpu=$(awk -v a="$(cpu "$vl")" -v b="$vl0" 'BEGIN {print a - b}')
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$fbit/status")
  kill -TERM "$fbit"; wait "$fbit" || true
  echo "{\"events\":$EVENTS,\"seconds\":$(awk -v a="$end" -v b="$start" 'BEGIN {print a - b}'),\"cpu\":$fcpu,\"vl_cpu\":$vcpu,\"rss_kb\":$rss}" > "$OUT/fluentbit-$i.json"
done
[ -n "${FLUENT_BIT:-}" ] || echo "FLUENT_BIT unset: Fluent Bit's loki output is not measured" >&2

python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
med = statistics.median
n = [json.load(open(f"{out}/nagare-{i}.json")) for i in range(1, runs + 1)]
import os
ne = med(r["events"] / r["seconds"] for r in n)
if not os.path.exists(f"{out}/floor-1.json"):  # FLOOR=skip
    print("| events | nagare ev/s | nagare CPU µs/event | VictoriaLogs CPU µs/event | nagare peak RSS MB | requests |")
    print("| --- | --- | --- | --- | --- | --- |")
    print(f"| {n[0]['events']:,} | {ne:,.0f} | {med(r['nagare_cpu'] / r['events'] * 1e6 for r in n):.2f} | "
          f"{med(r['vl_cpu'] / r['events'] * 1e6 for r in n):.2f} | {med(r['rss_kb'] for r in n) / 1024:.0f} | {med(r['requests'] for r in n):.0f} |")
    f = []
else:
    f = [json.load(open(f"{out}/floor-{i}.json")) for i in range(1, runs + 1)]
    fe = med(r["events_per_s"] for r in f)
if f:
  print("| events | nagare ev/s | floor ev/s | nagare / floor | nagare CPU µs/event | VictoriaLogs CPU µs/event (nagare run / floor run) | nagare peak RSS MB | entries per request |")
  print("| --- | --- | --- | --- | --- | --- | --- | --- |")
  print(f"| {n[0]['events']:,} | {ne:,.0f} | {fe:,.0f} | **{ne / fe:.2f}** | "
        f"{med(r['nagare_cpu'] / r['events'] * 1e6 for r in n):.2f} | "
        f"{med(r['vl_cpu'] / r['events'] * 1e6 for r in n):.2f} / {med(r['vl_cpu'] / r['events'] * 1e6 for r in f):.2f} | "
        f"{med(r['rss_kb'] for r in n) / 1024:.0f} | {f[0]['per_request']} |")
  print("floor connections:", f[0].get("conns", "?"))
if os.path.exists(f"{out}/fluentbit-1.json"):
    b = [json.load(open(f"{out}/fluentbit-{i}.json")) for i in range(1, runs + 1)]
    bc = med(r["cpu"] / r["events"] * 1e6 for r in b)
    nc = med(r["nagare_cpu"] / r["events"] * 1e6 for r in n)
    print()
    print("| Fluent Bit loki output (JSON) | ev/s | CPU µs/event | VictoriaLogs CPU µs/event | peak RSS MB | nagare CPU / Fluent Bit CPU |")
    print("| --- | --- | --- | --- | --- | --- |")
    print(f"| {b[0]['events']:,} events | {med(r['events'] / r['seconds'] for r in b):,.0f} | {bc:.2f} | "
          f"{med(r['vl_cpu'] / r['events'] * 1e6 for r in b):.2f} | {med(r['rss_kb'] for r in b) / 1024:.0f} | **{nc / bc:.2f}** |")
    print("fluent-bit runs (s, CPU s):", [(round(r["seconds"], 2), r["cpu"]) for r in b])
print("runs (nagare s [flowbench's send s], floor s):", [(round(a["seconds"], 2), round(a["send_seconds"], 2), round(b["seconds"], 2) if f else None) for a, b in zip(n, f or n)])
PY
