#!/usr/bin/env bash
# Packs the scaling benchmark (benches/scale.sh) to carry to a bigger
# machine: nagare's release binary, flowbench, the byte pipe and the relay
# floor, stripped (`objcopy --strip-all`; nagare with its debug info is about
# 160 MB), with scale.sh, into one folder and one .tgz.
#
#   benches/scale-pack.sh [DEST]        (default /tmp/nagare-scale)
#
# On the other machine (x86-64 Linux; nothing to install):
#   tar xzf nagare-scale.tgz && nagare-scale/scale.sh "1 2 4 8 16" "8 16"
# which writes nagare-scale/results-*/scale.{jsonl,md}.
#
# NAGARE_BIN=path packs that binary instead of building one; flowbench comes
# from FLOWBENCH_DIR (default ../shared/bench), built if it is not there.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DEST=${1:-/tmp/nagare-scale}
. "$HERE/common.sh"
mkdir -p "$DEST"
objcopy --strip-all "$NAGARE" "$DEST/nagare"
# Static Go binaries: they run whatever libc the other machine has.
if [ -d "$BENCH_DIR/flowbench" ]; then
    (cd "$BENCH_DIR/flowbench" && CGO_ENABLED=0 go build -ldflags="-s -w" -o "$DEST/flowbench" .)
else
    objcopy --strip-all "$FB" "$DEST/flowbench"
fi
(cd "$HERE/scale" && CGO_ENABLED=0 go build -ldflags="-s -w" -o "$DEST/" ./...)
cp "$HERE/scale.sh" "$DEST/scale.sh"
chmod +x "$DEST"/*
"$DEST/nagare" --version >&2
tar czf "$DEST.tgz" -C "$(dirname "$DEST")" "$(basename "$DEST")"
ls -la "$DEST" "$DEST.tgz" >&2
echo "carry $DEST.tgz; run: tar xzf $(basename "$DEST").tgz && $(basename "$DEST")/scale.sh \"1 2 4 8 16\" \"8 16\"" >&2
