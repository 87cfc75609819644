#!/usr/bin/env bash
# Each nagare of benches/queues-redis.sh alone, for CPU per event and
# profiles: flowbench sends N events of 100 B to the producing nagare
# (queues-redis-in.toml), which fills the Redis list; then the consuming
# nagare (queues-redis-out.toml) drains it to flowbench's sink. Prints each
# nagare's CPU seconds and redis-server's, with INFO commandstats, and
# leaves perf profiles in OUTDIR when perf is installed.
#
#   benches/queues-redis-alone.sh NAGARE_BIN OUTDIR
#
# N (default 3000000); CG (perf's call graph option, default -g; e.g.
# CG="--call-graph dwarf,16384"); FREQ (perf's sampling rate, default 999);
# PERF=0 measures CPU without perf; ports REDIS_PORT, SUT_PORT, SINK_PORT.
set -u
NAGARE=$1 O=$2
mkdir -p "$O"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FB=${FLOWBENCH_DIR:-$ROOT/../shared/bench}/bin/flowbench
export REDIS_PORT=${REDIS_PORT:-40510} FLOWBENCH_SUT_PORT=${SUT_PORT:-40511} FLOWBENCH_SINK_PORT=${SINK_PORT:-40512}
N=${N:-3000000}
record() { [ "${PERF:-1}" != 0 ] && command -v perf >/dev/null && exec perf record -F "${FREQ:-999}" ${CG:--g} -p "$1" -o "$2" 2>/dev/null; }
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
d=$(mktemp -d)
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --dir "$d" >"$d/redis.log" 2>&1 &
rp=$!
for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$NAGARE" run -c "$ROOT/benches/queues-redis-in.toml" > "$O/producer.log" 2>&1 &
pp=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$FLOWBENCH_SUT_PORT") 2>/dev/null && break; sleep 0.1; done
record $pp "$O/producer.perf" &
perfp=$!
c0=$(cpu $pp); r0=$(cpu $rp); t0=$(date +%s.%N)
"$FB" send --addr "127.0.0.1:$FLOWBENCH_SUT_PORT" --count "$N" --size 100 --batch 200 > "$O/send.json" 2>&1
until [ "$(redis-cli -p "$REDIS_PORT" llen bench)" -ge "$N" ]; do sleep 0.1; done
t1=$(date +%s.%N); c1=$(cpu $pp); r1=$(cpu $rp)
kill -INT $perfp 2>/dev/null; wait $perfp 2>/dev/null
echo "producer: $N events in $(echo "$t1 - $t0" | bc) s, nagare CPU $(echo "$c1 - $c0" | bc) s, redis CPU $(echo "$r1 - $r0" | bc) s" | tee "$O/summary.txt"
redis-cli -p "$REDIS_PORT" info commandstats | grep -E "rpush|blmpop" | tee -a "$O/summary.txt"
kill $pp; wait $pp
"$FB" sink --listen "127.0.0.1:$FLOWBENCH_SINK_PORT" --quiet > "$O/sink.json" 2>&1 &
sp=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$FLOWBENCH_SINK_PORT") 2>/dev/null && break; sleep 0.1; done
"$NAGARE" run -c "$ROOT/benches/queues-redis-out.toml" > "$O/consumer.log" 2>&1 &
cp=$!
record $cp "$O/consumer.perf" &
perfp=$!
c0=$(cpu $cp); r0=$(cpu $rp); t0=$(date +%s.%N)
until [ "$(redis-cli -p "$REDIS_PORT" llen bench)" -eq 0 ]; do sleep 0.05; done
t1=$(date +%s.%N); c1=$(cpu $cp); r1=$(cpu $rp)
kill -INT $perfp 2>/dev/null; wait $perfp 2>/dev/null
echo "consumer: $N events in $(echo "$t1 - $t0" | bc) s, nagare CPU $(echo "$c1 - $c0" | bc) s, redis CPU $(echo "$r1 - $r0" | bc) s" | tee -a "$O/summary.txt"
redis-cli -p "$REDIS_PORT" info commandstats | grep -E "rpush|blmpop" | tee -a "$O/summary.txt"
kill $cp $sp; wait $cp $sp 2>/dev/null
kill $rp; wait $rp
rm -rf "$d"
