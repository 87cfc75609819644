#!/usr/bin/env bash
# Installs the Python SDK's test deps into sdk/python/.venv, then lints and tests it.
set -euo pipefail
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -e '.[test]'
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/pytest -q
