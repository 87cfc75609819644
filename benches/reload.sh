#!/usr/bin/env bash
# Issue 15's reliability bar, the long run: the forward relay rate while
# nagare reloads its config every INTERVAL seconds, as a ratio of the rate
# without reloads (goal: at least 0.9), with 0 lost and 0 duplicated.
#
#   benches/reload.sh                    (DURATION=60s INTERVAL=1 SIZE=100)
#
# Two flowbench relay runs (100-byte events, 200 per frame, acks on, as fast
# as nagare takes them): one without reloads, one with a `POST /api/reload`
# every INTERVAL seconds, alternating between two configs that differ in the
# output's memory buffer (flush_interval: a new buffer each time, the old
# one drained) and a filter added or removed. The filter matches a tag the
# load does not use, so the ratio measures the reload, not the filter's own
# cost (tests/it/reload.rs checks a filter on the events themselves).
# Prints one Markdown row: rates, ratio, reloads, lost, duplicated.
# Ports: SUT_PORT (default 40600), SUT_PORT+1 the sink, SUT_PORT+2 the monitor.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/common.sh
results_dir reload
DURATION=${DURATION:-60s}
INTERVAL=${INTERVAL:-1}
SIZE=${SIZE:-100}
SUT=${SUT_PORT:-40600}
SINK=${SINK_PORT:-$((SUT + 1))}
MON=$((SUT + 2))

config() { # config FLUSH_INTERVAL WITH_FILTER(yes|no)
  cat <<EOF
[system]
log_level = "info"
[monitor]
bind = "127.0.0.1:$MON"
[[input]]
type = "forward"
bind = "127.0.0.1:$SUT"
EOF
  if [ "$2" = yes ]; then
    printf '[[filter]]\ntype = "grep"\nmatch = "other.**"\n[[filter.regex]]\nkey = "message"\npattern = "x"\n'
  fi
  cat <<EOF
[[output]]
type = "forward"
match = "**"
heartbeat_type = "none"
[[output.server]]
address = "127.0.0.1:$SINK"
[output.buffer]
flush_interval = "$1"
EOF
}
config 100ms no >"$OUT/a.toml"
config 200ms yes >"$OUT/b.toml"
"$NAGARE" check -c "$OUT/a.toml" >/dev/null
"$NAGARE" check -c "$OUT/b.toml" >/dev/null

# reloader: every INTERVAL s, the other config, until the file `stop` shows up.
reloader() {
  local which=b ok=0 failed=0
  wait_port "$MON" || { echo "monitor never listened" >&2; return 1; }
  while [ ! -e "$OUT/stop" ]; do
    sleep "$INTERVAL"
    cp "$OUT/$which.toml" "$OUT/run.toml"
    case $(curl -s -o /dev/null -w '%{http_code}' -X POST "127.0.0.1:$MON/api/reload") in
      200) ok=$((ok + 1)) ;;
      000) break ;; # no answer: the relay run is over and nagare stopped
      *) failed=$((failed + 1)) ;;
    esac
    if [ "$which" = b ]; then which=a; else which=b; fi
  done
  echo "$ok $failed" >"$OUT/reloads"
}

relay() { # relay NAME WITH_RELOADS(yes|no)
  cp "$OUT/a.toml" "$OUT/run.toml"
  rm -f "$OUT/stop" "$OUT/reloads"
  local r=""
  if [ "$2" = yes ]; then
    reloader &
    r=$!
  fi
  "$FB" relay --sut-port "$SUT" --sink-port "$SINK" --size "$SIZE" --batch 200 --ack \
    --duration "$DURATION" --sut-log "$OUT/$1.log" \
    --sut-cmd "exec $NAGARE run -c $OUT/run.toml" >"$OUT/$1.json" 2>/dev/null
  touch "$OUT/stop"
  [ -z "$r" ] || wait "$r"
}

relay plain no
relay reloading yes
read -r ok failed <"$OUT/reloads"
jq -r -n --slurpfile p "$OUT/plain.json" --slurpfile r "$OUT/reloading.json" \
  --arg ok "$ok" --arg failed "$failed" '
  ($p[0].window_events_per_s) as $pw | ($r[0].window_events_per_s) as $rw |
  "| events/s without reloads | with reloads | ratio (goal ≥ 0.9) | reloads ok / failed | lost | duplicated |",
  "| --- | --- | --- | --- | --- | --- |",
  "| \($pw | floor) | \($rw | floor) | \(($rw / $pw * 100 | floor) / 100) | \($ok) / \($failed) | \($p[0].lost + $r[0].lost) | \($p[0].duplicates + $r[0].duplicates) |"'
