#!/usr/bin/env bash
# The journald input against its floor, `journalctl -o export > /dev/null`
# reading the same journal: entries/s and CPU per entry (docs/benchmarks/journald.md).
#
#   sudo benches/journald.sh [ENTRIES] [RUNS] [MESSAGE_BYTES]   defaults 300000 5 100
#
# 1. A real systemd-journald, in a mount namespace of its own (as
#    tests/it/journald.rs starts it), writes ENTRIES lines of `systemd-cat`
#    into a temp folder, and stops.
# 2. RUNS times each, alternating: journalctl alone to /dev/null, and nagare
#    (journald input, read_from_head, `directory`, null output) until its
#    /metrics count every entry. Wall time and CPU (user+system; for nagare,
#    nagare's and its journalctl's together).
# Prints the medians and the ratios. Needs root, systemd, util-linux, curl.
# NAGARE_BIN=path measures that binary (default: a release build here).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-300000}
RUNS=${2:-5}
MSG=${3:-100}
if [ -n "${NAGARE_BIN:-}" ]; then
    NAGARE=$NAGARE_BIN
else
    cargo build --release -p nagare >&2
    NAGARE=${CARGO_TARGET_DIR:-target}/release/nagare
fi
W=$(mktemp -d /tmp/nagare-journald-bench-XXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/journal"
printf '[Journal]\nStorage=persistent\nRateLimitBurst=0\nForwardToSyslog=no\nReadKMsg=no\nAudit=no\n' >"$W/journald.conf"

# 1. The journal.
unshare -m --propagation private sh -s "$W" "$N" "$MSG" <<'SH'
set -e
W=$1 N=$2 MSG=$3
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/journal
mount -t tmpfs tmpfs /var/log
mkdir -p /var/log/journal
mount --bind "$W/journal" /var/log/journal
mount --bind "$W/journald.conf" /etc/systemd/journald.conf
touch /run/systemd/journal/flushed
/lib/systemd/systemd-journald &
JD=$!
while [ ! -S /run/systemd/journal/stdout ]; do sleep 0.05; done
PAD=$(head -c "$MSG" /dev/zero | tr '\0' x)
seq -f "bench line %07g $PAD" 1 "$N" | systemd-cat -t bench
# journald may still be taking the stream's last lines.
LAST=$(printf 'bench line %07d %s' "$N" "$PAD")
until [ "$(journalctl -D /var/log/journal -n 1 -o cat SYSLOG_IDENTIFIER=bench)" = "$LAST" ]; do sleep 0.1; done
kill -TERM $JD; wait $JD || true
SH
M=$(journalctl -D "$W/journal" -o export --no-pager | grep -c '^__CURSOR=')
BYTES=$(journalctl -D "$W/journal" -o export --no-pager | wc -c)
echo "journal: $M entries ($N of $MSG-byte messages), $BYTES bytes of export, $(du -sh "$W/journal" | cut -f1) on disk" >&2

PORT=${MONITOR_PORT:-36421}
cat >"$W/nagare.toml" <<TOML
[[input]]
type = "journald"
directory = "$W/journal"
read_from_head = true
tag = "journal"
[[output]]
type = "null"
match = "**"
[monitor]
bind = "127.0.0.1:$PORT"
TOML

cpu_of() { awk '{print ($14+$15)/100}' "/proc/$1/stat"; }
now() { date +%s.%N; }

for r in $(seq "$RUNS"); do
    # The floor: journalctl alone, the same arguments nagare gives it.
    /usr/bin/time -f "%e %U %S" -o "$W/t" journalctl -D "$W/journal" --output=export --no-pager --no-tail >/dev/null
    read -r wall user sys <"$W/t"
    echo "floor $wall $(echo "$user + $sys" | bc)" >>"$W/results"

    T0=$(now)
    "$NAGARE" run -c "$W/nagare.toml" 2>"$W/nagare.log" &
    PID=$!
    until curl -sf "127.0.0.1:$PORT/metrics" 2>/dev/null | grep -q "^nagare_events_in_total{plugin=\"journald#0\".* $M\$"; do
        sleep 0.02
    done
    T1=$(now)
    JC=$(pgrep -P "$PID" journalctl)
    OWN=$(cpu_of "$PID")
    CHILD=$(cpu_of "$JC")
    kill -TERM "$PID"; wait "$PID" || true
    echo "nagare $(echo "$T1 - $T0" | bc) $(echo "$OWN + $CHILD" | bc) $OWN $CHILD" >>"$W/results"
done

python3 - "$W/results" "$M" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
m = int(sys.argv[2])
def med(kind, i):
    return statistics.median(float(r[i]) for r in rows if r[0] == kind)
fw, fc = med("floor", 1), med("floor", 2)
nw, nc = med("nagare", 1), med("nagare", 2)
own, child = med("nagare", 3), med("nagare", 4)
print(f"runs: {sum(r[0] == 'floor' for r in rows)} each, medians")
print(f"journalctl -o export > /dev/null: {fw:.2f} s = {m/fw:,.0f} entries/s, CPU {fc:.2f} s = {fc/m*1e6:.2f} us/entry")
print(f"nagare journald -> null:          {nw:.2f} s = {m/nw:,.0f} entries/s, CPU {nc:.2f} s = {nc/m*1e6:.2f} us/entry (nagare + its journalctl)")
print(f"  of which nagare {own/m*1e6:.2f} us/entry, its journalctl {child/m*1e6:.2f} us/entry")
print(f"ratio: {fw/nw:.2f}x the floor's entries/s; CPU per entry {nc/fc:.2f}x the floor's; "
      f"entries per CPU-second {fc/nc:.2f}x")
print("per run (kind wall cpu [nagare journalctl]):")
for r in rows:
    print("  " + " ".join(r))
PY
