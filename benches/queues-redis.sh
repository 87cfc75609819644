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
rm -f "$CPU_FILE.log"
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
# How many RPUSH and BLMPOP commands redis-server ran so far: with the
# events received, the elements per command nagare really sent and got.
calls() { redis-cli -p "$REDIS_PORT" info commandstats 2>/dev/null | awk -F'[=:,]' -v c="cmdstat_$1" '$1 == c { n = $3 } END { print n + 0 }'; }
# Each sample is also appended, with its time, to $CPU_FILE.log: the CPU
# of each process in flowbench's steady window (the last DURATION before
# the drain) comes from there.
while sleep 0.5; do
  printf '{"t": %s, "nagare_in_cpu_s": %s, "redis_cpu_s": %s, "nagare_out_cpu_s": %s, "nagare_in_rss_mb": %s, "redis_rss_mb": %s, "nagare_out_rss_mb": %s, "rpush_calls": %s, "blmpop_calls": %s}\n' \
    "$(date +%s.%N)" "$(cpu $producer)" "$(cpu $redis)" "$(cpu $consumer)" "$(rss $producer)" "$(rss $redis)" "$(rss $consumer)" \
    "$(calls rpush)" "$(calls blmpop)" \
    > "$CPU_FILE.tmp" && cat "$CPU_FILE.tmp" >> "$CPU_FILE.log" && mv "$CPU_FILE.tmp" "$CPU_FILE"
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
  # redis-benchmark alone, shaped like nagare's traffic in the runs
  # above: 2 clients (nagare's 2 workers and 2 threads), one command in
  # flight per client (no -P: nagare waits for each reply too), RPUSH of
  # as many elements per command as nagare's RPUSHes carried on average
  # (a whole chunk) and LPOP of as many as its BLMPOPs got, counted by
  # redis-server's commandstats; elements of the size nagare writes (the
  # msgpack entry [EventTime, {"seq": uint32, "message": str}]: 29 bytes
  # plus the string's header (2 bytes up to 255, else 3) plus the size).
  read -r push pop < <(python3 - "$OUT" "$size" <<'PY'
import json, statistics, sys
out, size = sys.argv[1], sys.argv[2]
runs = [json.loads(l) for l in open(f"{out}/e2e-{size}.jsonl") if l.strip()]
cpus = [json.load(open(f"{out}/cpu-{size}-{i}.json")) for i in range(1, len(runs) + 1)]
per = lambda k: statistics.median(r["received"] / max(c[k], 1) for r, c in zip(runs, cpus))
print(max(1, round(per("rpush_calls"))), max(1, round(per("blmpop_calls"))))
PY
)
  dir=$(mktemp -d)
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --dir "$dir" >/dev/null 2>&1 &
  rpid=$!
  for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  element=$(head -c $((size + 29 + (size < 256 ? 2 : 3))) /dev/zero | tr '\0' x)
  total=${BENCH_ELEMENTS:-2000000}
  cpu0=$(awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$rpid/stat")
  t0=$(date +%s.%N)
  # shellcheck disable=SC2046
  /usr/bin/time -f '%U %S' -o "$OUT/redis-benchmark-cpu-$size.txt" \
    redis-benchmark -p "$REDIS_PORT" -q -c 2 -n $((total / push)) --csv RPUSH bench $(for _ in $(seq "$push"); do echo "$element"; done) \
    > "$OUT/redis-benchmark-$size.csv" 2>/dev/null
  /usr/bin/time -a -f '%U %S' -o "$OUT/redis-benchmark-cpu-$size.txt" \
    redis-benchmark -p "$REDIS_PORT" -q -c 2 -n $((total / pop)) --csv LPOP bench "$pop" >> "$OUT/redis-benchmark-$size.csv" 2>/dev/null
  t1=$(date +%s.%N)
  cpu1=$(awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$rpid/stat")
  # awk, not bc alone: bc writes 0.99 as .99, which JSON does not read.
  echo "{\"push\": $push, \"pop\": $pop, \"redis_cpu_s\": $(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { printf "%.3f", b - a }'), \"wall_s\": $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')}" > "$OUT/redis-benchmark-shape-$size.json"
  kill $rpid; wait $rpid 2>/dev/null || true
  rm -rf "$dir"
done

python3 - "$OUT" $SIZES <<'PY'
import csv, json, statistics, sys
csv.field_size_limit(1 << 30)  # the RPUSH row names its elements
out, sizes = sys.argv[1], sys.argv[2:]
def rows(size):
    with open(f"{out}/e2e-{size}.jsonl") as f:
        runs = [json.loads(l) for l in f if l.strip()]
    for i, r in enumerate(runs, 1):
        with open(f"{out}/cpu-{size}-{i}.json") as f:
            r.update(json.load(f))
    return runs
def window(size, i, r):
    """CPU cores of each process in flowbench's steady window: the
    samples nearest its start and end (the last sample is taken when the
    SUT is stopped, drain_s after the window's end)."""
    samples = [json.loads(l) for l in open(f"{out}/cpu-{size}-{i}.json.log") if l.strip()]
    end_t = samples[-1]["t"] - r["drain_s"]
    start_t = end_t - r["duration_s"]
    near = lambda t: min(samples, key=lambda s: abs(s["t"] - t))
    a, b = near(start_t), near(end_t)
    span = b["t"] - a["t"]
    return {k: (b[k] - a[k]) / span for k in ("nagare_in_cpu_s", "redis_cpu_s", "nagare_out_cpu_s")}
def relay(size):
    with open(f"{out}/relay-{size}.jsonl") as f:
        return [json.loads(l) for l in f if l.strip()]
def bench(size):
    shape = json.load(open(f"{out}/redis-benchmark-shape-{size}.json"))
    per = {"RPUSH": shape["push"], "LPOP": shape["pop"]}
    with open(f"{out}/redis-benchmark-{size}.csv") as f:
        # elements/s = commands/s × elements per command.
        rates = {r[0].split()[0]: float(r[1]) * per[r[0].split()[0]] for r in csv.reader(f) if r and r[0] != "test"}
    cpu = [float(x) for l in open(f"{out}/redis-benchmark-cpu-{size}.txt") if l.strip() and l[0].isdigit() for x in l.split()]
    return rates, shape, sum(cpu)
med = lambda rs, k: statistics.median(r[k] for r in rs)
# End to end, every element is pushed and popped by redis-server's one
# thread: even with a core to itself it moves at most 1/(1/RPUSH + 1/LPOP)
# elements/s (the "one-thread floor").
print("| bytes/event | end to end ev/s | forward relay ev/s | e2e / relay | elements per RPUSH / BLMPOP | redis-benchmark RPUSH / LPOP elements/s | e2e / min(RPUSH, LPOP) | one-thread floor | e2e / floor | CPU s, e2e: nagare in / redis / nagare out / flowbench | redis-server cores, e2e | cores in the steady window: nagare in / redis / nagare out | CPU s, relay: nagare / flowbench | redis-benchmark: its CPU s / redis-server CPU s / wall s | peak RSS MB: nagare in / redis / nagare out | lost | duplicated |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for s in sizes:
    rs, (b, shape, bcpu), rl = rows(s), bench(s), relay(s)
    e2e = med(rs, "steady_events_per_s")
    floor = min(b.get("RPUSH", 0), b.get("LPOP", 0)) or float("nan")
    wall = statistics.median(r["duration_s"] + r["warmup_s"] + r["drain_s"] for r in rs)
    rel = med(rl, "steady_events_per_s")
    one = 1 / (1 / b["RPUSH"] + 1 / b["LPOP"]) if b.get("RPUSH") and b.get("LPOP") else float("nan")
    cpu = {k: med(rs, k) for k in ("nagare_in_cpu_s", "redis_cpu_s", "nagare_out_cpu_s", "harness_cpu_s")}
    win = [window(s, i, r) for i, r in enumerate(rs, 1)]
    wcores = {k: statistics.median(w[k] for w in win) for k in win[0]}
    print(f"| {s} | {e2e:,.0f} | {rel:,.0f} | {e2e / rel:.2f} | {shape['push']} / {shape['pop']} | {b.get('RPUSH', 0):,.0f} / {b.get('LPOP', 0):,.0f} | {e2e / floor:.2f} | "
          f"{one:,.0f} | {e2e / one:.2f} | "
          f"{cpu['nagare_in_cpu_s']:.1f} / {cpu['redis_cpu_s']:.1f} / {cpu['nagare_out_cpu_s']:.1f} / {cpu['harness_cpu_s']:.1f} | "
          f"{med(rs,'redis_cpu_s') / wall:.2f} | "
          f"{wcores['nagare_in_cpu_s']:.2f} / {wcores['redis_cpu_s']:.2f} / {wcores['nagare_out_cpu_s']:.2f} | "
          f"{med(rl, 'sut_cpu_s'):.1f} / {med(rl, 'harness_cpu_s'):.1f} | "
          f"{bcpu:.1f} / {shape['redis_cpu_s']:.1f} / {shape['wall_s']:.1f} | "
          f"{max(r['nagare_in_rss_mb'] for r in rs):.0f} / {max(r['redis_rss_mb'] for r in rs):.0f} / {max(r['nagare_out_rss_mb'] for r in rs):.0f} | "
          f"{sum(r['lost'] for r in rs)} | {sum(r['duplicates'] for r in rs)} |")
    runs = lambda xs: ", ".join(format(r["steady_events_per_s"], ",.0f") for r in xs)
    print(f"runs {s} B, events/s in order: e2e {runs(rs)}; relay {runs(rl)}", file=sys.stderr)
    print(f"runs {s} B, redis-server cores in the steady window: " + ", ".join(f"{w['redis_cpu_s']:.2f}" for w in win), file=sys.stderr)
    # Per event, whole run: what each process spends (µs of CPU).
    per = lambda k: statistics.median(r[k] / r["received"] * 1e6 for r in rs)
    print(f"runs {s} B, CPU µs per event (median): nagare in {per('nagare_in_cpu_s'):.3f}, redis {per('redis_cpu_s'):.3f}, "
          f"nagare out {per('nagare_out_cpu_s'):.3f}, flowbench {per('harness_cpu_s'):.3f}", file=sys.stderr)
PY
