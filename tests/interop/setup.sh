#!/usr/bin/env bash
# Installs the interop tests' dependencies: a Python venv at tests/interop/.venv
# with PyPI's fluent-logger 0.11 and pytest, and npm's fluent-logger 3.4 from
# node/package-lock.json.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

python3 -m venv "$here/.venv"
"$here/.venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "$here/python/requirements.txt"

(cd "$here/node" && npm ci --no-audit --no-fund --loglevel=error)
