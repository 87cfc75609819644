#!/usr/bin/env bash
# Issue 12's Kafka bench: flowbench → nagare (forward in → kafka out,
# acks=all, lz4) → a Kafka broker → nagare (kafka in, a consumer group →
# forward out) → flowbench's sink, verified by seq (0 lost, 0 duplicated),
# at 100 B and 1 KiB. Per size one broker; an uncounted first run warms its
# JVM up, then RUNS rounds of: the end-to-end run; Kafka's own
# ProducerPerformance (the class behind kafka-producer-perf-test.sh, from
# the same jars) with the same record size, acks, batch size, linger and
# compression; ConsumerPerformance (kafka-consumer-perf-test.sh) and then a
# consuming nagare alone, both reading the topic the run wrote. Prints a
# Markdown table of medians with the CPU seconds of every process (the
# broker's per step) and peak RSS.
#
#   benches/queues-kafka.sh [RUNS] [DURATION]      (defaults: 3 runs of 10s)
#
# Ports: SUT_PORT (nagare's forward input), SINK_PORT (flowbench's sink),
# KAFKA_PORT and KAFKA_CONTROLLER_PORT. PERF_RECORDS: records for
# ProducerPerformance (default 2M at 100 B, 400K at 1 KiB). Needs Go
# (flowbench), java and mvn (the broker's jars, fetched once by
# tests/kafka/fetch.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
DURATION=${2:-10s}
SIZES=${SIZES:-"100 1024"}
SUT_PORT=${SUT_PORT:-40500}
SINK_PORT=${SINK_PORT:-40501}
export KAFKA_PORT=${KAFKA_PORT:-40502}
export KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-40503}
# The producer's batch.size, for nagare and ProducerPerformance alike.
export KAFKA_BATCH_SIZE=${KAFKA_BATCH_SIZE:-1048576}
PARTITIONS=${PARTITIONS:-4}
# The broker's JVM as kafka-server-start.sh runs it (1 GiB heap, G1).
export KAFKA_JAVA_OPTS=${KAFKA_JAVA_OPTS:--Xms1g -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20}
LIBS="$(tests/kafka/fetch.sh)/libs"
. benches/common.sh
results_dir queues-kafka
export NAGARE ROOT OUT PARTITIONS

# One broker per size, started before the runs and used by every run of
# that size: nagare and Kafka's own tools alternate on the same warm JVM
# (a new broker per run measured its JIT compiler as much as Kafka: the
# first 10-20 s of a broker burn a core compiling). Each run gets its own
# topics and groups. CPU seconds of the broker are counted per run.
broker_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

# The SUT: the two nagares in one process group (flowbench stops the group
# with SIGTERM after the drain). Every 0.5 s it writes each process's CPU
# seconds so far (utime+stime; the broker's since the run started) and
# peak RSS to $CPU_FILE, so the last sample holds the whole run.
cat > "$OUT/sut.sh" <<'SUT'
#!/usr/bin/env bash
set -u
broker_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
base=$(broker_cpu "$BROKER_PID")
"$NAGARE" run -c "$ROOT/benches/queues-kafka-in.toml" &
consumer=$!
"$NAGARE" run -c "$ROOT/benches/queues-kafka-out.toml" &
producer=$!
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat" 2>/dev/null || echo null; }
rss() { awk '/^VmHWM/ { print $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo null; }
while sleep 0.5; do
  printf '{"nagare_in_cpu_s": %s, "kafka_cpu_s": %s, "nagare_out_cpu_s": %s, "nagare_in_rss_mb": %s, "kafka_rss_mb": %s, "nagare_out_rss_mb": %s}\n' \
    "$(cpu $producer)" "$(echo "$(broker_cpu "$BROKER_PID") - $base" | bc)" "$(cpu $consumer)" "$(rss $producer)" "$(rss "$BROKER_PID")" "$(rss $consumer)" \
    > "$CPU_FILE.tmp" && mv "$CPU_FILE.tmp" "$CPU_FILE"
done &
wait $producer
SUT
chmod +x "$OUT/sut.sh"

# timed NAME CMD...: runs CMD, writing its CPU seconds and the broker's
# during it to $OUT/NAME.cpu.json.
timed() {
  local name=$1 b0 b1; shift
  b0=$(broker_cpu "$BROKER_PID")
  /usr/bin/time -f '%U %S' -o "$OUT/$name.time" "$@"
  b1=$(broker_cpu "$BROKER_PID")
  awk -v b="$(echo "$b1 - $b0" | bc)" 'END { printf "{\"cpu_s\": %s, \"kafka_cpu_s\": %s}\n", $1 + $2, b }' "$OUT/$name.time" > "$OUT/$name.cpu.json"
}

for size in $SIZES; do
  dir=$(mktemp -d)
  tests/kafka/broker.sh "$dir/kafka" "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$PARTITIONS" >"$dir/broker.log" 2>&1 &
  export BROKER_PID=$!
  # The broker goes with the script, whatever step fails.
  trap 'kill "$BROKER_PID" 2>/dev/null || true' EXIT
  for _ in $(seq 1800); do grep -q "Kafka Server started" "$dir/broker.log" && break; sleep 0.1; done
  grep -q "Kafka Server started" "$dir/broker.log" || { echo "the broker did not start:" >&2; tail -n 20 "$dir/broker.log" >&2; exit 1; }
  records=${PERF_RECORDS:-$(( size < 1000 ? 2000000 : 400000 ))}
  for i in $(seq 0 "$RUNS"); do
    # Run 0 warms the broker up (its JIT) and is not counted.
    echo "size $size run $i" >&2
    export KAFKA_TOPIC=bench-$size-$i KAFKA_GROUP=bench-$size-$i
    "$FB" relay --sut-port "$SUT_PORT" --sink-port "$SINK_PORT" \
      --duration "$DURATION" --warmup 3s --size "$size" --batch 200 --quiet \
      --ready-timeout 240s --drain-max 60s \
      --sut-cmd "CPU_FILE=$OUT/cpu-$size-$i.json exec $OUT/sut.sh" 2>/dev/null | tail -n 1 > "$OUT/e2e-$size-$i.json"
    [ "$i" = 0 ] && continue
    # Kafka's own tools, alternating with nagare on the same broker: records
    # of the size nagare writes (the msgpack entry [EventTime, {"seq":
    # uint32, "message": str}]: 29 bytes plus the string's header plus the
    # size), acks=all, lz4, the same batch.size and linger, idempotence.
    timed "producer-perf-$size-$i" java -Xmx512m -Dlog4j.configuration=file:/dev/null -cp "$LIBS/*" \
      org.apache.kafka.tools.ProducerPerformance --topic "perf-$size-$i" --num-records "$records" \
      --record-size $((size + 29 + (size < 256 ? 2 : 3))) --throughput -1 \
      --producer-props "bootstrap.servers=127.0.0.1:$KAFKA_PORT" acks=all compression.type=lz4 \
        "batch.size=$KAFKA_BATCH_SIZE" linger.ms=5 enable.idempotence=true \
      > "$OUT/producer-perf-$size-$i.out" 2>/dev/null
    tail -n 1 "$OUT/producer-perf-$size-$i.out" > "$OUT/producer-perf-$size-$i.txt"
    # The consumer side, on the topic nagare wrote in this run (the same
    # messages for both): ConsumerPerformance, then a fresh consuming
    # nagare (its own group) draining it to flowbench's sink.
    n=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['received'])" "$OUT/e2e-$size-$i.json")
    timed "consumer-perf-$size-$i" java -Xmx512m -Dlog4j.configuration=file:/dev/null -cp "$LIBS/*" \
      org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
      --topic "$KAFKA_TOPIC" --messages "$n" --group "perf-$size-$i" --timeout 60000 \
      > "$OUT/consumer-perf-$size-$i.out" 2>/dev/null || true
    tail -n 1 "$OUT/consumer-perf-$size-$i.out" > "$OUT/consumer-perf-$size-$i.txt"
    "$FB" sink --listen "127.0.0.1:$SINK_PORT" --quiet --expect "$n" --timeout 120s \
      --json-summary "$OUT/drain-$size-$i.sink.json" >/dev/null 2>&1 &
    sink=$!
    wait_port "$SINK_PORT"
    b0=$(broker_cpu "$BROKER_PID")
    t0=$(date +%s.%N)
    KAFKA_GROUP=drain-$size-$i FLOWBENCH_SINK_PORT=$SINK_PORT "$NAGARE" run -c "$ROOT/benches/queues-kafka-in.toml" &
    drain=$!
    wait $sink || true
    t1=$(date +%s.%N)
    b1=$(broker_cpu "$BROKER_PID")
    c=$(broker_cpu $drain 2>/dev/null || echo null)
    # Its peak RSS: a consumer with a whole topic behind it prefetches the most.
    rss=$(awk '/^VmHWM/ { print $2 / 1024 }' "/proc/$drain/status" 2>/dev/null || echo null)
    kill $drain; wait $drain 2>/dev/null || true
    echo "{\"events\": $n, \"wall_s\": $(echo "$t1 - $t0" | bc)}" > "$OUT/drain-$size-$i.json"
    echo "{\"cpu_s\": $c, \"kafka_cpu_s\": $(echo "$b1 - $b0" | bc), \"rss_mb\": $rss}" > "$OUT/drain-$size-$i.cpu.json"
  done
  kill "$BROKER_PID"; wait "$BROKER_PID" 2>/dev/null || true
  rm -rf "$dir"
done

python3 - "$OUT" "$RUNS" $SIZES <<'PY'
import json, re, statistics, sys
out, runs, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
# bc writes 0.36 as .36, which JSON does not read.
load = lambda p: json.loads(re.sub(r"(:\s*-?)\.", r"\g<1>0.", open(p).read()))
def e2e(size, i):
    r = load(f"{out}/e2e-{size}-{i}.json")
    r.update(load(f"{out}/cpu-{size}-{i}.json"))
    return r
def producer_perf(size, i):
    # "N records sent, R records/sec (…)"
    m = re.search(r"([\d.]+) records/sec", open(f"{out}/producer-perf-{size}-{i}.txt").read())
    return float(m.group(1)) if m else float("nan")
def consumer_perf(size, i):
    # CSV: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, …
    f = open(f"{out}/consumer-perf-{size}-{i}.txt").read().strip().split(", ")
    return float(f[5]) if len(f) > 5 else float("nan")
def drain(size, i):
    d = load(f"{out}/drain-{size}-{i}.json")
    s = load(f"{out}/drain-{size}-{i}.sink.json")
    # The drain's sink counts events (no seq check: a second consumer group
    # reads everything the topic holds); missing = expected - received.
    return d["events"] / d["wall_s"], d["events"] - s["events"]
med = statistics.median
print("| bytes/event | end to end ev/s | ProducerPerformance rec/s | e2e / producer | ConsumerPerformance rec/s | consuming nagare alone ev/s | nagare / ConsumerPerformance | CPU s, e2e: nagare in / kafka / nagare out / flowbench | CPU s, ProducerPerformance: its JVM / kafka | CPU s, ConsumerPerformance: its JVM / kafka | CPU s, consuming nagare alone: nagare / kafka | peak RSS MB: nagare in / kafka / nagare out | lost | duplicated |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for s in sizes:
    idx = range(1, runs + 1)
    rs = [e2e(s, i) for i in idx]
    p = [producer_perf(s, i) for i in idx]
    c = [consumer_perf(s, i) for i in idx]
    d = [drain(s, i) for i in idx]
    pc = [load(f"{out}/producer-perf-{s}-{i}.cpu.json") for i in idx]
    cc = [load(f"{out}/consumer-perf-{s}-{i}.cpu.json") for i in idx]
    dc = [load(f"{out}/drain-{s}-{i}.cpu.json") for i in idx]
    m = lambda xs, k: med(x[k] for x in xs)
    ev = m(rs, "steady_events_per_s")
    drain_rate = med(x[0] for x in d)
    print(f"| {s} | {ev:,.0f} | {med(p):,.0f} | {ev / med(p):.2f} | {med(c):,.0f} | {drain_rate:,.0f} | {drain_rate / med(c):.2f} | "
          f"{m(rs,'nagare_in_cpu_s'):.1f} / {m(rs,'kafka_cpu_s'):.1f} / {m(rs,'nagare_out_cpu_s'):.1f} / {m(rs,'harness_cpu_s'):.1f} | "
          f"{m(pc,'cpu_s'):.1f} / {m(pc,'kafka_cpu_s'):.1f} | {m(cc,'cpu_s'):.1f} / {m(cc,'kafka_cpu_s'):.1f} | {m(dc,'cpu_s'):.1f} / {m(dc,'kafka_cpu_s'):.1f} | "
          f"{max(r['nagare_in_rss_mb'] for r in rs):.0f} / {max(r['kafka_rss_mb'] for r in rs):.0f} / {max(r['nagare_out_rss_mb'] for r in rs):.0f} | "
          f"{sum(r['lost'] for r in rs)} | {sum(r['duplicates'] for r in rs)} |")
    fmt = lambda xs: ", ".join(f"{x:,.0f}" for x in xs)
    print(f"runs {s} B, peak RSS MB in order: nagare in {fmt(r['nagare_in_rss_mb'] for r in rs)}; nagare out {fmt(r['nagare_out_rss_mb'] for r in rs)}; "
          f"consuming nagare alone {fmt(x.get('rss_mb') or 0 for x in dc)}", file=sys.stderr)
    print(f"runs {s} B in order: e2e {fmt(r['steady_events_per_s'] for r in rs)}; ProducerPerformance {fmt(p)}; "
          f"ConsumerPerformance {fmt(c)}; nagare drain {fmt(x[0] for x in d)} (missing {[x[1] for x in d]})", file=sys.stderr)
PY
