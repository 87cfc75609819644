#!/usr/bin/env bash
# The TLS forward relay of issue 13: flowbench -> nagare A (forward in ->
# forward out over TLS 1.3, AES-GCM) -> nagare B (TLS forward in -> forward
# out) -> flowbench's sink, against the same two-nagare chain without TLS.
# Both nagares run as flowbench's SUT (one process group, so sut_cores counts
# both). RUNS pairs per size, interleaved; prints a Markdown table of medians.
# Bar: TLS events/s at least 0.6x plain at 100 B and 0.8x at 1 KiB.
#
#   benches/tls-relay.sh [RUNS] [DURATION]      (defaults: 3 runs of 10s)
#
# Ports: SUT_PORT (A's input), SINK_PORT (the sink), MID_PORT (B's input).
# Needs Go (flowbench, from ../shared/bench) and openssl (the certificates).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
DURATION=${2:-10s}
SIZES=${SIZES:-"100 1024"}
SUT_PORT=${SUT_PORT:-40424}
SINK_PORT=${SINK_PORT:-40425}
MID_PORT=${MID_PORT:-40426}
command -v openssl >/dev/null || { echo "openssl is needed (apt-get install openssl)" >&2; exit 1; }
. benches/common.sh
results_dir tls-relay

# A CA and a server certificate for 127.0.0.1 (ECDSA P-256).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=bench CA" -keyout "$OUT/ca-key.pem" -out "$OUT/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$OUT/server-key.pem" -out "$OUT/server.csr" 2>/dev/null
openssl x509 -req -in "$OUT/server.csr" -CA "$OUT/ca.pem" -CAkey "$OUT/ca-key.pem" -CAcreateserial \
    -days 2 -extfile <(printf "subjectAltName=IP:127.0.0.1") -out "$OUT/server.pem" 2>/dev/null

# config KIND NAME LISTEN SEND: a forward relay from port LISTEN to SEND;
# with KIND=tls, A sends over TLS and B listens with TLS.
config() {
    local tls_in="" tls_out=""
    if [ "$1" = tls ] && [ "$2" = b ]; then
        tls_in=$(printf '[input.tls]\ncert = "%s"\nkey = "%s"\nmin_version = "1.3"\n' "$OUT/server.pem" "$OUT/server-key.pem")
    fi
    if [ "$1" = tls ] && [ "$2" = a ]; then
        tls_out=$(printf '[output.tls]\nca = "%s"\nmin_version = "1.3"\n' "$OUT/ca.pem")
    fi
    cat > "$OUT/$1-$2.toml" <<EOF
[system]
log_level = "warn"

[[input]]
type = "forward"
bind = "127.0.0.1:$3"
$tls_in

[[output]]
type = "forward"
match = "**"
heartbeat_type = "none"
[[output.server]]
address = "127.0.0.1:$4"
[output.buffer]
flush_interval = "100ms"
chunk_limit_size = "512KiB"
total_limit_size = "8MiB"
$tls_out
EOF
}
for kind in plain tls; do
    config "$kind" b "$MID_PORT" "$SINK_PORT"
    config "$kind" a "$SUT_PORT" "$MID_PORT"
done

run() { # run KIND SIZE
    # B first, so A's first chunk finds it; flowbench waits for A's port.
    local cmd="$NAGARE run -c $OUT/$1-b.toml & exec $NAGARE run -c $OUT/$1-a.toml"
    "$FB" relay --sut-port "$SUT_PORT" --sink-port "$SINK_PORT" --duration "$DURATION" --warmup 3s \
        --size "$2" --batch 200 --quiet --sut-cmd "$cmd" 2>/dev/null | tail -n 1 >> "$OUT/$1-$2.jsonl"
}
for size in $SIZES; do
    for i in $(seq "$RUNS"); do
        echo "size $size run $i" >&2
        run plain "$size"
        run tls "$size"
    done
done

python3 - "$OUT" $SIZES <<'PY'
import json, statistics, sys
out, sizes = sys.argv[1], sys.argv[2:]
def load(name, size):
    with open(f"{out}/{name}-{size}.jsonl") as f:
        return [json.loads(l) for l in f if l.strip()]
med = lambda rows, k: statistics.median(r[k] for r in rows)
bar = {"100": 0.6, "1024": 0.8}
print("| bytes/event | plain ev/s | TLS ev/s | TLS / plain | bar | plain ev per CPU-s | TLS ev per CPU-s | TLS cores (A+B) | lost | duplicated |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for s in sizes:
    p, t = load("plain", s), load("tls", s)
    ratio = statistics.median(b["steady_events_per_s"] / a["steady_events_per_s"] for a, b in zip(p, t))
    print(f"| {s} | {med(p,'steady_events_per_s'):,.0f} | {med(t,'steady_events_per_s'):,.0f} | {ratio:.2f} | "
          f"{bar.get(s, '-')} | {med(p,'sut_events_per_cpu_s'):,.0f} | {med(t,'sut_events_per_cpu_s'):,.0f} | "
          f"{med(t,'sut_cores'):.2f} | {sum(r['lost'] for r in p + t)} | {sum(r['duplicates'] for r in p + t)} |")
PY
