#!/usr/bin/env bash
# The fuse input's own throughput: a file from `flowbench genfile` is copied
# with dd (1 MiB writes) into a nagare FUSE mount (parser none), and the
# events go to a null output (OUT=null: the input alone) or are forwarded to
# `flowbench sink --expect N` (OUT=forward). Prints the writer's MB/s and
# lines/s (dd's wall time: with backpressure, the writer is only as fast as
# nagare takes the lines) and nagare's CPU seconds; with forward, also the
# sink's rate and count. Needs /dev/fuse and root.
#
#   benches/fuse-perf.sh SIZE COUNT [OUT] [WRITER]
#     e.g. 1024 1000000 null; 13 5000000 forward; 4096 250000 null cat
#     WRITER: dd (default, bs=1M) or cat (coreutils' own buffer size)
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-1024}
COUNT=${2:-1000000}
OUT=${3:-null}
WRITER=${4:-dd}
. benches/common.sh
W=$(mktemp -d /tmp/nagare-fuseperf-XXXX)
PORT=${SINK_PORT:-36302}
PID= SINK=
cleanup() {
    [ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    [ -n "$SINK" ] && kill "$SINK" 2>/dev/null || true
    grep -q " $W/mnt " /proc/mounts && umount -l "$W/mnt" || true
    rm -rf "$W"
}
trap cleanup EXIT
"$FB" genfile --path "$W/in.log" --size "$SIZE" --count "$COUNT" >/dev/null 2>&1
if [ "$OUT" = forward ]; then
    OUTPUT="type = \"forward\"
match = \"**\"
heartbeat_type = \"none\"
[[output.server]]
address = \"127.0.0.1:$PORT\""
    "$FB" sink --listen "127.0.0.1:$PORT" --expect "$COUNT" --idle-exit 5s --quiet > "$W/sink.json" 2>/dev/null &
    SINK=$!
    sleep 0.3
else
    OUTPUT='type = "null"
match = "**"'
fi
cat > "$W/fuse.toml" <<TOML
[[input]]
type = "fuse"
mountpoint = "$W/mnt"
tag = "perf.*"
[[output]]
$OUTPUT
[output.buffer]
flush_interval = "100ms"
TOML
"$NAGARE" run -c "$W/fuse.toml" 2>"$W/nagare.log" &
PID=$!
for _ in $(seq 200); do grep -q " $W/mnt " /proc/mounts && break; sleep 0.05; done
T0=$(date +%s.%N)
if [ "$WRITER" = cat ]; then
    cat "$W/in.log" > "$W/mnt/in.log"
else
    dd if="$W/in.log" of="$W/mnt/in.log" bs=1M status=none
fi
T1=$(date +%s.%N)
if [ -n "$SINK" ]; then wait "$SINK" || true; SINK=; fi
CPU=$(awk '{print ($14+$15)/100}' "/proc/$PID/stat")
kill -TERM "$PID"; wait "$PID" || true; PID=
python3 - "$T0" "$T1" "$CPU" "$SIZE" "$COUNT" "$OUT" "$WRITER" "$W/sink.json" <<'PY'
import json, os, sys
t0, t1, cpu = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
size, count, out, writer, sink = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7], sys.argv[8]
s = t1 - t0
print(f"size {size} B, {count:,} lines, {writer} -> fuse -> {out}: writer {s:.2f}s = "
      f"{count*(size+1)/s/1e6:,.0f} MB/s, {count/s:,.0f} lines/s; nagare CPU {cpu:.2f}s")
if out == "forward" and os.path.exists(sink):
    d = json.load(open(sink))
    ev, a = d["events"], d["active_s"]
    print(f"  sink: {ev:,} events in {a:.2f}s = {ev/a:,.0f} lines/s, errors {d.get('errors')}")
PY
