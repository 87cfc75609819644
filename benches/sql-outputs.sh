#!/usr/bin/env bash
# The postgresql and clickhouse outputs (issue 31): rows/s into a local
# PostgreSQL 15 and ClickHouse, against each server's own client inserting
# the same rows from a file (the floor; the bar: nagare >= 0.7x of each).
#
#   nagare:  a tail input reads ROWS NDJSON lines {"seq":i,"message":"…"}
#            (read_from_head, json parser) and the output writes them;
#            timed from nagare's start until the output has written every
#            row (its events_out_total on the monitor; the table counted
#            once after).
#   floors:  psql '\copy t (seq, message, time) FROM rows_time.tsv' (the
#            rows nagare writes: its time_column is on by default),
#            psql '\copy t (seq, message) FROM rows.tsv' (without the
#            time, the floor of earlier sittings), and
#            clickhouse-client --query 'INSERT INTO t FORMAT JSONEachRow'
#            < rows_ch.ndjson (the rows nagare writes: chunk_id, position
#            and time beside seq and message; 75,000 rows a chunk id, as
#            nagare's 8 MiB chunks hold) and, for reference, the same of
#            rows.ndjson into (seq, message) only (the floor before
#            session 19, which left three of the five columns empty).
#
#   benches/sql-outputs.sh [ROWS] [RUNS]   (defaults 1000000, 3)
#
# Environment: FLUSH_THREADS (4), CHUNK (8MiB), FLUSH_INTERVAL (200ms);
# ONLY=pg or ONLY=ch runs one server's cases.
#
# Each server runs from a temporary folder on free ports (PostgreSQL as
# user postgres when run as root, fsync off for both sides alike). RUNS
# runs of each, alternating; prints the medians and ratios. The folders are
# removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-1000000}
RUNS=${2:-3}
ROOT=$(pwd)
if [ -n "${NAGARE_BIN:-}" ]; then NAGARE=$NAGARE_BIN; else
    cargo build --release -p nagare >&2; NAGARE=${CARGO_TARGET_DIR:-$ROOT/target}/release/nagare; fi
PGBIN=/usr/lib/postgresql/15/bin
OUT=$(mktemp -d /tmp/nagare-sql-bench-XXXX)
chmod 755 "$OUT"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
asp() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
now() { date +%s.%N; }
PGPORT=$(free_port); CHHTTP=$(free_port); CHTCP=$(free_port); MON=$(free_port)
cleanup() {
    asp "$PGBIN/pg_ctl" -D "$OUT/pg" -m immediate stop >/dev/null 2>&1 || true
    [ -n "${CHPID:-}" ] && kill "$CHPID" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$OUT"
}
trap cleanup EXIT

echo "rows: $ROWS in $OUT" >&2
python3 - "$ROWS" "$OUT" <<'PY'
import sys
n, out = int(sys.argv[1]), sys.argv[2]
with open(out + "/rows.ndjson", "w") as j, open(out + "/rows.tsv", "w") as t, \
        open(out + "/rows_time.tsv", "w") as tt, open(out + "/rows_ch.ndjson", "w") as c:
    for i in range(n):
        m = "event number %d from the benchmark, some text to make a typical line" % i
        j.write('{"seq":%d,"message":"%s"}\n' % (i, m))
        t.write("%d\t%s\n" % (i, m))
        # The time as nagare writes it (RFC 3339, nanoseconds, Z).
        tt.write("%d\t%s\t2026-11-28T17:%02d:%02d.%09dZ\n" % (i, m, i // 60 % 60, i % 60, i))
        # The row as the clickhouse output writes it: the chunk's id (32
        # hex digits), the position in it, the time in seconds.
        c.write('{"chunk_id":"%032x","position":%d,"time":%d,"seq":%d,"message":"%s"}\n'
                % (0x5eed0000 + i // 75000, i % 75000, 1795000000 + i // 1000, i, m))
PY
chmod 644 "$OUT"/rows*

# --- servers
[ "$(id -u)" = 0 ] && chown postgres "$OUT"
asp "$PGBIN/initdb" -D "$OUT/pg" -U postgres -A trust --no-sync >/dev/null
asp "$PGBIN/pg_ctl" -D "$OUT/pg" -l "$OUT/pg.log" -w start \
    -o "-p $PGPORT -k $OUT -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off" >/dev/null
PSQL=("$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres -X -q -At)
mkdir -p "$OUT/ch"
cat > "$OUT/ch/config.xml" <<EOF
<yandex>
  <logger><level>warning</level><log>$OUT/ch/server.log</log><errorlog>$OUT/ch/error.log</errorlog></logger>
  <http_port>$CHHTTP</http_port><tcp_port>$CHTCP</tcp_port><listen_host>127.0.0.1</listen_host>
  <path>$OUT/ch/data/</path><tmp_path>$OUT/ch/tmp/</tmp_path>
  <users_config>$OUT/ch/users.xml</users_config>
  <default_profile>default</default_profile><default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
</yandex>
EOF
echo '<yandex><profiles><default></default></profiles><users><default><password></password><networks><ip>::/0</ip></networks><profile>default</profile><quota>default</quota></default></users><quotas><default></default></quotas></yandex>' > "$OUT/ch/users.xml"
clickhouse-server --config-file="$OUT/ch/config.xml" >/dev/null 2>&1 &
CHPID=$!
wait_port "$CHHTTP"; wait_port "$CHTCP"
CH=(clickhouse-client --host 127.0.0.1 --port "$CHTCP")

pg_table() { "${PSQL[@]}" -c "DROP TABLE IF EXISTS t; DROP TABLE IF EXISTS nagare_chunks; CREATE TABLE t (time timestamptz, seq bigint, message text)"; }
ch_table() { "${CH[@]}" --query "DROP TABLE IF EXISTS t"; "${CH[@]}" --query "CREATE TABLE t (chunk_id String, position UInt32, time DateTime, seq UInt64, message String) ENGINE = MergeTree ORDER BY (chunk_id, position)"; }
pg_count() { "${PSQL[@]}" -c "SELECT count(*) FROM t"; }
ch_count() { "${CH[@]}" --query "SELECT count() FROM t"; }

# The rows an output has written: its events_out_total, counted once the
# server has committed them (after the COPY's transaction, after the
# INSERT's 200). Read with curl from nagare's monitor: polling the table
# with psql or clickhouse-client instead would start a client (and, for
# PostgreSQL, scan the table) every 50 ms on the machine the run is timed
# on; the table is counted once at the end.
delivered() {
    curl -s "http://127.0.0.1:$MON/metrics" |
        awk -v p="$1" '$0 ~ "^nagare_events_out_total\\{plugin=\"" p "\"," { print $NF }'
}

# run_nagare OUTPUT_TOML COUNT_FN PLUGIN: seconds from start until PLUGIN
# has written ROWS rows; then COUNT_FN must say ROWS.
run_nagare() {
    rm -f "$OUT/pos.db"
    cat > "$OUT/nagare.toml" <<EOF
[monitor]
bind = "127.0.0.1:$MON"

[[input]]
type = "tail"
path = "$OUT/rows.ndjson"
tag = "bench"
read_from_head = true
position_db = "$OUT/pos.db"
[input.parser]
type = "json"

$1
[output.buffer]
flush_interval = "${FLUSH_INTERVAL:-200ms}"
chunk_limit_size = "${CHUNK:-8MiB}"
flush_thread_count = ${FLUSH_THREADS:-4}
EOF
    local t0; t0=$(now)
    "$NAGARE" run -c "$OUT/nagare.toml" 2>"$OUT/nagare.log" &
    local pid=$!
    until [ "$(delivered "$3")" = "$ROWS" ]; do
        kill -0 "$pid" 2>/dev/null || { cat "$OUT/nagare.log" >&2; exit 1; }
        sleep 0.01
    done
    local t1; t1=$(now)
    # nagare's CPU seconds (user + system, every thread) up to that point.
    local cpu; cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$pid/stat")
    kill -TERM "$pid"; wait "$pid" || true
    local n; n=$($2)
    [ "$n" = "$ROWS" ] || { echo "the table holds $n rows, not $ROWS" >&2; cat "$OUT/nagare.log" >&2; exit 1; }
    echo "$(echo "$t1 - $t0" | bc -l) $cpu"
}
# The wall seconds of a client's run, and its CPU seconds (user + system).
timed() {
    local t0; t0=$(now)
    /usr/bin/time -o "$OUT/time" -f "%U %S" "$@" >/dev/null
    echo "$(echo "$(now) - $t0" | bc -l) $(awk '{ print $1 + $2 }' "$OUT/time")"
}

PG_OUT="[[output]]
type = \"postgresql\"
match = \"**\"
connection = \"host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres\"
table = \"t\"
columns = { seq = \"seq\", message = \"message\" }"
CH_OUT="[[output]]
type = \"clickhouse\"
match = \"**\"
endpoint = \"http://127.0.0.1:$CHHTTP\"
table = \"t\""

: > "$OUT/results"
ONLY=${ONLY:-}
echo "load average at the start: $(cat /proc/loadavg)" >&2
for i in $(seq "$RUNS"); do
    echo "run $i" >&2
    if [ "$ONLY" != ch ]; then
    pg_table; echo "pg_floor $(timed "${PSQL[@]}" -c "\\copy t (seq, message, time) FROM '$OUT/rows_time.tsv'")" >> "$OUT/results"
    pg_table; echo "pg_floor_no_time $(timed "${PSQL[@]}" -c "\\copy t (seq, message) FROM '$OUT/rows.tsv'")" >> "$OUT/results"
    pg_table; echo "pg_nagare_plain $(run_nagare "$PG_OUT
ledger_table = \"\"" pg_count postgresql#0)" >> "$OUT/results"
    pg_table; echo "pg_nagare_once $(run_nagare "$PG_OUT" pg_count postgresql#0)" >> "$OUT/results"
    pg_table; echo "pg_nagare_no_time $(run_nagare "$PG_OUT
time_column = \"\"" pg_count postgresql#0)" >> "$OUT/results"
    fi
    if [ "$ONLY" != pg ]; then
    ch_table; echo "ch_floor $(timed "${CH[@]}" --query 'INSERT INTO t FORMAT JSONEachRow' < "$OUT/rows_ch.ndjson")" >> "$OUT/results"
    ch_table; echo "ch_floor_two_columns $(timed "${CH[@]}" --query 'INSERT INTO t (seq, message) FORMAT JSONEachRow' < "$OUT/rows.ndjson")" >> "$OUT/results"
    ch_table; echo "ch_nagare $(run_nagare "$CH_OUT" ch_count clickhouse#0)" >> "$OUT/results"
    fi
done
echo "load average at the end: $(cat /proc/loadavg)" >&2
cat "$OUT/results" >&2
python3 - "$OUT/results" "$ROWS" <<'PY'
import statistics, sys
rows = int(sys.argv[2])
runs, cpus = {}, {}
for line in open(sys.argv[1]):
    k, v, cpu = line.split()
    runs.setdefault(k, []).append(rows / float(v))
    cpus.setdefault(k, []).append(float(cpu))
med = {k: statistics.median(v) for k, v in runs.items()}
for k in ["pg_floor", "pg_floor_no_time", "pg_nagare_plain", "pg_nagare_once", "pg_nagare_no_time", "ch_floor", "ch_floor_two_columns", "ch_nagare"]:
    if k not in med:
        continue
    who = "client" if "floor" in k else "nagare"
    print("%-20s median %9.0f rows/s  (runs: %s)  %s CPU s median %.2f" % (
        k, med[k], ", ".join("%.0f" % x for x in runs[k]), who, statistics.median(cpus[k])))
if "pg_floor" in med:
    print("postgresql plain COPY: %.2fx of psql \\copy of the same rows (with the time)" % (med["pg_nagare_plain"] / med["pg_floor"]))
    print("postgresql stored once (ledger): %.2fx of psql \\copy of the same rows" % (med["pg_nagare_once"] / med["pg_floor"]))
    print("postgresql without the time column: %.2fx of psql \\copy without it" % (med["pg_nagare_no_time"] / med["pg_floor_no_time"]))
if "ch_floor" in med:
    print("clickhouse: %.2fx of clickhouse-client writing the same rows" % (med["ch_nagare"] / med["ch_floor"]))
    print("clickhouse: %.2fx of clickhouse-client writing two of the five columns" % (med["ch_nagare"] / med["ch_floor_two_columns"]))
PY
