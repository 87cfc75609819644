#!/usr/bin/env bash
# Runs the interop tests: clients nobody here wrote send into nagare.
# Uses target/release/nagare (built here when NAGARE_BIN is not set);
# NAGARE_BIN=/path/to/nagare overrides. Run setup.sh first (or this does,
# when the dependencies are missing).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

if [[ -z "${NAGARE_BIN:-}" ]]; then
    (cd "$root" && cargo build --release -p nagare --bin nagare)
    export NAGARE_BIN="$root/target/release/nagare"
fi
if [[ ! -x "$here/.venv/bin/python" || ! -d "$here/node/node_modules/fluent-logger" ]]; then
    "$here/setup.sh"
fi

echo "== Python fluent-logger ($NAGARE_BIN)"
"$here/.venv/bin/python" -m pytest -q "$here/python"
echo "== Node fluent-logger ($NAGARE_BIN)"
(cd "$here/node" && node --test)
echo "interop: all passed"
