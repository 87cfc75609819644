#!/usr/bin/env bash
# Tests the Go SDK (needs target/release/nagare, or NAGARE_BIN).
set -euo pipefail
cd "$(dirname "$0")"
test -z "$(gofmt -l .)" || { echo "gofmt: files need formatting:"; gofmt -l .; exit 1; }
go vet ./...
go test -count=1 ./...   # -count=1: always run against the current nagare binary
