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
. "$(dirname "$0")/objects.sh" "$@"
AZURITE=${NAGARE_AZURITE:-${XDG_CACHE_HOME:-$HOME/.cache}/nagare-test/azurite/node_modules/.bin/azurite-blob}
PY=$ROOT/crates/nagare/tests/objects/.venv/bin/python
READ=$ROOT/crates/nagare/tests/objects/read_azure.py
VPORT=40193 SUT_PORT=40194 MON=40195
ACCOUNT=bench KEY=YmVuY2gtYWNjb3VudC1rZXktMDEyMzQ1Njc4OTAxMjM0NQ==
URL=http://127.0.0.1:$VPORT/$ACCOUNT
AZURITE_ACCOUNTS="$ACCOUNT:$KEY" "$AZURITE" --blobHost 127.0.0.1 --blobPort "$VPORT" \
    --inMemoryPersistence --silent --disableTelemetry --disableProductStyleUrl --skipApiVersionCheck >/dev/null 2>&1 &
azurite=$!
trap 'kill $azurite 2>/dev/null' EXIT
wait_port "$VPORT" 300

STORE_TYPE=azure_blob
FLOOR_TARGET="azure+$URL $ACCOUNT $KEY"
make_container() { "$PY" "$READ" "$URL" "$ACCOUNT" "$KEY" create "$1"; }
stored() {
    "$PY" "$READ" "$URL" "$ACCOUNT" "$KEY" list "$1" |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["objects"], d["bytes"])'
}
output_options() {
    cat <<EOF
container = "$1"
account = "$ACCOUNT"
endpoint = "$URL"
access_key = "$KEY"
EOF
}
# Azurite (in-memory) drops them when it stops.
drop_containers() { :; }
run_pairs
