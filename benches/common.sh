# Sourced by the benches/*.sh scripts: finds (or builds) flowbench from
# ../shared/bench and builds nagare's release binary.
# Sets ROOT, FB (flowbench) and NAGARE (the nagare binary; NAGARE_BIN overrides);
# defines results_dir.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_DIR=${FLOWBENCH_DIR:-$ROOT/../shared/bench}
FB=$BENCH_DIR/bin/flowbench
[ -x "$FB" ] || (cd "$BENCH_DIR/flowbench" && go build -o ../bin/flowbench ./...)
# NAGARE_BIN=path measures that binary instead (no build): a fixed build
# while the tree changes, or another version for comparison.
if [ -n "${NAGARE_BIN:-}" ]; then
    NAGARE=$NAGARE_BIN
else
    cargo build --release -p nagare --manifest-path "$ROOT/Cargo.toml" >&2
    NAGARE=$ROOT/target/release/nagare
fi
# results_dir NAME: sets OUT (an OUT from the environment wins) to the
# directory for raw results, /tmp/nagare-NAME-XXXX by default.
results_dir() {
    OUT=${OUT:-$(mktemp -d "/tmp/nagare-$1-XXXX")}
    mkdir -p "$OUT"
    echo "raw results in $OUT" >&2
}
# wait_port PORT: waits up to 10 s for 127.0.0.1:PORT to accept connections.
wait_port() {
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
    return 1
}
