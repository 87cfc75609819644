#!/usr/bin/env bash
# CI entry: installs the interop deps and runs the interop tests.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
./run.sh
