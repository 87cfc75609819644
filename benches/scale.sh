#!/usr/bin/env bash
# Multi-core scaling of a forward relay (issue 34): flowbench (sender and
# verifying sink, one process) → system under test → sink, for
#   - a byte pipe (bytepipe: read/write per connection, the physical reference),
#   - the relay floor (relayfloor: reads frames, checks them, writes them on,
#     with -threads W: the least work a relay must do),
#   - nagare with `[system] workers = W` and `flush_thread_count = W`,
# for every W, connection count and event size; ROUNDS rounds, the systems
# in alternating order; medians. Writes $OUT/scale.jsonl (one line a run)
# and a Markdown table ($OUT/scale.md; in the repository also into
# docs/benchmarks/scale.md, between its "scale-results" markers).
#
#   benches/scale.sh [W_LIST] [CONNS_LIST]     e.g. benches/scale.sh "1 2 4 8 16" "8 16"
#
# Defaults: W_LIST "1 2", CONNS_LIST "8". Environment: SIZES ("100 1024"),
# DURATION (6s), WARMUP (2s), ROUNDS (1), ACK=1 (adds nagare with acks: each
# frame waits for its ack, `flowbench --ack`), IDLE_RSS=1 (adds nagare's idle
# RSS at each W), OUT (raw results), DOC (the Markdown file to update; "" =
# none).
#
# Runs from the repository (builds what is missing: nagare's release binary
# unless NAGARE_BIN is given, flowbench from FLOWBENCH_DIR or ../shared/bench,
# bytepipe and relayfloor with Go) or from the folder benches/scale-pack.sh
# makes (the binaries beside this script; nothing is built there).
set -euo pipefail
W_LIST=${1:-"1 2"}
CONNS_LIST=${2:-8}
SIZES=${SIZES:-"100 1024"}
DURATION=${DURATION:-6s}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-1}
HERE=$(cd "$(dirname "$0")" && pwd)

if [ -x "$HERE/nagare" ] && [ -x "$HERE/flowbench" ]; then
    # The carried folder (benches/scale-pack.sh).
    NAGARE=$HERE/nagare FB=$HERE/flowbench BIN=$HERE
    OUT=${OUT:-$HERE/results-$(date +%Y%m%d-%H%M%S)}
    mkdir -p "$OUT"
    DOC=${DOC-}
else
    . "$HERE/common.sh"
    results_dir scale
    DOC=${DOC-$ROOT/docs/benchmarks/scale.md}
    BIN=$OUT/bin
    (cd "$HERE/scale" && CGO_ENABLED=0 go build -o "$BIN/" ./...)
fi
chmod +x "$NAGARE" "$FB" "$BIN/bytepipe" "$BIN/relayfloor" 2>/dev/null || true
CFG=$OUT/cfg
mkdir -p "$CFG"
: > "$OUT/scale.jsonl"

# nagare's relay: forward in → memory buffer → forward out (as
# benches/relay.toml, with a buffer limit big enough for W flush threads).
cfg() { # W
    cat > "$CFG/relay-$1.toml" <<TOML
[system]
log_level = "warn"
workers = $1

[[input]]
type = "forward"
bind = "127.0.0.1:\${FLOWBENCH_SUT_PORT}"

[[output]]
type = "forward"
match = "**"
heartbeat_type = "none"
[[output.server]]
address = "127.0.0.1:\${FLOWBENCH_SINK_PORT}"
[output.buffer]
flush_interval = "100ms"
chunk_limit_size = "512KiB"
total_limit_size = "64MiB"
flush_thread_count = $1
TOML
}

run() { # SUT W SIZE CONNS ROUND CMD [flowbench flags...]
    local sut=$1 w=$2 size=$3 conns=$4 round=$5 cmd=$6 ack=false
    shift 6
    [ "${1:-}" = --ack ] && ack=true
    echo "$sut W=$w size $size conns $conns round $round" >&2
    local r
    r=$("$FB" relay --sut-port "${SUT_PORT:-36224}" --sink-port "${SINK_PORT:-36225}" \
        --duration "$DURATION" --warmup "$WARMUP" --size "$size" --batch 200 --conns "$conns" \
        --quiet "$@" --sut-cmd "$cmd" 2>/dev/null | tail -n 1)
    [ -n "$r" ] || r='{}'
    printf '{"sut":"%s","w":%s,"size":%s,"conns":%s,"ack":%s,"round":%s,"r":%s}\n' \
        "$sut" "$w" "$size" "$conns" "$ack" "$round" "$r" >> "$OUT/scale.jsonl"
}

PIPE="exec $BIN/bytepipe -listen 127.0.0.1:\$FLOWBENCH_SUT_PORT -to 127.0.0.1:\$FLOWBENCH_SINK_PORT"
floor() { echo "exec $BIN/relayfloor -threads $1 -listen 127.0.0.1:\$FLOWBENCH_SUT_PORT -to 127.0.0.1:\$FLOWBENCH_SINK_PORT"; }
for w in $W_LIST; do cfg "$w"; done

for round in $(seq "$ROUNDS"); do
    for size in $SIZES; do
        for conns in $CONNS_LIST; do
            run pipe 0 "$size" "$conns" "$round" "$PIPE"
            for w in $W_LIST; do
                # Alternate which of the two goes first, round by round.
                if [ $((round % 2)) = 1 ]; then
                    run floor "$w" "$size" "$conns" "$round" "$(floor "$w")"
                    run nagare "$w" "$size" "$conns" "$round" "exec $NAGARE run -c $CFG/relay-$w.toml"
                else
                    run nagare "$w" "$size" "$conns" "$round" "exec $NAGARE run -c $CFG/relay-$w.toml"
                    run floor "$w" "$size" "$conns" "$round" "$(floor "$w")"
                fi
                if [ "${ACK:-0}" = 1 ]; then
                    run nagare "$w" "$size" "$conns" "$round" "exec $NAGARE run -c $CFG/relay-$w.toml" --ack
                fi
            done
        done
    done
done

# nagare's resident memory with no load: the fixed cost of each worker.
if [ "${IDLE_RSS:-0}" = 1 ]; then
    for w in $W_LIST; do
        port=$((${SUT_PORT:-36224} + 10))
        FLOWBENCH_SUT_PORT=$port FLOWBENCH_SINK_PORT=$((port + 1)) "$NAGARE" run -c "$CFG/relay-$w.toml" &
        pid=$!
        for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
        sleep 1 # let the started threads settle; a benchmark, not a test
        rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
        printf '{"sut":"nagare-idle","w":%s,"rss_kb":%s}\n' "$w" "$rss" >> "$OUT/scale.jsonl"
        kill "$pid"
        wait "$pid" 2>/dev/null || true
    done
fi

python3 - "$OUT/scale.jsonl" "$OUT/scale.md" "$DOC" "$*" "$DURATION" "$WARMUP" "$ROUNDS" "${ACK:-0}" <<'PY'
import json, os, platform, statistics, subprocess, sys, time
src, md, doc, args, duration, warmup, rounds, ack = sys.argv[1:9]
rows = [json.loads(l) for l in open(src) if l.strip()]
runs = [r for r in rows if "r" in r]
idle = [r for r in rows if r["sut"] == "nagare-idle"]
med = lambda xs: statistics.median(xs) if xs else 0
def pick(sut, w, size, conns, ack):
    return [r["r"] for r in runs if (r["sut"], r["w"], r["size"], r["conns"], r["ack"]) == (sut, w, size, conns, ack)]
def load1():
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"
cpu = "?"
try:
    for l in open("/proc/cpuinfo"):
        if l.startswith("model name"):
            cpu = l.split(":", 1)[1].strip(); break
except OSError:
    pass
out = []
out.append(f"{os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}, "
           f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average at the end {load1()}; "
           f"`benches/scale.sh {args}` (DURATION={duration}, WARMUP={warmup}, ROUNDS={rounds}, ACK={ack}); "
           f"medians of the rounds; ev/CPU-s = events per CPU-second of the system under test.")
out.append("")
out.append("| size B | conns | system | W | ev/s | busy cores | ev per CPU-s | ÷ byte pipe | ÷ floor (same W) | ev per CPU-s ÷ W=1's | peak RSS MB | lost | dup |")
out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
keys = sorted({(r["size"], r["conns"]) for r in runs})
ws = sorted({r["w"] for r in runs if r["w"] > 0})
for size, conns in keys:
    pipe = med([r.get("steady_events_per_s", 0) for r in pick("pipe", 0, size, conns, False)])
    def line(sut, w, ackd, label):
        rs = pick(sut, w, size, conns, ackd)
        if not rs:
            return
        evs = med([r.get("steady_events_per_s", 0) for r in rs])
        cpus = med([r.get("sut_events_per_cpu_s") or 0 for r in rs])
        cores = med([r.get("sut_cores") or 0 for r in rs])
        fl = med([r.get("steady_events_per_s", 0) for r in pick("floor", w, size, conns, False)])
        base = med([r.get("sut_events_per_cpu_s") or 0 for r in pick(sut, min(ws), size, conns, ackd)]) if ws else 0
        ratio = lambda a, b: f"{a / b:.2f}" if a and b else "–"
        out.append(f"| {size} | {conns} | {label} | {w or '–'} | {evs:,.0f} | {cores:.2f} | {cpus:,.0f} | {ratio(evs, pipe)} | "
                   f"{ratio(evs, fl) if sut != 'floor' else '–'} | {ratio(cpus, base) if w else '–'} | "
                   f"{max((r.get('sut_peak_rss_mb') or 0) for r in rs):.1f} | {sum(r.get('lost', 0) for r in rs)} | "
                   f"{sum(r.get('duplicates', 0) for r in rs)} |")
    line("pipe", 0, False, "byte pipe")
    for w in ws:
        line("floor", w, False, "relay floor")
        line("nagare", w, False, "nagare")
        line("nagare", w, True, "nagare, acked")
if idle:
    out.append("")
    out.append("| W | nagare idle RSS MB |")
    out.append("| --- | --- |")
    for r in idle:
        out.append(f"| {r['w']} | {r['rss_kb'] / 1024:.1f} |")
text = "\n".join(out) + "\n"
open(md, "w").write(text)
print(text)
if doc and os.path.exists(doc):
    d = open(doc).read()
    b, e = "<!-- scale-results:begin -->", "<!-- scale-results:end -->"
    if b in d and e in d:
        d = d[: d.index(b) + len(b)] + "\n" + text + d[d.index(e):]
        open(doc, "w").write(d)
        print(f"(written into {doc})", file=sys.stderr)
PY
