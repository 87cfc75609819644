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
# sink_output PORT: the [[output]] table that forwards everything to
# `flowbench sink` on 127.0.0.1:PORT.
sink_output() {
    cat <<TOML
[[output]]
type = "forward"
match = "**"
heartbeat_type = "none"
[[output.server]]
address = "127.0.0.1:$1"
[output.buffer]
flush_interval = "100ms"
TOML
}
# sink_run CONFIG PORT EXPECT UNITS [FEED_PORT FEED_FILE]: one measurement.
# Runs nagare on CONFIG (its output: `sink_output PORT`) until `flowbench
# sink` on PORT has counted EXPECT events; with FEED_PORT and FEED_FILE,
# sends the file over one TCP connection to that port once nagare listens
# there. Prints "UNITS/s UNITS-per-nagare-CPU-s" (UNITS, e.g. file lines
# or messages, over the sink's active window and over nagare's user +
# system CPU); fails if the sink counted other than EXPECT events. nagare's
# log and the sink's result are kept beside CONFIG.
sink_run() {
    local config=$1 port=$2 expect=$3 units=$4 feed_port=${5:-} feed_file=${6:-}
    local base=${config%.toml}
    "$FB" sink --listen "127.0.0.1:$port" --expect "$expect" --idle-exit 5s --quiet > "$base.sink.json" 2>/dev/null &
    local sink=$!
    wait_port "$port"
    "$NAGARE" run -c "$config" 2>"$base.nagare.log" &
    local pid=$!
    if [ -n "$feed_port" ]; then
        wait_port "$feed_port"
        python3 -c 'import socket,sys; s=socket.create_connection(("127.0.0.1",int(sys.argv[1]))); s.sendfile(open(sys.argv[2],"rb")); s.close()' "$feed_port" "$feed_file"
    fi
    wait "$sink" || true
    local cpu
    cpu=$(awk '{print ($14+$15)/100}' "/proc/$pid/stat")
    kill -TERM "$pid"; wait "$pid" || true
    python3 - "$base.sink.json" "$cpu" "$units" "$expect" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); cpu = float(sys.argv[2]); units = int(sys.argv[3]); want = int(sys.argv[4])
assert d["events"] == want, f"sink counted {d['events']} events, expected {want}"
print(f"{units / d['active_s']:.0f} {units / max(cpu, 0.01):.0f}")
PY
}
