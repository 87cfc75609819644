#!/bin/sh
# Benchmark: events/s from one emitting goroutine into a forward sink
# (flowbench sink), 100-byte records, for the nagare Go client and for
# fluent-logger-golang. Prints one JSON line per run (client figures plus the
# sink's count and rate) and the medians.
#
# NAGARE_SINK=1 sends into the nagare daemon instead ($NAGARE_BIN, default
# target/release/nagare: forward input -> null output, with its monitor); the
# run ends when the monitor's null output count reaches N.
#
#   sh sdk/go/bench/run.sh            # N=2000000 events, 3 runs each
#   N=500000 RUNS=1 sh sdk/go/bench/run.sh
#   NAGARE_SINK=1 N=1000000 sh sdk/go/bench/run.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
N=${N:-2000000}
RUNS=${RUNS:-3}
SIZE=${SIZE:-100}
NAGARE_SINK=${NAGARE_SINK:-0}
nagare_bin=${NAGARE_BIN:-$root/target/release/nagare}
flowbench=${FLOWBENCH:-$root/../shared/bench/bin/flowbench}
[ -x "$flowbench" ] || flowbench=/work/shared/bench/bin/flowbench
if [ "$NAGARE_SINK" = 1 ]; then
    [ -x "$nagare_bin" ] || { echo "$nagare_bin missing: cargo build --release" >&2; exit 1; }
    echo "receiver: nagare ($nagare_bin), forward input -> null output" >&2
elif [ ! -x "$flowbench" ]; then
    (cd /work/shared/bench/flowbench && go build -o ../bin/flowbench ./...)
fi
tmp=$(mktemp -d)
sink=""
trap '[ -z "$sink" ] || kill $sink 2>/dev/null || true; rm -rf "$tmp"' EXIT
(cd "$here" && go build -o "$tmp/bench" .)

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Run by run, each library in turn (nagare, fluent, nagare, fluent...): a load
# change on a busy machine lands on both sides, not on one library's runs.
: > "$tmp/nagare.rates"
: > "$tmp/fluent.rates"
i=0
while [ $i -lt "$RUNS" ]; do
    i=$((i + 1))
    for lib in nagare fluent; do
        port=$(free_port)
        extra=""
        if [ "$NAGARE_SINK" = 1 ]; then
            mport=$(free_port)
            printf '[[input]]\ntype = "forward"\nbind = "127.0.0.1:%s"\n\n[[output]]\ntype = "null"\nmatch = "**"\n\n[monitor]\nbind = "127.0.0.1:%s"\n' \
                "$port" "$mport" > "$tmp/nagare.toml"
            "$nagare_bin" run -c "$tmp/nagare.toml" > "$tmp/nagare.log" 2>&1 &
            sink=$!
            extra="-metrics http://127.0.0.1:$mport/metrics"
        else
            "$flowbench" sink --listen "127.0.0.1:$port" --idle-exit 3s --quiet \
                --verify --expect "$N" --json-summary "$tmp/sink.json" > /dev/null &
            sink=$!
        fi
        # wait for the sink to listen
        for _ in $(seq 1 100); do
            python3 -c "import socket; socket.create_connection(('127.0.0.1',$port)).close()" 2>/dev/null && break
            sleep 0.05
        done
        # shellcheck disable=SC2086
        client=$("$tmp/bench" -lib "$lib" -addr "127.0.0.1:$port" -n "$N" -size "$SIZE" $extra)
        if [ "$NAGARE_SINK" = 1 ]; then
            kill -TERM $sink
            wait $sink || true
            echo '{"receiver": "nagare"}' > "$tmp/sink.json"
        else
            wait $sink || true
        fi
        python3 - "$lib" "$client" "$tmp/sink.json" "$tmp/$lib.rates" <<'EOF'
import json, sys
lib, client, sink_path, rates = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
sink = json.load(open(sink_path))
if sink.get("receiver") == "nagare":
    # nagare's monitor count when it reached N (or the wait gave up);
    # total_s ends at that moment. nagare does not check seqs.
    sink = {"events": client["received"], "missing": client["events"] - client["received"],
            "events_per_s": client["received"] / client["total_s"]}
# Delivered rate: events that reached the sink / time from the first emit
# to the last event at the sink (the client's total time bounds it).
rate = sink["events"] / client["total_s"]
out = {"lib": lib, "events_sent": client["events"], "sink_events": sink["events"],
       "missing": sink.get("missing"), "duplicates": sink.get("duplicates"),
       "ns_per_emit": round(client["ns_per_emit"], 1),
       "emit_events_per_s": round(client["emit_events_per_s"]),
       "delivered_events_per_s": round(rate),
       "sink_active_events_per_s": round(sink["events_per_s"])}
if client.get("error"):
    out["error"] = client["error"]
print(json.dumps(out))
open(rates, "a").write("%f %f\n" % (rate, client["ns_per_emit"]))
EOF
    done
done

python3 - "$tmp" <<'EOF'
import statistics, sys
res = {}
for lib in ("nagare", "fluent"):
    rows = [tuple(map(float, l.split())) for l in open(f"{sys.argv[1]}/{lib}.rates")]
    res[lib] = (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows))
    print(f"{lib:7s} median delivered {res[lib][0]:>12,.0f} events/s   emit {res[lib][1]:8.1f} ns/call")
print(f"ratio nagare/fluent: {res['nagare'][0] / res['fluent'][0]:.2f}x")
EOF
