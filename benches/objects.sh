# Sourced by benches/s3.sh and benches/azure_blob.sh: their shared set-up
# and `run_pairs`, the object output against its floor
# (examples/s3_put_floor.rs: the same client library and nothing else).
#
# Sets ROOT, EVENTS, RUNS, MSG, NAGARE, FLOOR and OUT (from the script's
# arguments and the environment: NAGARE_BIN / FLOOR_BIN name prebuilt
# binaries) and defines wait_port. The caller then starts its server and
# sets STORE_TYPE (the output type), SUT_PORT, MON, FLOOR_TARGET (the
# floor's endpoint, account or key id, and secret) and the functions
# make_container NAME, stored NAME (prints "objects bytes"),
# output_options NAME (the output's TOML lines for that bucket or
# container) and drop_containers NAMES, and calls run_pairs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
EVENTS=${1:-500000}
RUNS=${2:-3}
MSG=${MESSAGE_BYTES:-200}
TGT=${CARGO_TARGET_DIR:-$ROOT/target}
NAGARE=${NAGARE_BIN:-$TGT/release/nagare}
[ -n "${NAGARE_BIN:-}" ] || cargo build --release -p nagare >&2
FLOOR=${FLOOR_BIN:-$TGT/release/examples/s3_put_floor}
[ -n "${FLOOR_BIN:-}" ] || cargo build --release -p nagare --example s3_put_floor >&2
OUT=${OUT:-$(mktemp -d "/tmp/nagare-$(basename "$0" .sh)-XXXX")}
mkdir -p "$OUT"
echo "raw results in $OUT" >&2

# wait_port PORT [TENTHS]: waits up to TENTHS/10 s (default 10 s) for
# 127.0.0.1:PORT to accept connections.
wait_port() {
    for _ in $(seq "${2:-100}"); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
    return 1
}

cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

delivered() {
    curl -s "http://127.0.0.1:$MON/metrics" |
        awk -F' ' -v p="plugin=\"$STORE_TYPE#0\"," '/^nagare_events_out_total\{/ && index($0, p) { print $NF }'
}

# RUNS pairs per compression (none, gzip), alternating nagare and the
# floor; prints the medians and the ratios to the floor.
run_pairs() {
  local msg i comp b n c0 c1 t0 t1 objects bytes raw rawobjects line f gz
  msg=$(head -c "$MSG" /dev/zero | tr '\0' x)
  for i in $(seq "$RUNS"); do
    for comp in none gzip; do
      b=nagare-$comp-$i
      make_container "$b"
      cat > "$OUT/$b.toml" <<EOF
[monitor]
bind = "127.0.0.1:$MON"

[[input]]
type = "forward"
bind = "127.0.0.1:$SUT_PORT"

[[output]]
type = "$STORE_TYPE"
match = "**"
$(output_options "$b")
compression = "$comp"
[output.buffer]
chunk_limit_size = "8MiB"
flush_interval = "1s"
flush_thread_count = 2
total_limit_size = "1GiB"
EOF
      echo "run $i $comp: nagare" >&2
      "$NAGARE" run -c "$OUT/$b.toml" 2>"$OUT/$b.log" &
      n=$!
      wait_port "$SUT_PORT"
      wait_port "$MON"
      c0=$(cpu "$n")
      t0=$(date +%s.%N)
      "$NAGARE" gen --forward "127.0.0.1:$SUT_PORT" --count "$EVENTS" --rate 0 --message "$msg" >/dev/null 2>&1
      until [ "$(delivered)" = "$EVENTS" ]; do sleep 0.05; done
      t1=$(date +%s.%N)
      c1=$(cpu "$n")
      kill -TERM "$n"; wait "$n" || true
      read -r objects bytes < <(stored "$b")
      # The uncompressed JSON lines: the run without compression stored them.
      if [ "$comp" = none ]; then raw=$bytes; rawobjects=$objects; fi
      echo "{\"objects\":$objects,\"events\":$EVENTS,\"bytes\":$bytes,\"raw\":$raw,\"wall_s\":$(awk "BEGIN { print $t1 - $t0 }"),\"cpu_s\":$(awk "BEGIN { print $c1 - $c0 }")}" > "$OUT/$b.json"
      # The floor: as many objects as nagare's uncompressed run stored, each
      # of their mean size (JSON lines of the same length).
      line=$(( raw / EVENTS ))
      f=floor-$comp-$i
      make_container "$f"
      echo "run $i $comp: floor" >&2
      gz=""; [ "$comp" = gzip ] && gz=gzip
      # shellcheck disable=SC2086 # FLOOR_TARGET is three words
      "$FLOOR" $FLOOR_TARGET "$f" "$rawobjects" $(( raw / rawobjects )) "$line" 2 $gz > "$OUT/$f.json"
      drop_containers "$b" "$f"
    done
  done

  python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
med = statistics.median
print("| compression | who | objects | events/CPU-s | MB/s (JSON, before compression) | CPU s | wall s |")
print("| --- | --- | --- | --- | --- | --- | --- |")
ratios = {}
for comp in ("none", "gzip"):
    rows = {}
    for who in ("nagare", "floor"):
        r = [json.load(open(f"{out}/{who}-{comp}-{i}.json")) for i in range(1, runs + 1)]
        eps = med(x["events"] / x["cpu_s"] for x in r)
        mbs = med(x["raw"] / x["wall_s"] / 1e6 for x in r)
        rows[who] = (eps, mbs)
        print(f"| {comp} | {who} | {r[0]['objects']} | {eps:,.0f} | {mbs:.1f} | {med(x['cpu_s'] for x in r):.2f} | {med(x['wall_s'] for x in r):.2f} |")
    ratios[comp] = (rows["nagare"][0] / rows["floor"][0], rows["nagare"][1] / rows["floor"][1])
for comp, (e, m) in ratios.items():
    print(f"{comp}: nagare/floor events per CPU-second {e:.2f}x, MB/s {m:.2f}x")
PY
}
