#!/usr/bin/env bash
# Issue 12's Redis bench: flowbench → nagare (forward in → Redis list out)
# → redis-server → nagare (Redis list in → forward out) → flowbench's sink,
# verified by seq (0 lost, 0 duplicated), at 100 B and 1 KiB, RUNS times
# each, alternating with the plain forward relay (benches/relay.toml); then
# redis-benchmark's RPUSH and LPOP with the same element size and elements
# per command, for the ratios. Prints a Markdown table of
# medians with the CPU and peak RSS of every process (both nagares and
# redis-server, whole run).
#
#   benches/queues-redis.sh [RUNS] [DURATION]      (defaults: 3 runs of 10s)
#
# Ports: SUT_PORT (nagare's forward input), SINK_PORT (flowbench's sink),
# REDIS_PORT. Needs Go (flowbench), redis-server and redis-benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
DURATION=${2:-10s}
SIZES=${SIZES:-"100 1024"}
SUT_PORT=${SUT_PORT:-40500}
SINK_PORT=${SINK_PORT:-40501}
export REDIS_PORT=${REDIS_PORT:-40502}
command -v redis-server >/dev/null || { echo "redis-server is needed (apt-get install redis-server)" >&2; exit 1; }
. benches/common.sh
results_dir queues-redis
export NAGARE ROOT OUT

# The SUT: redis-server and the two nagares in one process group (flowbench
# stops the group with SIGTERM after the drain). Every 0.5 s it writes each
# process's CPU seconds so far (utime+stime) to $CPU_FILE, so the last
# sample holds the whole run.
cat > "$OUT/sut.sh" <<'SUT'
#!/usr/bin/env bash
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
redis=$!
for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$NAGARE" run -c "$ROOT/benches/queues-redis-out.toml" &
consumer=$!
"$NAGARE" run -c "$ROOT/benches/queues-redis-in.toml" &
producer=$!
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat" 2>/dev/null || echo null; }
rss() { awk '/^VmHWM/ { print $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo null; }
while sleep 0.5; do
  printf '{"nagare_in_cpu_s": %s, "redis_cpu_s": %s, "nagare_out_cpu_s": %s, "nagare_in_rss_mb": %s, "redis_rss_mb": %s, "nagare_out_rss_mb": %s}\n' \
    "$(cpu $producer)" "$(cpu $redis)" "$(cpu $consumer)" "$(rss $producer)" "$(rss $redis)" "$(rss $consumer)" \
    > "$CPU_FILE.tmp" && mv "$CPU_FILE.tmp" "$CPU_FILE"
done &
wait $producer
SUT
chmod +x "$OUT/sut.sh"

for size in $SIZES; do
  for i in $(seq "$RUNS"); do
    echo "size $size run $i" >&2
    "$FB" relay --sut-port "$SUT_PORT" --sink-port "$SINK_PORT" \
      --duration "$DURATION" --warmup 3s --size "$size" --batch 200 --quiet \
      --sut-cmd "CPU_FILE=$OUT/cpu-$size-$i.json exec $OUT/sut.sh" 2>/dev/null | tail -n 1 >> "$OUT/e2e-$size.jsonl"
    # The plain forward relay (one nagare, forward in → forward out),
    # alternating with the runs above: the bar's "0.25× the relay".
    "$FB" relay --sut-port "$SUT_PORT" --sink-port "$SINK_PORT" \
      --duration "$DURATION" --warmup 3s --size "$size" --batch 200 --quiet \
      --sut-cmd "exec $NAGARE run -c $ROOT/benches/relay.toml" 2>/dev/null | tail -n 1 >> "$OUT/relay-$size.jsonl"
  done
  # redis-benchmark alone, shaped like nagare's traffic: RPUSH of 1000
  # elements per command (nagare pushes a whole chunk in one RPUSH) and
  # LPOP … 1000 (the input pops batch_count = 1000), 2 clients (2
  # workers, 2 threads); elements of the size nagare writes (the msgpack
  # entry of a {seq, message} record: size + 25 bytes).
  dir=$(mktemp -d)
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --dir "$dir" >/dev/null 2>&1 &
  rpid=$!
  for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  element=$(head -c $((size + 25)) /dev/zero | tr '\0' x)
  # shellcheck disable=SC2046
  redis-benchmark -p "$REDIS_PORT" -q -c 2 -n 4000 --csv RPUSH bench $(for _ in $(seq 1000); do echo "$element"; done) \
    > "$OUT/redis-benchmark-$size.csv" 2>/dev/null
  redis-benchmark -p "$REDIS_PORT" -q -c 2 -n 4000 --csv LPOP bench 1000 >> "$OUT/redis-benchmark-$size.csv" 2>/dev/null
  kill $rpid; wait $rpid 2>/dev/null || true
  rm -rf "$dir"
done

python3 - "$OUT" $SIZES <<'PY'
import csv, json, statistics, sys
csv.field_size_limit(1 << 30)  # the RPUSH row names its 1000 elements
out, sizes = sys.argv[1], sys.argv[2:]
def rows(size):
    with open(f"{out}/e2e-{size}.jsonl") as f:
        runs = [json.loads(l) for l in f if l.strip()]
    for i, r in enumerate(runs, 1):
        with open(f"{out}/cpu-{size}-{i}.json") as f:
            r.update(json.load(f))
    return runs
def relay(size):
    with open(f"{out}/relay-{size}.jsonl") as f:
        return statistics.median(json.loads(l)["steady_events_per_s"] for l in f if l.strip())
def bench(size):
    with open(f"{out}/redis-benchmark-{size}.csv") as f:
        # Commands of 1000 elements: elements/s = commands/s × 1000.
        return {r[0].split()[0]: float(r[1]) * 1000 for r in csv.reader(f) if r and r[0] != "test"}
med = lambda rs, k: statistics.median(r[k] for r in rs)
# End to end, every element is pushed and popped by redis-server's one
# thread: even with a core to itself it moves at most 1/(1/RPUSH + 1/LPOP)
# elements/s (the "one-thread floor").
print("| bytes/event | end to end ev/s | forward relay ev/s | e2e / relay | redis-benchmark RPUSH / LPOP elements/s | e2e / min(RPUSH, LPOP) | one-thread floor | e2e / floor | CPU s: nagare in / redis / nagare out / flowbench (whole run) | nagare's share of the CPU | redis-server cores | peak RSS MB: nagare in / redis / nagare out | lost | duplicated |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for s in sizes:
    rs, b = rows(s), bench(s)
    e2e = med(rs, "steady_events_per_s")
    floor = min(b.get("RPUSH", 0), b.get("LPOP", 0)) or float("nan")
    wall = statistics.median(r["duration_s"] + r["warmup_s"] + r["drain_s"] for r in rs)
    rel = relay(s)
    one = 1 / (1 / b["RPUSH"] + 1 / b["LPOP"]) if b.get("RPUSH") and b.get("LPOP") else float("nan")
    cpu = {k: med(rs, k) for k in ("nagare_in_cpu_s", "redis_cpu_s", "nagare_out_cpu_s", "harness_cpu_s")}
    share = (cpu["nagare_in_cpu_s"] + cpu["nagare_out_cpu_s"]) / sum(cpu.values())
    print(f"| {s} | {e2e:,.0f} | {rel:,.0f} | {e2e / rel:.2f} | {b.get('RPUSH', 0):,.0f} / {b.get('LPOP', 0):,.0f} | {e2e / floor:.2f} | "
          f"{one:,.0f} | {e2e / one:.2f} | "
          f"{cpu['nagare_in_cpu_s']:.1f} / {cpu['redis_cpu_s']:.1f} / {cpu['nagare_out_cpu_s']:.1f} / {cpu['harness_cpu_s']:.1f} | {share:.0%} | "
          f"{med(rs,'redis_cpu_s') / wall:.2f} | "
          f"{max(r['nagare_in_rss_mb'] for r in rs):.0f} / {max(r['redis_rss_mb'] for r in rs):.0f} / {max(r['nagare_out_rss_mb'] for r in rs):.0f} | "
          f"{sum(r['lost'] for r in rs)} | {sum(r['duplicates'] for r in rs)} |")
PY
