#!/usr/bin/env bash
# Issue 12's Kafka bench: flowbench → nagare (forward in → kafka out,
# acks=all, lz4) → a Kafka broker → nagare (kafka in, a consumer group →
# forward out) → flowbench's sink, verified by seq (0 lost, 0 duplicated),
# at 100 B and 1 KiB, RUNS times each; then Kafka's own ProducerPerformance
# and ConsumerPerformance (the classes behind kafka-producer-perf-test.sh and
# kafka-consumer-perf-test.sh, from the same jars) with the same record size,
# batch size and compression, for the ratios. Prints a Markdown table of
# medians with the CPU and peak RSS of every process (both nagares and the
# broker, whole run).
#
#   benches/queues-kafka.sh [RUNS] [DURATION]      (defaults: 3 runs of 10s)
#
# Ports: SUT_PORT (nagare's forward input), SINK_PORT (flowbench's sink),
# KAFKA_PORT and KAFKA_CONTROLLER_PORT. PERF_RECORDS: records for Kafka's
# perf tools (default 5M at 100 B, 1M at 1 KiB). Needs Go (flowbench), java
# and mvn (the broker's jars, fetched once by tests/kafka/fetch.sh).
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

# The SUT: a new broker (topics made on first use with PARTITIONS
# partitions) and the two nagares in one process group (flowbench stops
# the group with SIGTERM after the drain). Every 0.5 s it writes each
# process's CPU seconds so far (utime+stime) and peak RSS to $CPU_FILE, so
# the last sample holds the whole run.
cat > "$OUT/sut.sh" <<'SUT'
#!/usr/bin/env bash
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$ROOT/tests/kafka/broker.sh" "$dir/kafka" "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$PARTITIONS" >"$dir/broker.log" 2>&1 &
broker=$!
# Up to 3 minutes: a cold JVM on a loaded machine.
for _ in $(seq 1800); do grep -q "Kafka Server started" "$dir/broker.log" && break; sleep 0.1; done
grep -q "Kafka Server started" "$dir/broker.log" || { echo "the broker did not start:" >&2; tail -n 20 "$dir/broker.log" >&2; exit 1; }
"$NAGARE" run -c "$ROOT/benches/queues-kafka-in.toml" &
consumer=$!
"$NAGARE" run -c "$ROOT/benches/queues-kafka-out.toml" &
producer=$!
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat" 2>/dev/null || echo null; }
rss() { awk '/^VmHWM/ { print $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo null; }
while sleep 0.5; do
  printf '{"nagare_in_cpu_s": %s, "kafka_cpu_s": %s, "nagare_out_cpu_s": %s, "nagare_in_rss_mb": %s, "kafka_rss_mb": %s, "nagare_out_rss_mb": %s}\n' \
    "$(cpu $producer)" "$(cpu $broker)" "$(cpu $consumer)" "$(rss $producer)" "$(rss $broker)" "$(rss $consumer)" \
    > "$CPU_FILE.tmp" && mv "$CPU_FILE.tmp" "$CPU_FILE"
done &
wait $producer
SUT
chmod +x "$OUT/sut.sh"

perf() { # perf CLASS ARGS...: one of Kafka's perf tools, on the broker's class path
  java -Xmx512m -Dlog4j.configuration=file:/dev/null -cp "$LIBS/*" "$@" 2>/dev/null
}

for size in $SIZES; do
  for i in $(seq "$RUNS"); do
    echo "size $size run $i" >&2
    "$FB" relay --sut-port "$SUT_PORT" --sink-port "$SINK_PORT" \
      --duration "$DURATION" --warmup 3s --size "$size" --batch 200 --quiet \
      --ready-timeout 240s --drain-max 60s \
      --sut-cmd "CPU_FILE=$OUT/cpu-$size-$i.json exec $OUT/sut.sh" 2>/dev/null | tail -n 1 >> "$OUT/e2e-$size.jsonl"
  done
  # Kafka's own tools alone, on a new broker: records of the size nagare
  # writes (the msgpack entry of a {seq, message} record: size + 25 bytes),
  # acks=all, lz4, the same batch.size and linger, then the consumer side.
  dir=$(mktemp -d)
  tests/kafka/broker.sh "$dir/kafka" "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$PARTITIONS" >"$dir/broker.log" 2>&1 &
  kpid=$!
  for _ in $(seq 1800); do grep -q "Kafka Server started" "$dir/broker.log" && break; sleep 0.1; done
  records=${PERF_RECORDS:-$(( size < 1000 ? 5000000 : 1000000 ))}
  perf org.apache.kafka.tools.ProducerPerformance --topic perf --num-records "$records" \
    --record-size $((size + 25)) --throughput -1 \
    --producer-props "bootstrap.servers=127.0.0.1:$KAFKA_PORT" acks=all compression.type=lz4 \
      "batch.size=$KAFKA_BATCH_SIZE" linger.ms=5 enable.idempotence=true \
    | tail -n 1 > "$OUT/producer-perf-$size.txt"
  perf org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
    --topic perf --messages "$records" --group perf --timeout 60000 \
    | tail -n 1 > "$OUT/consumer-perf-$size.txt"
  kill $kpid; wait $kpid 2>/dev/null || true
  rm -rf "$dir"
done

python3 - "$OUT" $SIZES <<'PY'
import json, re, statistics, sys
out, sizes = sys.argv[1], sys.argv[2:]
def rows(size):
    with open(f"{out}/e2e-{size}.jsonl") as f:
        runs = [json.loads(l) for l in f if l.strip()]
    for i, r in enumerate(runs, 1):
        with open(f"{out}/cpu-{size}-{i}.json") as f:
            r.update(json.load(f))
    return runs
def producer_perf(size):
    # "N records sent, R records/sec (…)"
    text = open(f"{out}/producer-perf-{size}.txt").read()
    m = re.search(r"([\d.]+) records/sec", text)
    return float(m.group(1)) if m else float("nan")
def consumer_perf(size):
    # CSV: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, …
    text = open(f"{out}/consumer-perf-{size}.txt").read().strip().split(", ")
    return float(text[5]) if len(text) > 5 else float("nan")
med = lambda rs, k: statistics.median(r[k] for r in rs)
print("| bytes/event | end to end ev/s | ProducerPerformance rec/s | e2e / producer | ConsumerPerformance rec/s | e2e / consumer | CPU s: nagare in / kafka / nagare out / flowbench (whole run) | peak RSS MB: nagare in / kafka / nagare out | lost | duplicated |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for s in sizes:
    rs, p, c = rows(s), producer_perf(s), consumer_perf(s)
    e2e = med(rs, "steady_events_per_s")
    print(f"| {s} | {e2e:,.0f} | {p:,.0f} | {e2e / p:.2f} | {c:,.0f} | {e2e / c:.2f} | "
          f"{med(rs,'nagare_in_cpu_s'):.1f} / {med(rs,'kafka_cpu_s'):.1f} / {med(rs,'nagare_out_cpu_s'):.1f} / {med(rs,'harness_cpu_s'):.1f} | "
          f"{max(r['nagare_in_rss_mb'] for r in rs):.0f} / {max(r['kafka_rss_mb'] for r in rs):.0f} / {max(r['nagare_out_rss_mb'] for r in rs):.0f} | "
          f"{sum(r['lost'] for r in rs)} | {sum(r['duplicates'] for r in rs)} |")
PY
