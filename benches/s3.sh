#!/usr/bin/env bash
# s3 output throughput (issue 31): `nagare gen` sends EVENTS events (a
# MESSAGE_BYTES message each) over forward to nagare, whose s3 output writes
# them to versitygw serving a tmpfs (/dev/shm); nagare's CPU seconds (user +
# system, from /proc) and the wall time until its s3 output has delivered
# every event give events per CPU-second and MB/s (of JSON lines, before
# compression). Then the floor,
# examples/s3_put_floor.rs, PUTs the same number of objects of the same size
# and shape with the same client library (object_store over
# net/object_http.rs) and nothing else. RUNS pairs per compression (none,
# gzip), alternating; prints the medians and the ratios to the floor.
#
#   benches/s3.sh [EVENTS] [RUNS]   (defaults 500000, 3; MESSAGE_BYTES=200)
#
# Needs versitygw (scripts/test-all.sh installs it) and curl. Ports 40190-40192.
# NAGARE_BIN / FLOOR_BIN: measure prebuilt binaries instead of building.
. "$(dirname "$0")/objects.sh" "$@"
VGW=${NAGARE_VERSITYGW:-${XDG_CACHE_HOME:-$HOME/.cache}/nagare-go/bin/versitygw}
DATA=$(mktemp -d /dev/shm/nagare-s3-XXXX)
VPORT=40190 SUT_PORT=40191 MON=40192
"$VGW" --access bench --secret benchsecret --port "127.0.0.1:$VPORT" posix "$DATA" >/dev/null 2>&1 &
vgw=$!
trap 'kill $vgw 2>/dev/null; rm -rf "$DATA"' EXIT
wait_port "$VPORT"

STORE_TYPE=s3
FLOOR_TARGET="http://127.0.0.1:$VPORT bench benchsecret"
make_container() { mkdir "$DATA/$1"; }
stored() {
    echo "$(find "$DATA/$1" -type f | wc -l)" \
        "$(find "$DATA/$1" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')"
}
output_options() {
    cat <<EOF
bucket = "$1"
endpoint = "http://127.0.0.1:$VPORT"
access_key_id = "bench"
secret_access_key = "benchsecret"
EOF
}
drop_containers() { for c in "$@"; do rm -rf "${DATA:?}/$c"; done; }
run_pairs
