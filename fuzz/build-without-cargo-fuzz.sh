#!/usr/bin/env bash
# Builds the fuzz targets as `cargo fuzz build -s none` does (libFuzzer,
# sanitizer coverage, no address sanitizer), for a machine without
# cargo-fuzz: nightly rustc (`rustup toolchain install nightly`) is enough.
# The binaries land in $CARGO_TARGET_DIR (default fuzz/target)/
# x86_64-unknown-linux-gnu/release/<target>; run one as
#   <binary> corpus/<target> seeds-receivers/<target> -max_total_time=300
#
#   fuzz/build-without-cargo-fuzz.sh [cargo build options, e.g. --bin es_bulk]
set -euo pipefail
cd "$(dirname "$0")"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
exec cargo +nightly build --release --bins --target x86_64-unknown-linux-gnu "$@"
