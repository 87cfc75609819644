#!/usr/bin/env bash
# azure_blob output throughput: `nagare gen` sends EVENTS events (a
# MESSAGE_BYTES message each) over forward to nagare, whose azure_blob
# output writes them to Azurite (in-memory persistence); nagare's CPU
# seconds (user + system, from /proc) and the wall time until its output
# has delivered every event give events per CPU-second and MB/s (of JSON
# lines, before compression). Then the floor, examples/s3_put_floor.rs with
# an `azure+` endpoint, puts the same number of blobs of the same size and
# shape with the same client library (object_store's Azure client over
# net/object_http.rs) and nothing else. RUNS pairs per compression (none,
# gzip), alternating; prints the medians and the ratios to the floor.
#
#   benches/azure_blob.sh [EVENTS] [RUNS]   (defaults 500000, 3; MESSAGE_BYTES=200)
#
# Needs Azurite and the tests' venv with azure-storage-blob (both made by
# scripts/test-all.sh's set-up) and curl. Ports 40193-40195.
# NAGARE_BIN / FLOOR_BIN: measure prebuilt binaries instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
EVENTS=${1:-500000}
RUNS=${2:-3}
MSG=${MESSAGE_BYTES:-200}
TGT=${CARGO_TARGET_DIR:-$ROOT/target}
# NAGARE_BIN and FLOOR_BIN name prebuilt binaries (no build).
NAGARE=${NAGARE_BIN:-$TGT/release/nagare}
[ -n "${NAGARE_BIN:-}" ] || cargo build --release -p nagare >&2
FLOOR=${FLOOR_BIN:-$TGT/release/examples/s3_put_floor}
[ -n "${FLOOR_BIN:-}" ] || cargo build --release -p nagare --example s3_put_floor >&2
AZURITE=${NAGARE_AZURITE:-${XDG_CACHE_HOME:-$HOME/.cache}/nagare-test/azurite/node_modules/.bin/azurite-blob}
PY=$ROOT/crates/nagare/tests/objects/.venv/bin/python
READ=$ROOT/crates/nagare/tests/objects/read_azure.py
OUT=${OUT:-$(mktemp -d /tmp/nagare-azure-XXXX)}
mkdir -p "$OUT"
echo "raw results in $OUT" >&2
VPORT=40193 SUT_PORT=40194 MON=40195
ACCOUNT=bench KEY=YmVuY2gtYWNjb3VudC1rZXktMDEyMzQ1Njc4OTAxMjM0NQ==
URL=http://127.0.0.1:$VPORT/$ACCOUNT
AZURITE_ACCOUNTS="$ACCOUNT:$KEY" "$AZURITE" --blobHost 127.0.0.1 --blobPort "$VPORT" \
    --inMemoryPersistence --silent --disableTelemetry --disableProductStyleUrl --skipApiVersionCheck >/dev/null 2>&1 &
azurite=$!
trap 'kill $azurite 2>/dev/null' EXIT
wait_port() {
    for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
    return 1
}
wait_port "$VPORT"
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
delivered() {
    curl -s "http://127.0.0.1:$MON/metrics" |
        awk -F' ' '/^nagare_events_out_total\{plugin="azure_blob#0",/ { print $NF }'
}
msg=$(head -c "$MSG" /dev/zero | tr '\0' x)

for i in $(seq "$RUNS"); do
  for comp in none gzip; do
    b=nagare-$comp-$i
    "$PY" "$READ" "$URL" "$ACCOUNT" "$KEY" create "$b"
    cat > "$OUT/$b.toml" <<EOF
[monitor]
bind = "127.0.0.1:$MON"

[[input]]
type = "forward"
bind = "127.0.0.1:$SUT_PORT"

[[output]]
type = "azure_blob"
match = "**"
container = "$b"
account = "$ACCOUNT"
endpoint = "$URL"
access_key = "$KEY"
compression = "$comp"
[output.buffer]
chunk_limit_size = "8MiB"
flush_interval = "1s"
flush_thread_count = 2
total_limit_size = "1GiB"
EOF
    echo "run $i $comp: nagare" >&2
    "$NAGARE" run -c "$OUT/$b.toml" 2>"$OUT/$b.log" &
    n=$!
    wait_port "$SUT_PORT"
    wait_port "$MON"
    c0=$(cpu "$n")
    t0=$(date +%s.%N)
    "$NAGARE" gen --forward "127.0.0.1:$SUT_PORT" --count "$EVENTS" --rate 0 --message "$msg" >/dev/null 2>&1
    until [ "$(delivered)" = "$EVENTS" ]; do sleep 0.05; done
    t1=$(date +%s.%N)
    c1=$(cpu "$n")
    kill -TERM "$n"; wait "$n" || true
    listed=$("$PY" "$READ" "$URL" "$ACCOUNT" "$KEY" list "$b")
    objects=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["objects"])' "$listed")
    bytes=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["bytes"])' "$listed")
    # The uncompressed JSON lines: the run without compression stored them.
    if [ "$comp" = none ]; then raw=$bytes; rawobjects=$objects; fi
    echo "{\"objects\":$objects,\"events\":$EVENTS,\"bytes\":$bytes,\"raw\":$raw,\"wall_s\":$(awk "BEGIN { print $t1 - $t0 }"),\"cpu_s\":$(awk "BEGIN { print $c1 - $c0 }")}" > "$OUT/$b.json"
    # The floor: as many objects as nagare's uncompressed run stored, each
    # of their mean size (JSON lines of the same length).
    line=$(( raw / EVENTS ))
    f=floor-$comp-$i
    "$PY" "$READ" "$URL" "$ACCOUNT" "$KEY" create "$f"
    echo "run $i $comp: floor" >&2
    gz=""; [ "$comp" = gzip ] && gz=gzip
    "$FLOOR" "azure+$URL" "$ACCOUNT" "$KEY" "$f" "$rawobjects" $(( raw / rawobjects )) "$line" 2 $gz > "$OUT/$f.json"
  done
done

python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
med = statistics.median
print("| compression | who | objects | events/CPU-s | MB/s (JSON, before compression) | CPU s | wall s |")
print("| --- | --- | --- | --- | --- | --- | --- |")
ratios = {}
for comp in ("none", "gzip"):
    rows = {}
    for who in ("nagare", "floor"):
        r = [json.load(open(f"{out}/{who}-{comp}-{i}.json")) for i in range(1, runs + 1)]
        eps = med(x["events"] / x["cpu_s"] for x in r)
        mbs = med(x["raw"] / x["wall_s"] / 1e6 for x in r)
        rows[who] = (eps, mbs)
        print(f"| {comp} | {who} | {r[0]['objects']} | {eps:,.0f} | {mbs:.1f} | {med(x['cpu_s'] for x in r):.2f} | {med(x['wall_s'] for x in r):.2f} |")
    ratios[comp] = (rows["nagare"][0] / rows["floor"][0], rows["nagare"][1] / rows["floor"][1])
for comp, (e, m) in ratios.items():
    print(f"{comp}: nagare/floor events per CPU-second {e:.2f}x, MB/s {m:.2f}x")
PY
