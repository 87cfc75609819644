#!/usr/bin/env bash
# Issue 5, performance point 2: the K2HFTFUSE workload end to end. One file of
# fixed-size lines enters a sender nagare three ways (appended to a tailed
# file, written into a drop directory, written into a FUSE mount); the sender
# forwards it (forward output, memory buffer) over loopback to a receiver nagare
# whose forward input feeds a `file` output (single_value, append) that unifies
# everything into one file. Timed from the first write until the unified file
# holds every byte; then `cmp` against the source (one source per run, so the
# order must be kept too). Prints a Markdown table of medians.
#
#   benches/k2hftfuse.sh [RUNS] [MODES] [SIZES]
#     RUNS   runs per cell, median reported (default 3)
#     MODES  any of tail directory fuse (default all three; fuse is skipped,
#            loudly, when this nagare has no fuse input)
#     SIZES  SIZE:LINES pairs (default "10:5000000 1024:1000000 4096:250000")
#   env: K2H_TMP   folder for the source files and the runs (default: a new
#                  folder under /tmp, removed at exit; the default sizes need
#                  about 4.5 GB free)
#        K2H_TIMEOUT  seconds one run may take (default 180)
#        K2H_ACK=1    require_ack_response = true on the sender
#        K2H_KEEP=1   keep the working folder, with the folders of failed runs
#                     (configs, logs, the unified file) for a look
#
# Line sizes exclude the newline. `flowbench genfile` writes plain lines of at
# least 13 bytes, so shorter ones come from `seq` (a zero-padded sequence
# number: still one distinct line each, so a reordering fails `cmp`).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
MODES=${2:-tail directory fuse}
SIZES=${3:-10:5000000 1024:1000000 4096:250000}
TIMEOUT=${K2H_TIMEOUT:-180}
ACK=false
[ "${K2H_ACK:-0}" = 1 ] && ACK=true
for mode in $MODES; do
    case $mode in
    tail | directory | fuse) ;;
    *) echo "unknown mode $mode: expected tail, directory or fuse" >&2; exit 2 ;;
    esac
done
. benches/common.sh

if [ -n "${K2H_TMP:-}" ]; then
    mkdir -p "$K2H_TMP"
    W=$(mktemp -d "$K2H_TMP/nagare-k2h-XXXX")
else
    W=$(mktemp -d /tmp/nagare-k2h-XXXX)
fi
SENDER= RECEIVER=
stop() { # stop PID: TERM, then KILL after 10 s
    local pid=$1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
unmount_all() { # FUSE mounts left under $W (a killed sender cannot unmount)
    local m
    for m in $(awk -v w="$W/" 'index($2, w) == 1 {print $2}' /proc/mounts); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
}
cleanup() {
    stop "$SENDER"
    stop "$RECEIVER"
    unmount_all
    if [ "${K2H_KEEP:-0}" = 1 ]; then echo "kept $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# wait_for WHAT SECONDS CMD...: polls CMD every 50 ms.
wait_for() {
    local what=$1 secs=$2
    shift 2
    local i
    for ((i = 0; i < secs * 20; i++)); do
        "$@" && return 0
        sleep 0.05
    done
    echo "timed out after ${secs}s waiting for $what" >&2
    return 1
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
alive() { kill -0 "$1" 2>/dev/null; }
mounted() { awk -v m="$1" '$2 == m {f=1} END {exit !f}' /proc/mounts; }
# ready_or_dead PID CMD...: CMD holds, or the daemon is gone (no use waiting).
ready_or_dead() {
    local pid=$1
    shift
    "$@" || ! alive "$pid"
}
# Fails with the end of the daemon's log when the daemon is gone.
check_alive() {
    alive "$1" && return 0
    echo "$2 exited; end of its log:" >&2
    tail -20 "$3" >&2
    return 1
}

# The source files, generated once per size.
gen() { # gen SIZE LINES PATH
    if [ "$1" -ge 13 ]; then
        "$FB" genfile --path "$3" --size "$1" --count "$2" >/dev/null
    else
        seq -f "%0$1.0f" 0 $(($2 - 1)) >"$3"
        # seq widens numbers that do not fit; every line must be SIZE bytes.
        [ "$(stat -c %s "$3")" -eq $(($2 * ($1 + 1))) ] ||
            { echo "$2 lines do not fit in $1 digits" >&2; exit 1; }
    fi
}

# Does this nagare have the fuse input? (`nagare check` rejects an unknown type.)
HAVE_FUSE=1
mkdir -p "$W/probe"
cat >"$W/probe/fuse.toml" <<TOML
[[input]]
type = "fuse"
mountpoint = "$W/probe/mnt"
tag = "fuse.*"
[[output]]
type = "null"
match = "**"
TOML
if ! "$NAGARE" check -c "$W/probe/fuse.toml" >"$W/probe/check.log" 2>&1; then
    HAVE_FUSE=0
fi

receiver_toml() { # receiver_toml PORT OUT
    cat <<TOML
[[input]]
type = "forward"
bind = "127.0.0.1:$1"
[[output]]
type = "file"
match = "**"
path = "$2"
format = "single_value"
append = true
[output.buffer]
flush_interval = "100ms"
TOML
}

sender_toml() { # sender_toml MODE RUNDIR PORT
    case $1 in
    tail) cat <<TOML
[[input]]
type = "tail"
path = "$2/in.log"
tag = "k2h.tail"
read_from_head = false
TOML
    ;;
    directory) cat <<TOML
[[input]]
type = "directory"
path = "$2/drop"
tag = "k2h.*"
refresh_interval = "100ms"
TOML
    ;;
    fuse) cat <<TOML
[[input]]
type = "fuse"
mountpoint = "$2/mnt"
tag = "fuse.*"
TOML
    ;;
    esac
    cat <<TOML
[[output]]
type = "forward"
match = "**"
heartbeat_type = "none"
require_ack_response = $ACK
[[output.server]]
address = "127.0.0.1:$3"
[output.buffer]
flush_interval = "100ms"
TOML
}

# One run; sets RUN_OUT to "seconds sender_cpu receiver_cpu first_byte
# sender_rss receiver_rss sender_sys receiver_sys" (CPU-seconds, _sys their
# system part; first_byte: seconds until the unified file first grew; peak
# RSS in MB) or fails. Not run in a subshell, so the EXIT trap knows the
# daemons; errexit is off inside (it is called from `if`), hence the explicit
# `|| return 1`.
run_one() { # run_one MODE SRC SIZE LINES RUNDIR
    local mode=$1 src=$2 size=$3 lines=$4 R=$5
    local bytes=$((lines * (size + 1)))
    rm -rf "$R"
    mkdir -p "$R"
    # Start each run with no dirty pages from the last one (or from genfile):
    # their writeback would otherwise land in this run's time.
    sync
    local rport
    rport=$(free_port)
    receiver_toml "$rport" "$R/unified.log" >"$R/receiver.toml"
    sender_toml "$mode" "$R" "$rport" >"$R/sender.toml"
    "$NAGARE" run -c "$R/receiver.toml" 2>"$R/receiver.log" &
    RECEIVER=$!
    wait_for "the receiver on 127.0.0.1:$rport" 30 port_open "$rport" || return 1
    local target
    case $mode in
    tail)
        : >"$R/in.log"
        target=$R/in.log
        ;;
    directory)
        mkdir -p "$R/drop"
        target=$R/drop/x.log
        ;;
    fuse)
        mkdir -p "$R/mnt"
        target=$R/mnt/x.log
        ;;
    esac
    "$NAGARE" run -c "$R/sender.toml" 2>"$R/sender.log" &
    SENDER=$!
    # Ready: tail follows in.log (from its end, so nothing may be written
    # before); the fuse input has mounted; the directory input reads new files
    # whole, so only its start-up is waited for.
    case $mode in
    tail) wait_for "the sender to follow in.log" 30 \
        ready_or_dead "$SENDER" grep -qs "following file" "$R/sender.log" || return 1 ;;
    fuse) wait_for "the FUSE mount at $R/mnt" 30 ready_or_dead "$SENDER" mounted "$R/mnt" || return 1 ;;
    directory) sleep 0.5 ;;
    esac
    check_alive "$SENDER" sender "$R/sender.log" || return 1
    check_alive "$RECEIVER" receiver "$R/receiver.log" || return 1
    # The writer runs in the background while the size of the unified file is
    # polled every 2 ms; CPU is utime+stime from /proc, from just before the
    # first write to the moment the last byte is there.
    local out
    out=$(python3 - "$SENDER" "$RECEIVER" "$src" "$target" "$mode" "$R/unified.log" "$bytes" "$TIMEOUT" <<'PY'
import os, subprocess, sys, time
sender, receiver, src, target, mode, out, want, timeout = sys.argv[1:]
want, timeout = int(want), float(timeout)
tck = os.sysconf("SC_CLK_TCK")
def cpu(pid):  # (user + system, system) CPU-seconds of the whole process
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tck, int(f[12]) / tck
def hwm(pid):  # peak resident set, MB
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0
def size():
    try:
        return os.stat(out).st_size
    except FileNotFoundError:
        return 0
c0s, c0r = cpu(sender), cpu(receiver)
redirect = ">>" if mode == "tail" else ">"
t0 = time.monotonic()
w = subprocess.Popen(["/bin/sh", "-c", f'exec cat "$1" {redirect} "$2"', "sh", src, target])
first = None
while (got := size()) < want:
    if got and first is None:
        first = time.monotonic() - t0
    if time.monotonic() - t0 > timeout:
        w.kill()
        sys.exit(f"timeout: the unified file holds {size():,} of {want:,} bytes after {timeout:.0f}s")
    if not (os.path.exists(f"/proc/{sender}") and os.path.exists(f"/proc/{receiver}")):
        sys.exit(f"a daemon exited; the unified file holds {size():,} of {want:,} bytes")
    time.sleep(0.002)
t1 = time.monotonic()
c1s, c1r = cpu(sender), cpu(receiver)
if w.wait() != 0:
    sys.exit(f"the writer (cat into {target}) failed: exit {w.returncode}")
if first is None:
    first = t1 - t0
print(f"{t1 - t0:.4f} {c1s[0] - c0s[0]:.2f} {c1r[0] - c0r[0]:.2f} {first:.3f} "
      f"{hwm(sender):.0f} {hwm(receiver):.0f} {c1s[1] - c0s[1]:.2f} {c1r[1] - c0r[1]:.2f}")
PY
    ) || { echo "$mode ${size}B run failed; logs in $R (K2H_KEEP=1 keeps them)" >&2; return 1; }
    # Nothing more may arrive (duplicates would show here), then byte for byte.
    sleep 0.3
    if ! cmp -s "$src" "$R/unified.log"; then
        echo "$mode ${size}B: the unified file differs from the source:" >&2
        cmp "$src" "$R/unified.log" >&2 || true
        ls -l "$src" "$R/unified.log" >&2
        return 1
    fi
    stop "$SENDER"
    SENDER=
    stop "$RECEIVER"
    RECEIVER=
    unmount_all
    RUN_OUT=$out
}

RESULTS=$W/results.tsv
: >"$RESULTS"
FAILED=0
for sl in $SIZES; do
    size=${sl%%:*} lines=${sl##*:}
    src=$W/src-$size.log
    gen "$size" "$lines" "$src"
    for mode in $MODES; do
        if [ "$mode" = fuse ] && [ "$HAVE_FUSE" = 0 ]; then
            echo "SKIPPED: fuse mode: this nagare has no fuse input ('nagare check' said: $(tail -1 "$W/probe/check.log"))" >&2
            continue
        fi
        for run in $(seq "$RUNS"); do
            if run_one "$mode" "$src" "$size" "$lines" "$W/run"; then
                r=$RUN_OUT
                echo "$mode ${size}B run $run: $r (seconds; CPU-s of sender, receiver; first byte after s; peak RSS MB of sender, receiver; system CPU-s of sender, receiver)" >&2
                printf '%s\t%s\t%s\t%s\n' "$mode" "$size" "$lines" "$r" >>"$RESULTS"
            else
                FAILED=1
                printf '%s\t%s\t%s\tFAILED\n' "$mode" "$size" "$lines" >>"$RESULTS"
                stop "$SENDER"; SENDER=
                stop "$RECEIVER"; RECEIVER=
                unmount_all
                [ "${K2H_KEEP:-0}" = 1 ] && mv "$W/run" "$W/failed-$mode-$size-$run"
            fi
            rm -rf "$W/run"
        done
    done
    rm -f "$src"
done

python3 - "$RESULTS" "$RUNS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, size, lines, rest = line.rstrip("\n").split("\t", 3)
    rows.setdefault((int(size), mode, int(lines)), []).append(rest)
order = {"tail": 0, "directory": 1, "fuse": 2}
print(f"Medians of {sys.argv[2]} runs; rates at the receiver, from the first write to the last byte in the unified file.\n")
print("| mode | line size | lines | records/s | MB/s | seconds | first byte after | sender CPU-s "
      "| receiver CPU-s | records per CPU-s | peak RSS sender / receiver | byte-identical |")
print("|" + " --- |" * 12)
for (size, mode, lines), rs in sorted(rows.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 9))):
    ok = [tuple(map(float, r.split())) for r in rs if r != "FAILED"]
    failed = len(rs) - len(ok)
    if not ok:
        print(f"| {mode} | {size} B | {lines:,} | failed |" + " |" * 7 + f" {failed} of {len(rs)} runs failed |")
        continue
    s, cs, cr, fb = (statistics.median(o[i] for o in ok) for i in range(4))
    # Sender and receiver together: steadier than the rates on a busy machine.
    cpus = [o[1] + o[2] for o in ok if o[1] + o[2] > 0]
    per_cpu = statistics.median(lines / c for c in cpus) if cpus else 0
    rss = f"{max(o[4] for o in ok):.0f} / {max(o[5] for o in ok):.0f} MB"
    mb = lines * (size + 1) / s / 1e6
    ident = f"yes ({len(ok)}/{len(rs)})" if not failed else f"{failed} of {len(rs)} runs failed"
    print(f"| {mode} | {size} B | {lines:,} | {lines / s:,.0f} | {mb:,.0f} | {s:.2f} | {fb:.2f} s "
          f"| {cs:.2f} | {cr:.2f} | {per_cpu:,.0f} | {rss} | {ident} |")
PY
exit "$FAILED"
