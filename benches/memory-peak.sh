#!/usr/bin/env bash
# Issue 11's memory bound: nagare's peak RSS (VmHWM) against its buffer's
# total_limit_size, for forward → forward and tail → forward, with the
# destination down (the buffer fills up and stays full) and with a live
# flowbench sink (the backlog flows out: chunks are made by the inputs and
# freed by the flush workers). Prints a Markdown table, one row per case.
#
#   benches/memory-peak.sh [LIMITS]      (default "8MiB 64MiB")
#
# The relay cases send 100-byte and 1 KiB events, 200 per frame, over 4
# connections for 6 s; the tail case reads a file of 3,000,000 lines of 100
# bytes from its start (made once, /tmp/nagare-memory-peak-100.log).
set -euo pipefail
cd "$(dirname "$0")/.."
LIMITS=${1:-"8MiB 64MiB"}
. benches/common.sh
results_dir memory
LINES=3000000
FILE=/tmp/nagare-memory-peak-100.log
[ -f "$FILE" ] || "$FB" genfile --path "$FILE" --size 100 --count "$LINES" >/dev/null 2>&1

metric() { # metric PORT NAME: the output's value of nagare_NAME
  curl -s "127.0.0.1:$1/metrics" | awk -v m="nagare_$2" '$1 ~ "^"m"[{]" && /kind="output"/ {print $2}'
}

case_() { # case_ INPUT(relay|tail) SIZE DEST(down|live) LIMIT
  local port=${SUT_PORT:-37224} dest=$((${SUT_PORT:-37224} + 1)) mon=$((${SUT_PORT:-37224} + 2))
  local cfg=$OUT/$1-$2-$3-$4.toml input sink="" sender="" pid
  if [ "$1" = relay ]; then
    input="type = \"forward\"
bind = \"127.0.0.1:$port\""
  else
    input="type = \"tail\"
path = \"$FILE\"
tag = \"t\"
read_from_head = true"
  fi
  cat > "$cfg" <<EOF
[system]
log_level = "warn"
shutdown_timeout = "1s"
[monitor]
bind = "127.0.0.1:$mon"
[[input]]
$input
[[output]]
type = "forward"
match = "**"
heartbeat_type = "none"
[[output.server]]
address = "127.0.0.1:$dest"
[output.buffer]
total_limit_size = "$4"
EOF
  if [ "$3" = live ]; then
    "$FB" sink --listen "127.0.0.1:$dest" --quiet >/dev/null 2>&1 &
    sink=$!
  fi
  "$NAGARE" run -c "$cfg" 2>"$cfg.log" &
  pid=$!
  wait_port "$mon"
  if [ "$1" = relay ]; then
    "$FB" send --addr "127.0.0.1:$port" --size "$2" --batch 200 --conns 4 --duration 6s >/dev/null 2>&1 &
    sender=$!
  fi
  if [ "$3" = live ]; then # until the sender is done, or the file is out
    for _ in $(seq 1200); do
      if [ "$1" = relay ]; then kill -0 "$sender" 2>/dev/null || break
      else [ "$(metric "$mon" events_out_total)" = "$LINES" ] && break; fi
      sleep 0.5
    done
  fi
  local last=-1 same=0 b # until the buffer stops moving for 2 s
  for _ in $(seq 240); do
    b=$(metric "$mon" buffer_bytes)
    if [ "$b" = "$last" ]; then same=$((same + 1)); else same=0; fi
    last=$b
    [ "$same" -ge 4 ] && break
    sleep 0.5
  done
  local hwm
  hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status")
  kill -9 "$pid"
  for p in $sender $sink; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  python3 - "$1" "$2" "$3" "$4" "$hwm" <<'PY'
import sys
inp, size, dest, limit, hwm = sys.argv[1:]
units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
lim = next(int(limit[:-3]) * m for u, m in units.items() if limit.endswith(u))
peak = int(hwm) * 1024
print(f"| {'forward' if inp == 'relay' else 'tail'} | {size} B | {dest} | {limit} | {peak / 1e6:.1f} | {(lim + 24e6) / 1e6:.1f} |")
PY
}

echo "| input | event size | destination | total_limit_size | peak RSS MB | bound MB |"
echo "| --- | --- | --- | --- | --- | --- |"
for limit in $LIMITS; do
  for dest in down live; do
    case_ relay 100 "$dest" "$limit"
    case_ relay 1024 "$dest" "$limit"
    case_ tail 100 "$dest" "$limit"
  done
done
