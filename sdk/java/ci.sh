#!/usr/bin/env bash
# Tests the Java SDK with Maven (needs target/release/nagare, or NAGARE_BIN).
# `verify` runs the tests and the spotless format check.
set -euo pipefail
cd "$(dirname "$0")"
mvn -B -q verify
