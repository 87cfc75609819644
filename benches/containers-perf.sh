#!/usr/bin/env bash
# The cri parser with partial joins against parser none on the same bytes:
# one file of CRI lines as containerd writes them (every JOIN_EVERY-th line
# of the containers cut into three pieces, P P F, the streams interleaved),
# read from its head by the tail input and forwarded to `flowbench sink`;
# once with [input.parser] type = "cri" (the pieces joined: fewer events),
# once with type "none" (every file line an event). Prints, per run, file
# lines per second over the sink's active window and per nagare CPU-second,
# then the medians and the ratio cri / none (issue 33: at least 0.6).
#
#   benches/containers-perf.sh [LINES] [SIZE] [JOIN_EVERY] [RUNS]
#   defaults: 2000000 file lines, 100-byte contents, 4, 3 runs
set -euo pipefail
cd "$(dirname "$0")/.."
LINES=${1:-2000000}
SIZE=${2:-100}
JOIN_EVERY=${3:-4}
RUNS=${4:-3}
. benches/common.sh
results_dir containers
PORT=${SINK_PORT:-36311}
# The file, and how many events each parser makes of it.
python3 - "$OUT/in.log" "$LINES" "$SIZE" "$JOIN_EVERY" > "$OUT/counts" <<'PY'
import sys
path, lines, size, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
body = ("x" * size)
piece = body[: max(1, size // 3)]
n, events, out = 0, 0, []
with open(path, "w") as f:
    while n < lines:
        ts = f"2026-11-28T10:{(n // 100000) % 60:02d}:{(n // 1000) % 60:02d}.{n % 1000000:06d}123Z"
        stream = "stderr" if events % 5 == 0 else "stdout"
        if events % every == 0 and n + 3 <= lines:
            out.append(f"{ts} {stream} P {piece}\n{ts} {stream} P {piece}\n{ts} {stream} F {piece}\n")
            n += 3
        else:
            out.append(f"{ts} {stream} F {body}\n")
            n += 1
        events += 1
        if len(out) >= 10000:
            f.write("".join(out)); out = []
    f.write("".join(out))
print(n, events)
PY
read -r FILE_LINES CRI_EVENTS < "$OUT/counts"
echo "file: $FILE_LINES lines ($(du -m "$OUT/in.log" | cut -f1) MB), $CRI_EVENTS events once joined" >&2

run() { # run PARSER EXPECT: one measurement; prints "lines/s lines-per-CPU-s"
    cat > "$OUT/$1.toml" <<TOML
[[input]]
type = "tail"
path = "$OUT/in.log"
tag = "perf"
read_from_head = true
[input.parser]
type = "$1"
$(sink_output "$PORT")
TOML
    sink_run "$OUT/$1.toml" "$PORT" "$2" "$FILE_LINES"
}

cri=(); none=(); cri_cpu=(); none_cpu=()
for i in $(seq "$RUNS"); do
    read -r r c < <(run none "$FILE_LINES"); none+=("$r"); none_cpu+=("$c")
    echo "run $i none: $r file lines/s, $c per CPU-s" >&2
    read -r r c < <(run cri "$CRI_EVENTS"); cri+=("$r"); cri_cpu+=("$c")
    echo "run $i cri:  $r file lines/s, $c per CPU-s" >&2
done
python3 - "${none[*]}" "${cri[*]}" "${none_cpu[*]}" "${cri_cpu[*]}" <<'PY'
import statistics as st, sys
none, cri, ncpu, ccpu = ([float(x) for x in a.split()] for a in sys.argv[1:5])
n, c = st.median(none), st.median(cri)
print(f"median file lines/s: none {n:,.0f}, cri {c:,.0f}, cri/none {c / n:.2f}")
print(f"median file lines per nagare CPU-s: none {st.median(ncpu):,.0f}, cri {st.median(ccpu):,.0f}, "
      f"cri/none {st.median(ccpu) / st.median(ncpu):.2f}")
PY
