#!/usr/bin/env bash
# Issue 32's convert bench: `nagare convert` of a generated 500-line Fluentd
# config (tail sources with parsers, grep and record_transformer filters,
# forward, file and copy outputs with buffers, a label, includes of
# nothing) against the floor of starting the same binary (`nagare
# --version`), RUNS times each, alternating, in one sitting. Prints the
# medians in milliseconds and their ratio. The goal: under 100 ms.
#
#   benches/convert.sh [RUNS] [LINES]     (defaults: 30 runs, 500 lines)
#
# NAGARE_BIN names the binary (default target/release/nagare). Needs python3.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-30}
LINES=${2:-500}
BIN=${NAGARE_BIN:-target/release/nagare}
[ -x "$BIN" ] || { echo "build it first: cargo build --release -p nagare (or set NAGARE_BIN)" >&2; exit 1; }
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
python3 - "$DIR/fluent.conf" "$LINES" <<'PY'
import sys
path, want = sys.argv[1], int(sys.argv[2])
blocks, i = [], 0
def block(i):
    return f"""<source>
  @type tail
  path /var/log/app{i}/*.log
  pos_file /var/lib/fluentd/app{i}.pos
  tag app{i}.*
  read_from_head true
  <parse>
    @type regexp
    expression /^(?<time>[^ ]+) (?<level>[A-Z]+) (?<msg>.*)$/
    time_format %Y-%m-%dT%H:%M:%S%z
  </parse>
</source>
<filter app{i}.**>
  @type grep
  <exclude>
    key level
    pattern /^DEBUG$/
  </exclude>
</filter>
<filter app{i}.**>
  @type record_transformer
  <record>
    host "#{{Socket.gethostname}}"
    service app{i}
    summary ${{record["level"]}}: ${{record["msg"]}}
  </record>
</filter>
<match app{i}.**>
  @type copy
  <store>
    @type forward
    <server>
      host 10.0.0.{i % 250 + 1}
      port 24224
    </server>
    <buffer>
      @type file
      path /var/lib/fluentd/buffer/app{i}
      chunk_limit_size 8m
      flush_interval 5s
    </buffer>
  </store>
  <store>
    @type file
    path /var/log/archive/app{i}
    <format>
      @type json
    </format>
  </store>
</match>
"""
out = "<system>\n  log_level info\n</system>\n"
while out.count("\n") < want:
    out += block(i)
    i += 1
open(path, "w").write(out)
print(f"{out.count(chr(10))} lines, {i} pipelines", file=sys.stderr)
PY
python3 - "$BIN" "$DIR/fluent.conf" "$RUNS" <<'PY'
import subprocess, sys, time, statistics
bin, conf, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
conv, floor = [], []
for _ in range(runs):
    t = time.perf_counter()
    r = subprocess.run([bin, "convert", "-o", "/dev/null", conf], stderr=subprocess.DEVNULL)
    conv.append((time.perf_counter() - t) * 1000)
    assert r.returncode in (0, 3), r.returncode
    t = time.perf_counter()
    subprocess.run([bin, "--version"], stdout=subprocess.DEVNULL)
    floor.append((time.perf_counter() - t) * 1000)
c, f = statistics.median(conv), statistics.median(floor)
print("| what | median ms | ratio to the floor |")
print("| --- | --- | --- |")
print(f"| nagare convert (500-line fluent.conf) | {c:.1f} | {c / f:.2f}x |")
print(f"| floor: nagare --version | {f:.1f} | 1.00x |")
PY
