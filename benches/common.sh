# Sourced by the benches/*.sh scripts: finds (or builds) flowbench from
# ../shared/bench and builds nagare's release binary.
# Sets ROOT, FB (flowbench) and NAGARE (the nagare binary).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_DIR=${FLOWBENCH_DIR:-$ROOT/../shared/bench}
FB=$BENCH_DIR/bin/flowbench
[ -x "$FB" ] || (cd "$BENCH_DIR/flowbench" && go build -o ../bin/flowbench ./...)
cargo build --release -p nagare --manifest-path "$ROOT/Cargo.toml" >&2
NAGARE=$ROOT/target/release/nagare
