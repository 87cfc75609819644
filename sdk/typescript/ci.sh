#!/usr/bin/env bash
# Installs the TypeScript SDK's locked dependencies, then builds, lints and tests it
# (needs target/release/nagare, or NAGARE_BIN).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --loglevel=error
npm test
