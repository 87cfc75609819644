#!/usr/bin/env bash
# The elasticsearch and beats inputs' throughput per CPU-second against the
# forward input's (issue 32: each >= 0.5x): benches/receivers-load replays
# pre-built requests (NDJSON `_bulk` bodies of 1,000 documents; Lumberjack
# v2 windows of 1,000 JSON frames, zlib-compressed as Filebeat sends them)
# over keep-alive connections to nagare (benches/receivers.toml), which
# forwards to a flowbench sink; then, in the same sitting, `flowbench
# relay` measures the forward input (benches/relay.toml: PackedForward) at
# the same event size. RUNS rounds per size, alternating es, beats,
# forward; prints medians of events/s and of events per nagare CPU-second,
# and the ratios.
#
#   benches/receivers.sh [DURATION] [RUNS]   (defaults 10s, 3; SIZES="100 1024")
#
# Needs Go (receivers-load, flowbench). Ports: SUT_PORT, SINK_PORT,
# ES_PORT, BEATS_PORT (defaults 40180, 40181, 40182, 40183).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10s}
RUNS=${2:-3}
SIZES=${SIZES:-"100 1024"}
CONNECTIONS=${CONNECTIONS:-8}
export SUT_PORT=${SUT_PORT:-40180} SINK_PORT=${SINK_PORT:-40181}
export ES_PORT=${ES_PORT:-40182} BEATS_PORT=${BEATS_PORT:-40183}
. benches/common.sh
results_dir receivers
LOAD=$OUT/receivers-load
(cd benches/receivers-load && go build -o "$LOAD" .)
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

for size in $SIZES; do
  for i in $(seq "$RUNS"); do
    for mode in es beats; do
      echo "size $size run $i $mode" >&2
      port=$ES_PORT; [ "$mode" = beats ] && port=$BEATS_PORT
      "$FB" sink --listen "127.0.0.1:$SINK_PORT" --quiet --idle-exit 3s --timeout 600s \
          --json-summary "$OUT/sink-$mode-$size-$i.json" >/dev/null 2>&1 &
      sink=$!
      "$NAGARE" run -c benches/receivers.toml 2>"$OUT/nagare-$mode-$size-$i.log" &
      nagare=$!
      wait_port "$port"
      "$LOAD" -mode "$mode" -addr "127.0.0.1:$port" -size "$size" -events 1000 \
          -conns "$CONNECTIONS" -duration "$DURATION" > "$OUT/load-$mode-$size-$i.json"
      cpu "$nagare" > "$OUT/nagare-cpu-$mode-$size-$i.txt"
      kill -TERM "$nagare"; wait "$nagare" || true
      wait "$sink" || true
    done
    "$FB" relay --sut-port "$SUT_PORT" --sink-port "$SINK_PORT" --duration "$DURATION" --warmup 3s \
        --size "$size" --batch 200 --quiet --sut-cmd "exec $NAGARE run -c $ROOT/benches/relay.toml" \
        2>/dev/null | tail -n 1 > "$OUT/forward-$size-$i.json"
  done
done

python3 - "$OUT" "$RUNS" $SIZES <<'PY'
import json, statistics, sys
out, runs, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = statistics.median
print(f"medians of {runs} runs each, alternating (es, beats, forward, ...)\n")
print("| bytes/event | es ev/s | beats ev/s | forward ev/s | es ev per nagare CPU-s | beats ev per nagare CPU-s | forward ev per nagare CPU-s | es / forward (per CPU-s) | beats / forward (per CPU-s) | failed requests | sink - acked (min) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for s in sizes:
    rows = []
    for i in range(1, runs + 1):
        r = {}
        failed, short = 0, []
        for m in ("es", "beats"):
            load = json.load(open(f"{out}/load-{m}-{s}-{i}.json"))
            cpu = float(open(f"{out}/nagare-cpu-{m}-{s}-{i}.txt").read())
            sink = json.load(open(f"{out}/sink-{m}-{s}-{i}.json"))
            got = sink.get("events", sink.get("total_events", 0))
            r[m] = load["events"] / load["seconds"]
            r[m + "_per"] = load["events"] / cpu
            failed += load["failed"]
            # Every acknowledged event must be at the sink (more may be:
            # requests answered after the load program's deadline).
            short.append(got - load["events"])
        fwd = json.loads(open(f"{out}/forward-{s}-{i}.json").read())
        r["fwd"], r["fwd_per"] = fwd["steady_events_per_s"], fwd["sut_events_per_cpu_s"]
        r["failed"], r["short"] = failed, min(short)
        rows.append(r)
    m = lambda k: med(x[k] for x in rows)
    print(f"| {s} | {m('es'):,.0f} | {m('beats'):,.0f} | {m('fwd'):,.0f} | {m('es_per'):,.0f} | {m('beats_per'):,.0f} | "
          f"{m('fwd_per'):,.0f} | {med(x['es_per'] / x['fwd_per'] for x in rows):.2f} | "
          f"{med(x['beats_per'] / x['fwd_per'] for x in rows):.2f} | {sum(x['failed'] for x in rows)} | {min(x['short'] for x in rows)} |")
PY
