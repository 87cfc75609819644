#!/usr/bin/env bash
# Issue 13's syslog bench: the same RFC 3164 lines sent over TCP (newline
# framed, one connection per sender, sent from a file with sendfile) to
#   - nagare: syslog input (tcp) → file output (JSON lines), and
#   - rsyslog: imtcp → omfile (its default file template),
# in the same sitting, alternating, RUNS times each. A run ends when the
# output file holds every line; lines/s is lines / (last line written −
# first byte sent). Prints a Markdown table of medians with the CPU
# seconds and peak RSS of the receiver.
#
#   benches/syslog.sh [RUNS] [LINES] [SIZE]     (defaults: 3 runs, 1000000 lines, 100 B messages)
#
# Ports: SUT_PORT (nagare's syslog input, default 40200), RS_PORT
# (rsyslog's imtcp, default 40201). SENDERS parallel connections (default 2).
# Needs rsyslogd (Debian package rsyslog) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
LINES=${2:-1000000}
SIZE=${3:-100}
SUT_PORT=${SUT_PORT:-40200}
RS_PORT=${RS_PORT:-40201}
SENDERS=${SENDERS:-2}
command -v rsyslogd >/dev/null || { echo "rsyslogd is needed (apt-get install rsyslog)" >&2; exit 1; }
. benches/common.sh
results_dir syslog

# The lines, split into one file per sender: "<14>Mmm dd hh:mm:ss host app[pid]: seq=N xxx…".
python3 - "$OUT" "$LINES" "$SIZE" "$SENDERS" <<'PY'
import sys, time
out, lines, size, senders = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
stamp = time.strftime("%b %e %H:%M:%S")
files = [open(f"{out}/lines-{i}.txt", "wb") for i in range(senders)]
for n in range(lines):
    msg = f"seq={n} ".ljust(size, "x")
    files[n % senders].write(f"<14>{stamp} benchhost app[4242]: {msg}\n".encode())
for f in files:
    f.close()
PY

# send PORT: every sender's file over its own connection, in parallel.
send() {
    /usr/bin/time -f "%U %S" -o "$OUT/send-cpu.txt" python3 - "$OUT" "$1" "$SENDERS" <<'PY'
import socket, sys, threading
out, port, senders = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def one(i):
    s = socket.create_connection(("127.0.0.1", port))
    with open(f"{out}/lines-{i}.txt", "rb") as f:
        s.sendfile(f)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()
ts = [threading.Thread(target=one, args=(i,)) for i in range(senders)]
[t.start() for t in ts]
[t.join() for t in ts]
PY
}

count() { if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi; }
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
rss() { awk '/^VmHWM/ { print $2 / 1024 }' "/proc/$1/status"; }

# run NAME PID PORT FILE: sends, waits for every line in FILE, appends a JSON result.
measure() {
    local name=$1 pid=$2 port=$3 file=$4
    wait_port "$port" || { echo "$name is not listening on $port" >&2; kill "$pid"; exit 1; }
    local start end
    start=$(date +%s.%N)
    send "$port" &
    local sender=$!
    # Counts the lines as they are written (reading only what is new, so
    # the wait costs little CPU); prints when the last one was seen.
    end=$(python3 - "$file" "$LINES" <<'PY'
import os, sys, time
path, want = sys.argv[1], int(sys.argv[2])
pos = lines = 0
deadline = time.time() + 300
while lines < want and time.time() < deadline:
    try:
        with open(path, "rb") as f:
            f.seek(pos)
            data = f.read()
    except FileNotFoundError:
        data = b""
    pos += len(data)
    lines += data.count(b"\n")
    if lines < want:
        time.sleep(0.01)
print(f"{time.time():.6f}")
PY
)
    local got; got=$(count "$file")
    local rcpu; rcpu=$(cpu "$pid")
    # The sender ends when the receiver has closed its connections.
    for _ in $(seq 100); do kill -0 "$sender" 2>/dev/null || break; sleep 0.05; done
    kill "$sender" 2>/dev/null || true
    wait "$sender" 2>/dev/null || true
    local scpu; scpu=$(awk '{ s = $1 + $2 } END { print s + 0 }' "$OUT/send-cpu.txt" 2>/dev/null || echo 0)
    rm -f "$OUT/send-cpu.txt"
    printf '{"sut": "%s", "lines": %s, "seconds": %s, "cpu_s": %s, "rss_mb": %s, "sender_cpu_s": %s}\n' \
        "$name" "$got" "$(echo "$end - $start" | bc -l)" "$rcpu" "$(rss "$pid")" "$scpu" >> "$OUT/results.jsonl"
    kill "$pid"; wait "$pid" 2>/dev/null || true
}

for i in $(seq "$RUNS"); do
    echo "run $i: nagare" >&2
    rm -rf "$OUT/nagare-out.log" "$OUT/buf"
    cat > "$OUT/nagare.toml" <<TOML
[[input]]
type = "syslog"
bind = "127.0.0.1:$SUT_PORT"
protocol = "tcp"
tag = "bench"

[[output]]
type = "file"
match = "**"
path = "$OUT/nagare-out.log"
# Neither receiver fsyncs. rsyslog's omfile writes each batch its queue
# hands it as soon as it has it (flushOnTXEnd); a 10 ms interval is the
# nearest to that (a full chunk is written at once either way), where
# 100 ms added up to 0.125 s of waiting for the last lines to a run.
[output.buffer]
flush_interval = "10ms"
TOML
    "$NAGARE" run -c "$OUT/nagare.toml" 2> "$OUT/nagare-$i.log" &
    measure nagare $! "$SUT_PORT" "$OUT/nagare-out.log"

    echo "run $i: rsyslog" >&2
    rm -rf "$OUT/rsyslog-out.log" "$OUT/rsyslog-work"; mkdir -p "$OUT/rsyslog-work"
    cat > "$OUT/rsyslog.conf" <<CONF
global(workDirectory="$OUT/rsyslog-work")
module(load="imtcp")
input(type="imtcp" address="127.0.0.1" port="$RS_PORT" ruleset="bench")
ruleset(name="bench") {
  action(type="omfile" file="$OUT/rsyslog-out.log")
}
CONF
    rsyslogd -n -f "$OUT/rsyslog.conf" -i "$OUT/rsyslog.pid" 2> "$OUT/rsyslog-$i.log" &
    measure rsyslog $! "$RS_PORT" "$OUT/rsyslog-out.log"
done

python3 - "$OUT" "$LINES" "$SIZE" <<'PY'
import json, statistics, sys
out, lines, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(l) for l in open(f"{out}/results.jsonl")]
print(f"syslog TCP in → file, {lines} lines of {size} B messages, medians of {len(rows) // 2} runs\n")
print("| receiver | lines/s | CPU s | lines per CPU-s | sender CPU s | peak RSS MiB | complete |")
print("| --- | --- | --- | --- | --- | --- | --- |")
med = {}
for sut in ("nagare", "rsyslog"):
    r = [x for x in rows if x["sut"] == sut]
    rate = statistics.median(x["lines"] / x["seconds"] for x in r)
    cpu = statistics.median(x["cpu_s"] for x in r)
    med[sut] = rate
    ok = all(x["lines"] == lines for x in r)
    scpu = statistics.median(x.get("sender_cpu_s", 0) for x in r)
    print(f"| {sut} | {rate:,.0f} | {cpu:.2f} | {lines / cpu:,.0f} | {scpu:.2f} | {max(x['rss_mb'] for x in r):.0f} | {'yes' if ok else 'NO'} |")
print(f"\nnagare / rsyslog: {med['nagare'] / med['rsyslog']:.2f}×")
PY
