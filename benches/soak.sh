#!/usr/bin/env bash
# Issue 15's soak: nagare relaying forward → forward for DURATION at half of
# its measured maximum relay rate, acks on, a file buffer and a filter, with
# a downstream outage of OUTAGE seconds in the middle. Leaks and slow-downs
# show only over time: compare the first and the last WINDOW.
#
#   benches/soak.sh                 (DURATION=3600 OUTAGE=60; the hour)
#   DURATION=180 OUTAGE=20 benches/soak.sh     (a 3-minute smoke run)
#
# 1. Measures the maximum: a flowbench relay (100-byte events, 200 per
#    frame, acks) through the same config for MAX_RUN (default 15s); RATE
#    (events/s; default half of that maximum) overrides.
# 2. Runs flowbench sink (verifying seqs), a socat proxy in front of it (the
#    outage: the proxy is stopped, then started again), nagare, and a
#    flowbench sender at RATE for DURATION.
# 3. Samples every SAMPLE seconds (default 10): RSS, CPU seconds, events
#    delivered, open fds, buffer chunk files (CSV in the results directory).
# 4. Reports, for the first and the last WINDOW (default DURATION/6, at
#    most 10 minutes): RSS and CPU per event (µs); fds and buffer files at
#    start and end; lost and duplicated. The bar: the last window's RSS and
#    CPU per event within 5 % of the first's, fds and buffer files back to
#    their start, 0 lost, 0 duplicated.
# Ports: SUT_PORT (default 40610), +1 the sink, +2 the proxy, +3 the monitor.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/common.sh
results_dir soak
DURATION=${DURATION:-3600}
OUTAGE=${OUTAGE:-60}
SAMPLE=${SAMPLE:-10}
MAX_RUN=${MAX_RUN:-15s}
WINDOW=${WINDOW:-$((DURATION / 6 < 600 ? DURATION / 6 : 600))}
SIZE=100
SUT=${SUT_PORT:-40610}
SINK=${SINK_PORT:-$((SUT + 1))}
PROXY=$((SUT + 2))
MON=$((SUT + 3))
BUF=$OUT/buffer

config() { # config DESTINATION_PORT
  cat <<EOF
[system]
log_level = "info"
shutdown_timeout = "120s"
[monitor]
bind = "127.0.0.1:$MON"
[[input]]
type = "forward"
bind = "127.0.0.1:$SUT"
[[filter]]
type = "modify"
match = "**"
[filter.add]
soak = "yes"
[[output]]
type = "forward"
match = "**"
heartbeat_type = "none"
[[output.server]]
address = "127.0.0.1:$1"
[output.buffer]
type = "file"
path = "$BUF"
total_limit_size = "256MiB"
retry_max_interval = "2s"
EOF
}

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# 1. The maximum relay rate of this config.
if [ -z "${RATE:-}" ]; then
  config "$SINK" >"$OUT/max.toml"
  sed -i "s|path = \"$BUF\"|path = \"$OUT/max-buffer\"|" "$OUT/max.toml"
  "$FB" relay --sut-port "$SUT" --sink-port "$SINK" --size $SIZE --batch 200 --ack \
    --duration "$MAX_RUN" --sut-log "$OUT/max.log" \
    --sut-cmd "exec $NAGARE run -c $OUT/max.toml" >"$OUT/max.json" 2>/dev/null
  MAX=$(jq -r '.steady_events_per_s | floor' "$OUT/max.json")
  RATE=$((MAX / 2))
  rm -rf "$OUT/max-buffer"
  echo "maximum relay rate $MAX events/s; soaking at $RATE" >&2
fi

# 2. Sink, proxy, nagare, sender.
"$FB" sink --listen "127.0.0.1:$SINK" --verify --quiet --json-summary "$OUT/sink.json" >/dev/null 2>&1 &
sink=$!
pids+=("$sink")
proxy() { socat TCP-LISTEN:"$PROXY",reuseaddr,fork TCP:127.0.0.1:"$SINK" & PROXY_PID=$!; pids+=("$PROXY_PID"); }
proxy
config "$PROXY" >"$OUT/soak.toml"
"$NAGARE" run -c "$OUT/soak.toml" 2>"$OUT/nagare.log" &
nagare=$!
pids+=("$nagare")
wait_port "$SUT"
"$FB" send --addr "127.0.0.1:$SUT" --size $SIZE --batch 200 --ack --rate "$RATE" \
  --duration "${DURATION}s" >"$OUT/send.json" 2>"$OUT/send.log" &
sender=$!
pids+=("$sender")

# 3. Samples, and the outage in the middle.
delivered() { curl -s "127.0.0.1:$MON/metrics" | awk '$1 ~ /^nagare_events_out_total[{]/ && /kind="output"/ {s += $2} END {print s + 0}'; }
sample() { # t: t,rss_kib,cpu_s,delivered,fds,buffer_files
  local stat ticks
  stat=$(cut -d' ' -f14,15 "/proc/$nagare/stat")
  ticks=$(getconf CLK_TCK)
  echo "$1,$(awk '/^VmRSS:/ {print $2}' "/proc/$nagare/status"),$(echo "$stat" | awk -v t="$ticks" '{printf "%.2f", ($1 + $2) / t}'),$(delivered),$(ls "/proc/$nagare/fd" | wc -l),$(find "$BUF" -name '*.chunk' | wc -l)"
}
echo "t,rss_kib,cpu_s,delivered,fds,buffer_files" >"$OUT/samples.csv"
start=$(date +%s)
outage_at=$(((DURATION - OUTAGE) / 2))
outage_done=0
while kill -0 "$sender" 2>/dev/null; do
  t=$(($(date +%s) - start))
  sample "$t" >>"$OUT/samples.csv"
  if [ "$outage_done" = 0 ] && [ "$t" -ge "$outage_at" ]; then
    echo "t=${t}s: downstream outage for ${OUTAGE}s" >&2
    kill "$PROXY_PID"
    sleep "$OUTAGE"
    proxy
    outage_done=1
    continue
  fi
  sleep "$SAMPLE"
done
sent=$(jq -r '.acked' "$OUT/send.json")
# Until everything acked was delivered (or two minutes).
for _ in $(seq 240); do
  [ "$(delivered)" -ge "$sent" ] && break
  sleep 0.5
done
sleep 1
sample "$(($(date +%s) - start))" >>"$OUT/samples.csv"
kill -TERM "$nagare"
wait "$nagare" || true
kill -INT "$sink"
wait "$sink" || true

# 4. The report.
python3 - "$OUT/samples.csv" "$OUT/sink.json" "$sent" "$WINDOW" "$RATE" "$DURATION" "$OUTAGE" <<'EOF'
import csv, json, sys
rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(open(sys.argv[1]))]
sink = json.load(open(sys.argv[2]))
sent, window, rate, duration, outage = (int(x) for x in sys.argv[3:8])
# The last window of sending (the final sample, after the drain, is left out).
end = max(r["t"] for r in rows if r["t"] <= duration)
def window_of(lo, hi):
    w = [r for r in rows if lo <= r["t"] <= hi]
    a, b = w[0], w[-1]
    events = b["delivered"] - a["delivered"]
    rss = sum(r["rss_kib"] for r in w) / len(w) / 1024
    cpu = (b["cpu_s"] - a["cpu_s"]) / events * 1e6 if events else float("nan")
    return rss, cpu, events
first = window_of(0, window)
last = window_of(end - window, end)
# Acked by nagare but never received (once; duplicates apart).
lost = sent - (sink.get("events", 0) - sink.get("duplicates", 0))
print(f"soak: {duration} s at {rate} events/s, outage {outage} s; {sent} events acked, {sink.get('events', 0)} received")
print()
print("| | RSS (MiB, mean) | CPU per event (µs) | events |")
print("| --- | --- | --- | --- |")
print(f"| first {window} s | {first[0]:.1f} | {first[1]:.3f} | {first[2]:.0f} |")
print(f"| last {window} s | {last[0]:.1f} | {last[1]:.3f} | {last[2]:.0f} |")
print(f"| last / first | {last[0] / first[0]:.3f} | {last[1] / first[1]:.3f} | |")
print()
# The first sample is taken before any connection exists; compare the
# first sample under load with the last one under load, and show the idle
# ends (before the sender connected, after it left) beside them.
loaded = [r for r in rows if r["delivered"] > 0 and r["t"] <= end]
a, b = loaded[0], loaded[-1]
print(f"fds under load: {a['fds']:.0f} at t={a['t']:.0f} s, {b['fds']:.0f} at t={b['t']:.0f} s (idle: {rows[0]['fds']:.0f} before, {rows[-1]['fds']:.0f} after); buffer chunk files: {a['buffer_files']:.0f} and {b['buffer_files']:.0f} (idle: {rows[0]['buffer_files']:.0f} before, {rows[-1]['buffer_files']:.0f} after)")
print(f"lost: {lost}; duplicated: {sink.get('duplicates', 0)}")
EOF
