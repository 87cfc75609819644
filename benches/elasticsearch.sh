#!/usr/bin/env bash
# The elasticsearch output's bench (docs/benchmarks/elasticsearch.md):
# against one OpenSearch 2.19 node (tests/opensearch/start.sh), in one
# sitting, RUNS times alternating:
#   floor   benches/elasticsearch-floor.py POSTs pre-built `_bulk` bodies of
#           the same documents (BATCH per request, CONC at once) as fast as
#           OpenSearch takes them;
#   nagare  `nagare gen --forward` sends N events ({"seq", "message"}) to a
#           nagare whose elasticsearch output writes them (chunks of BATCH
#           events, flush_thread_count = CONC); timed from the first event
#           sent to the output's events_out_total reaching N.
# Each run writes a new index (1 shard, no replica) and its _count is
# checked to be N. Prints a Markdown table: events/s (median), nagare's
# CPU seconds per million events and peak RSS, and the ratio to the floor.
#
#   benches/elasticsearch.sh [N] [RUNS]        (defaults: 500000 events, 3 runs)
#
# BATCH (default 1000), CONC (default 2), MSG_BYTES (default 100),
# ES_PORT (default 40600), NAGARE_BIN (default: the release build).
#
# FLUENT_BIT=/path/to/fluent-bit adds a third side to each run: the same
# `nagare gen --forward` events into Fluent Bit's in_forward, its `es`
# output (Workers = CONC) writing them to a new index; timed until its
# fluentbit_output_proc_records_total reaches N; its CPU and peak RSS from
# /proc like nagare's. Unset: that side is skipped with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
N=${1:-500000}
RUNS=${2:-3}
BATCH=${BATCH:-1000}
CONC=${CONC:-2}
MSG_BYTES=${MSG_BYTES:-100}
ES_PORT=${ES_PORT:-40600}
IN_PORT=$((ES_PORT + 2))
MON_PORT=$((ES_PORT + 3))
if [ -n "${NAGARE_BIN:-}" ]; then
  NAGARE=$NAGARE_BIN
else
  cargo build --release -p nagare >&2
  NAGARE=${CARGO_TARGET_DIR:-$ROOT/target}/release/nagare
fi
OUT=${OUT:-$(mktemp -d /tmp/nagare-es-bench-XXXX)}
mkdir -p "$OUT"
echo "raw results in $OUT" >&2
MSG=$(head -c "$MSG_BYTES" /dev/zero | tr '\0' 'x')

# The node: a bigger heap than the tests', full JIT.
OPENSEARCH_JAVA_OPTS=${OPENSEARCH_JAVA_OPTS:--Xms1g -Xmx1g} \
  bash tests/opensearch/start.sh "$OUT/node" "$ES_PORT" $((ES_PORT + 1)) >"$OUT/node.log" 2>&1 &
NODE=$!
NAGARE_PID=
trap 'kill $NODE ${NAGARE_PID:-} 2>/dev/null; wait 2>/dev/null' EXIT
URL=http://127.0.0.1:$ES_PORT
for _ in $(seq 600); do
  curl -sf "$URL/_cluster/health?wait_for_status=yellow" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -sf "$URL/" | grep -q '"number"' || { echo "OpenSearch did not start:" >&2; cat "$OUT/node.log" >&2; exit 1; }

new_index() { # new_index NAME
  curl -sf -XPUT -H 'Content-Type: application/json' "$URL/$1" \
    -d '{"settings":{"number_of_shards":1,"number_of_replicas":0}}' >/dev/null
}
count() { # count INDEX
  curl -sf -XPOST "$URL/$1/_refresh" >/dev/null
  curl -sf "$URL/$1/_count" | sed 's/.*"count":\([0-9]*\).*/\1/'
}
metric() { # metric NAME: nagare's metric of the elasticsearch output
  curl -sf "127.0.0.1:$MON_PORT/metrics" 2>/dev/null \
    | awk -v m="nagare_$1{plugin=\"elasticsearch#0\"," 'index($0, m) == 1 { print $NF }'
}

floor_run() { # floor_run R: prints events/s
  local index=bench-floor-$1 line
  new_index "$index"
  line=$(python3 benches/elasticsearch-floor.py "$URL" "$index" "$N" "$BATCH" "$CONC" "$MSG")
  [ "$(count "$index")" = "$N" ] || { echo "floor: count of $index is not $N" >&2; exit 1; }
  echo "$line" >>"$OUT/floor.txt"
  echo "$line" | awk '{ print $3 }'
}

nagare_run() { # nagare_run R: prints "events/s cpu_s_per_million rss_mb"
  local index=bench-nagare-$1 t0 t1 n
  new_index "$index"
  cat >"$OUT/nagare-$1.toml" <<TOML
[monitor]
bind = "127.0.0.1:$MON_PORT"
[[input]]
type = "forward"
bind = "127.0.0.1:$IN_PORT"
[[output]]
type = "elasticsearch"
match = "**"
endpoint = "$URL"
index = "$index"
[output.buffer]
chunk_limit_records = $BATCH
chunk_limit_size = "16MiB"
total_limit_size = "1GiB"
flush_interval = "100ms"
flush_thread_count = $CONC
TOML
  "$NAGARE" run -c "$OUT/nagare-$1.toml" 2>"$OUT/nagare-$1.log" &
  NAGARE_PID=$!
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$IN_PORT") 2>/dev/null && break; sleep 0.1; done
  t0=$(date +%s.%N)
  "$NAGARE" gen --forward "127.0.0.1:$IN_PORT" --count "$N" --message "$MSG" 2>>"$OUT/gen.log"
  while n=$(metric events_out_total); [ "${n:-0}" -lt "$N" ]; do sleep 0.05; done
  t1=$(date +%s.%N)
  local cpu rss
  cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$NAGARE_PID/stat")
  rss=$(awk '/^VmHWM/ { print $2 / 1024 }' "/proc/$NAGARE_PID/status")
  kill "$NAGARE_PID"; wait "$NAGARE_PID" 2>/dev/null || true
  NAGARE_PID=
  [ "$(count "$index")" = "$N" ] || { echo "nagare: count of $index is not $N" >&2; exit 1; }
  awk -v n="$N" -v a="$t0" -v b="$t1" -v cpu="$cpu" -v rss="$rss" \
    'BEGIN { printf "%.0f %.2f %.0f\n", n / (b - a), cpu / n * 1e6, rss }' | tee -a "$OUT/nagare.txt"
}

fb_metric() { # fb_metric: records Fluent Bit's es output has delivered
  curl -sf "127.0.0.1:$MON_PORT/api/v1/metrics/prometheus" 2>/dev/null \
    | awk 'index($0, "fluentbit_output_proc_records_total{name=\"es.0\"}") == 1 { print $2 }'
}

fluentbit_run() { # fluentbit_run R: prints "events/s cpu_s_per_million rss_mb"
  local index=bench-fluentbit-$1 t0 t1 n
  new_index "$index"
  # Flush 0.1 s like nagare's flush_interval; Workers like its
  # flush_thread_count. Fluent Bit sends each chunk (up to ~2 MB of
  # msgpack, its own size) as one _bulk request.
  cat >"$OUT/fluentbit-$1.conf" <<CONF
[SERVICE]
    Flush        0.1
    Log_Level    warn
    HTTP_Server  On
    HTTP_Listen  127.0.0.1
    HTTP_Port    $MON_PORT
[INPUT]
    Name   forward
    Listen 127.0.0.1
    Port   $IN_PORT
[OUTPUT]
    Name   es
    Match  *
    Host   127.0.0.1
    Port   $ES_PORT
    Index  $index
    Suppress_Type_Name On
    Buffer_Size False
    Retry_Limit False
    Workers $CONC
CONF
  "$FLUENT_BIT" -c "$OUT/fluentbit-$1.conf" >"$OUT/fluentbit-$1.log" 2>&1 &
  NAGARE_PID=$!
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$IN_PORT") 2>/dev/null && break; sleep 0.1; done
  t0=$(date +%s.%N)
  "$NAGARE" gen --forward "127.0.0.1:$IN_PORT" --count "$N" --message "$MSG" 2>>"$OUT/gen.log"
  while n=$(fb_metric); [ "${n:-0}" -lt "$N" ]; do sleep 0.05; done
  t1=$(date +%s.%N)
  local cpu rss
  cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$NAGARE_PID/stat")
  rss=$(awk '/^VmHWM/ { print $2 / 1024 }' "/proc/$NAGARE_PID/status")
  kill "$NAGARE_PID"; wait "$NAGARE_PID" 2>/dev/null || true
  NAGARE_PID=
  [ "$(count "$index")" = "$N" ] || { echo "fluent-bit: count of $index is not $N" >&2; exit 1; }
  awk -v n="$N" -v a="$t0" -v b="$t1" -v cpu="$cpu" -v rss="$rss" \
    'BEGIN { printf "%.0f %.2f %.0f\n", n / (b - a), cpu / n * 1e6, rss }' | tee -a "$OUT/fluentbit.txt"
}
[ -n "${FLUENT_BIT:-}" ] || echo "FLUENT_BIT unset: Fluent Bit's es output is not measured" >&2

floors=() nagares=() cpus=() rsss=() fbs=() fbcpus=() fbrsss=()
for r in $(seq "$RUNS"); do
  floors+=("$(floor_run "$r")")
  read -r eps cpu rss < <(nagare_run "$r")
  nagares+=("$eps") cpus+=("$cpu") rsss+=("$rss")
  echo "run $r: floor ${floors[-1]} ev/s, nagare $eps ev/s, $cpu CPU s per 1M events, $rss MB" >&2
  if [ -n "${FLUENT_BIT:-}" ]; then
    read -r eps cpu rss < <(fluentbit_run "$r")
    fbs+=("$eps") fbcpus+=("$cpu") fbrsss+=("$rss")
    echo "run $r: fluent-bit $eps ev/s, $cpu CPU s per 1M events, $rss MB" >&2
  fi
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
f=$(median "${floors[@]}") g=$(median "${nagares[@]}")
echo
echo "| $N events of ${MSG_BYTES} B, $BATCH per request, $CONC at once | events/s (median of $RUNS) | CPU s per 1M events | peak RSS MB |"
echo "| --- | --- | --- | --- |"
echo "| floor: pre-built _bulk bodies (Python) | $f | — | — |"
echo "| nagare elasticsearch output | $g ($(awk -v a="$g" -v b="$f" 'BEGIN { printf "%.2f", a / b }')× the floor) | $(median "${cpus[@]}") | $(median "${rsss[@]}") |"
if [ -n "${FLUENT_BIT:-}" ]; then
  h=$(median "${fbs[@]}")
  echo "| Fluent Bit es output | $h ($(awk -v a="$h" -v b="$f" 'BEGIN { printf "%.2f", a / b }')× the floor) | $(median "${fbcpus[@]}") | $(median "${fbrsss[@]}") |"
  echo "nagare CPU per event / Fluent Bit's: $(awk -v a="$(median "${cpus[@]}")" -v b="$(median "${fbcpus[@]}")" 'BEGIN { printf "%.2f", a / b }')"
fi
echo "runs: floor ${floors[*]}; nagare ${nagares[*]}; cpu ${cpus[*]}${FLUENT_BIT:+; fluent-bit ${fbs[*]}; cpu ${fbcpus[*]}}"
