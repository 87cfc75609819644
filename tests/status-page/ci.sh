#!/usr/bin/env bash
# The monitor's status page in headless Chromium (Debian's package): installs
# the locked playwright-core (no browser download), then runs test.mjs against
# target/release/nagare (or NAGARE_BIN). About 15 s.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --loglevel=error
npm test
