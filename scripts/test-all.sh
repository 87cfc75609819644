#!/usr/bin/env bash
# Runs every test of the project: the Rust workspace (daemon, codec, Rust and C
# SDKs), the other SDKs, and interop tests with third-party fluent-logger clients.
# Installs what it needs first (Debian packages, Python venvs, npm and Maven deps).
# Prints one line per suite and a closing "N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export NAGARE_BIN="$ROOT/target/release/nagare"
export CARGO_TERM_COLOR=never

results=()
passed=0
failed=0
suite() { # suite NAME COMMAND...
  local name=$1; shift
  echo "=== $name: $*"
  local start=$SECONDS
  if "$@"; then
    results+=("ok    $name ($((SECONDS - start))s)"); passed=$((passed + 1))
  else
    results+=("FAIL  $name ($((SECONDS - start))s)"); failed=$((failed + 1))
  fi
}

# --- set-up: tools the suites need -------------------------------------------
need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
command -v socat >/dev/null || need_apt+=(socat)
command -v curl >/dev/null || need_apt+=(curl)
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
if [ ${#need_apt[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# --- Rust --------------------------------------------------------------------
suite "cargo fmt" cargo fmt --all -- --check
suite "cargo build --release" cargo build --release --locked -p nagare
suite "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
suite "cargo test" cargo test --workspace --locked

# --- SDKs and interop (each directory brings its own runner) -----------------
[ -x sdk/python/ci.sh ] || true
for d in sdk/python sdk/go sdk/java sdk/typescript tests/interop; do
  if [ -f "$d/ci.sh" ]; then
    suite "$d" bash "$d/ci.sh"
  fi
done

echo
echo "=== summary"
printf '%s\n' "${results[@]}"
echo "suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
