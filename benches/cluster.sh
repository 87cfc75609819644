#!/usr/bin/env bash
# Issue 16's performance bar, on the multi-host topology of the tests
# (crates/nagare/tests/cluster/topology.toml; one network namespace per host,
# joined by a bridge in a namespace of its own; needs root and iproute2).
#
#   benches/cluster.sh [ROUNDS] [DURATION]      (defaults: 3 rounds of 10s)
#
# Each round, alternating: every forwarder alone (flowbench send --ack →
# nagare forwarder → one nagare aggregator → flowbench sink), then all five
# at once into three aggregators. 100-byte events, acks on at every hop.
# Prints, as medians over the rounds: the sum of the five alone, the 5→3
# aggregate and their ratio (the bar: ≥ 0.8), and events per CPU-second of
# all nagare processes together, alone and 5→3 (the floor on a machine with
# fewer cores than processes).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
DURATION=${2:-10s}
SIZE=${SIZE:-100}
[ "$(id -u)" = 0 ] || { echo "network namespaces need root" >&2; exit 1; }
. benches/common.sh
results_dir cluster
TOPO=crates/nagare/tests/cluster/topology.toml
P=ngb$$x0-
PORT=24224

# The namespaces of an earlier run of this script that no longer runs.
for ns in $(ip netns list | awk '{print $1}' | grep '^ngb' || true); do
  pid=${ns#ngb}; pid=${pid%%x*}
  [ -d "/proc/$pid" ] && continue
  for p in $(ip netns pids "$ns"); do kill -9 "$p"; done
  ip netns del "$ns"
done

# name → address, from the topology file.
declare -A ADDR
while read -r name addr; do ADDR[$name]=$addr; done < <(
  awk -F'"' '/^name/ {n=$2} /^addr/ {print n, $2}' "$TOPO")
LEN=$(awk -F'"' '/^subnet/ {split($2, a, "/"); print a[2]}' "$TOPO")

cleanup() {
  for h in "${!ADDR[@]}" sw; do
    for p in $(ip netns pids "$P$h" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$P$h" 2>/dev/null || true
  done
}
trap cleanup EXIT
ip netns add "${P}sw"
ip -n "${P}sw" link add br0 type bridge
ip -n "${P}sw" link set br0 up
for h in "${!ADDR[@]}"; do
  ip netns add "$P$h"
  ip -n "$P$h" link set lo up
  ip -n "${P}sw" link add "p-$h" type veth peer name eth0 netns "$P$h"
  ip -n "${P}sw" link set "p-$h" master br0 up
  ip -n "$P$h" addr add "${ADDR[$h]}/$LEN" dev eth0
  ip -n "$P$h" link set eth0 up
done

buffer='[output.buffer]
flush_interval = "100ms"
chunk_limit_size = "512KiB"
total_limit_size = "8MiB"
flush_thread_count = 2'
forwarder_cfg() { # forwarder_cfg AGG...
  printf '[system]\nlog_level = "warn"\n[[input]]\ntype = "forward"\nbind = "127.0.0.1:%s"\n' $PORT
  printf '[[output]]\ntype = "forward"\nmatch = "**"\nrequire_ack_response = true\n'
  for a in "$@"; do printf '[[output.server]]\naddress = "%s:%s"\n' "${ADDR[$a]}" $PORT; done
  echo "$buffer"
}
aggregator_cfg() { # aggregator_cfg HOST
  printf '[system]\nlog_level = "warn"\n[[input]]\ntype = "forward"\nbind = "%s:%s"\n' "${ADDR[$1]}" $PORT
  printf '[[output]]\ntype = "forward"\nmatch = "**"\nrequire_ack_response = true\n'
  printf '[[output.server]]\naddress = "%s:%s"\n' "${ADDR[sink]}" $PORT
  echo "$buffer"
}
wait_listen() { # wait_listen HOST ADDR
  for _ in $(seq 100); do
    ip netns exec "$P$1" bash -c "exec 3<>/dev/tcp/${2/:/\/}" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $2 in $1" >&2; return 1
}
cpu_ticks() { # sum of utime+stime of the given pids
  local t=0 p
  for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}

# run NAME "FORWARDERS" "AGGREGATORS": one measurement, a JSON line in $OUT/NAME.jsonl.
run() {
  local name=$1 fwds=$2 aggs=$3 pids=() sends=() i=0 f a
  local tag="$OUT/$name-$(date +%s%N)"
  ip netns exec "${P}sink" "$FB" sink --listen "${ADDR[sink]}:$PORT" --verify --idle-exit 3s \
    --quiet --json-summary "$tag.sink.json" > /dev/null &
  local sink=$!
  wait_listen sink "${ADDR[sink]}:$PORT"
  for a in $aggs; do
    aggregator_cfg "$a" > "$OUT/$a.toml"
    ip netns exec "$P$a" "$NAGARE" run -c "$OUT/$a.toml" 2>>"$OUT/$a.log" & pids+=($!)
    wait_listen "$a" "${ADDR[$a]}:$PORT"
  done
  for f in $fwds; do
    # shellcheck disable=SC2086
    forwarder_cfg $aggs > "$OUT/$f.toml"
    ip netns exec "$P$f" "$NAGARE" run -c "$OUT/$f.toml" 2>>"$OUT/$f.log" & pids+=($!)
    wait_listen "$f" "127.0.0.1:$PORT"
  done
  local c0; c0=$(cpu_ticks "${pids[@]}")
  for f in $fwds; do
    # Disjoint seq ranges, so the sink's duplicate check spans all senders.
    ip netns exec "$P$f" "$FB" send --addr "127.0.0.1:$PORT" --ack --size "$SIZE" --batch 200 \
      --duration "$DURATION" --seq-start $((i * 100000000)) > "$tag.send-$f.json" & sends+=($!)
    i=$((i + 1))
  done
  wait "${sends[@]}"
  wait "$sink"
  local c1; c1=$(cpu_ticks "${pids[@]}")
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
  python3 - "$tag" "$name" $((c1 - c0)) "$(getconf CLK_TCK)" >> "$OUT/$name.jsonl" <<'PY'
import glob, json, sys
tag, name, ticks, hz = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sink = json.load(open(tag + ".sink.json"))
sends = [json.load(open(p)) for p in glob.glob(tag + ".send-*.json")]
acked = sum(s["acked"] for s in sends)
cpu = ticks / hz
print(json.dumps({
    "name": name,
    "steady_events_per_s": sink["steady_events_per_s"],
    "events": sink["events"], "acked": acked,
    "lost": acked - (sink["events"] - sink["duplicates"]), "duplicates": sink["duplicates"],
    "nagare_cpu_s": cpu, "events_per_nagare_cpu_s": sink["events"] / cpu if cpu else 0,
    "send_errors": [s["error"] for s in sends if s.get("error")],
}))
PY
  tail -n 1 "$OUT/$name.jsonl" >&2
}

uptime >&2
for r in $(seq "$ROUNDS"); do
  echo "round $r" >&2
  for f in f1 f2 f3 f4 f5; do run "alone-$f" "$f" a1; done
  run cluster "f1 f2 f3 f4 f5" "a1 a2 a3"
  uptime >&2
done

python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
load = lambda n: [json.loads(l) for l in open(f"{out}/{n}.jsonl") if l.strip()]
alone = [load(f"alone-f{i}") for i in range(1, 6)]
cluster = load("cluster")
med = statistics.median
sums = [sum(a[r]["steady_events_per_s"] for a in alone) for r in range(rounds)]
ratios = [c["steady_events_per_s"] / s for c, s in zip(cluster, sums)]
alone_eff = [med(a[r]["events_per_nagare_cpu_s"] for a in alone) for r in range(rounds)]
eff_ratios = [c["events_per_nagare_cpu_s"] / e for c, e in zip(cluster, alone_eff)]
every = [x for a in alone for x in a] + cluster
print("| measure | median over rounds |")
print("| --- | --- |")
print(f"| one forwarder alone → 1 aggregator, ev/s (median of f1..f5) | {med(med(a[r]['steady_events_per_s'] for a in alone) for r in range(rounds)):,.0f} |")
print(f"| sum of the five alone, ev/s | {med(sums):,.0f} |")
print(f"| 5 forwarders → 3 aggregators, ev/s | {med(c['steady_events_per_s'] for c in cluster):,.0f} |")
print(f"| aggregate / sum of alone (bar 0.8) | {med(ratios):.2f} |")
print(f"| events per nagare CPU-second, alone | {med(alone_eff):,.0f} |")
print(f"| events per nagare CPU-second, 5→3 | {med(c['events_per_nagare_cpu_s'] for c in cluster):,.0f} |")
print(f"| 5→3 / alone, per CPU-second | {med(eff_ratios):.2f} |")
print(f"| lost, duplicated (all runs) | {sum(x['lost'] for x in every)}, {sum(x['duplicates'] for x in every)} |")
PY
