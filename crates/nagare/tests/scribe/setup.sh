#!/usr/bin/env bash
# Makes the Python venv the scribe tests (crates/nagare/tests/it/scribe.rs) run
# Apache Thrift's Python library from: .venv beside this file.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python3 -m venv "$here/.venv"
"$here/.venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
