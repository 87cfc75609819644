#!/usr/bin/env python3
"""Throughput and emit() cost: nagare-logger vs fluent-logger, into a flowbench sink.

One emitting thread sends COUNT events of 100-byte records
({"seq": i, "message": <100 bytes>}) with nanosecond timestamps, then closes
the logger (which waits until everything is written). Reported per run:

- emit_us:        mean wall time of one emit() call (the loop only)
- events_per_s:   COUNT / (first emit .. close() returned)
- sink_events:    events the sink counted (must equal COUNT; --verify checks seqs)

Each library runs in its own process, RUNS times; the median is printed.

    pip install -e 'sdk/python[bench]'
    (cd /work/shared/bench/flowbench && go build -o ../bin/flowbench ./...)
    python sdk/python/bench/bench.py --count 300000 --runs 3

NAGARE_SINK=1 sends into the nagare daemon instead of flowbench sink
($NAGARE_BIN, default target/release/nagare: forward input -> null output,
with its monitor). The child then polls the monitor after close() until
nagare's null output counted COUNT events, and events_per_s ends at that
moment; sink_events is that count (nagare does not check seqs).

    NAGARE_SINK=1 python sdk/python/bench/bench.py --count 300000 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

FLOWBENCH = os.environ.get("FLOWBENCH", "/work/shared/bench/bin/flowbench")
NAGARE_SINK = os.environ.get("NAGARE_SINK") == "1"
NAGARE_BIN = os.environ.get(
    "NAGARE_BIN", str(pathlib.Path(__file__).resolve().parents[3] / "target/release/nagare")
)
NULL_IN = 'nagare_events_in_total{plugin="null#0",kind="output",type="null"} '
NAGARE_CONFIG = """[[input]]
type = "forward"
bind = "127.0.0.1:{port}"

[[output]]
type = "null"
match = "**"

[monitor]
bind = "127.0.0.1:{mport}"
"""
LIBS = ["nagare", "nagare-ack", "fluent-sync", "fluent-async"]
MESSAGE = ("0123456789abcdefghijklmnopqrstuvwxyz" * 3)[:100]


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.02)
    raise SystemExit("sink did not start")


def null_count(url: str) -> int:
    """The count of events nagare's null output received, from its monitor."""
    with urllib.request.urlopen(url, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(NULL_IN):
                return int(line[len(NULL_IN) :])
    return -1


def run_emitter(lib: str, port: int, count: int, metrics: str | None = None) -> dict:
    """Runs inside a child process: emit COUNT events, close, print timings.

    With METRICS (a nagare monitor URL), wait until nagare counted COUNT events.
    """
    if metrics:
        null_count(metrics)  # connect once before the clock starts
    if lib.startswith("nagare"):
        from nagare_logger import Client

        c = Client(f"127.0.0.1:{port}", require_ack=(lib == "nagare-ack"))
        emit = c.emit
        tag = "bench.load"

        def close() -> None:
            if not c.close(120):
                raise SystemExit(f"nagare close timed out: {c.stats}")

        c0, p0, t0 = time.thread_time(), time.process_time(), time.perf_counter()
        for i in range(count):
            emit(tag, {"seq": i, "message": MESSAGE})
        t1, c1 = time.perf_counter(), time.thread_time()
        close()
        p1 = time.process_time()
    else:
        if lib == "fluent-sync":
            from fluent.sender import FluentSender
        else:
            from fluent.asyncsender import FluentSender
        s = FluentSender("bench", host="127.0.0.1", port=port, nanosecond_precision=True)
        emit = s.emit
        c0, p0, t0 = time.thread_time(), time.process_time(), time.perf_counter()
        for i in range(count):
            emit("load", {"seq": i, "message": MESSAGE})
        t1, c1 = time.perf_counter(), time.thread_time()
        s.close()
        p1 = time.process_time()
        if s.last_error:
            raise SystemExit(f"fluent-logger error: {s.last_error}")
    received = None
    if metrics:
        deadline = time.perf_counter() + 60
        while (received := null_count(metrics)) < count and time.perf_counter() < deadline:
            time.sleep(0.001)
    t2 = time.perf_counter()
    res = {
        "emit_us": (t1 - t0) / count * 1e6,
        # CPU time: on a shared machine wall time also counts the waits for a
        # core. emit_cpu_us: the emitting thread's, per emit; events_per_cpu_s:
        # events per CPU-second of the whole client process (sender thread
        # included) from the first emit until close() returned.
        "emit_cpu_us": (c1 - c0) / count * 1e6,
        "events_per_cpu_s": count / max(p1 - p0, 1e-9),
        "events_per_s": count / (t2 - t0),
        "seconds": t2 - t0,
    }
    if received is not None:
        res["received"] = received
    return res


def start_nagare(port: int, td: str) -> tuple[subprocess.Popen, str]:
    """Starts nagare: forward input on PORT -> null output; returns it and its metrics URL."""
    mport = free_port()
    conf = pathlib.Path(td) / "nagare.toml"
    conf.write_text(NAGARE_CONFIG.format(port=port, mport=mport))
    with open(pathlib.Path(td) / "nagare.log", "wb") as log:
        proc = subprocess.Popen(
            [NAGARE_BIN, "run", "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT
        )
    wait_port(mport)
    return proc, f"http://127.0.0.1:{mport}/metrics"


def run_child(lib: str, port: int, count: int, *extra: str) -> dict:
    """Runs this script as the emitter child; returns its JSON result line."""
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            lib,
            "--port",
            str(port),
            "--count",
            str(count),
            *extra,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def one_run(lib: str, count: int) -> dict:
    port = free_port()
    with tempfile.TemporaryDirectory() as td:
        if NAGARE_SINK:
            return one_run_nagare(lib, count, port, td)
        summary = pathlib.Path(td) / "sink.json"
        sink = subprocess.Popen(
            [
                FLOWBENCH,
                "sink",
                "--listen",
                f"127.0.0.1:{port}",
                "--idle-exit",
                "3s",
                "--verify",
                "--expect",
                str(count),
                "--quiet",
                "--json-summary",
                str(summary),
            ],
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_port(port)
            res = run_child(lib, port, count)
            sink.wait(60)
        finally:
            if sink.poll() is None:
                sink.kill()
                sink.wait()
        s = json.loads(summary.read_text())
    res["sink_events"] = s["events"]
    res["missing"] = s.get("missing")
    res["duplicates"] = s.get("duplicates")
    return res


def one_run_nagare(lib: str, count: int, port: int, td: str) -> dict:
    sink, metrics = start_nagare(port, td)
    try:
        wait_port(port)
        res = run_child(lib, port, count, "--metrics", metrics)
    finally:
        sink.terminate()
        sink.wait(30)
    res["sink_events"] = res.pop("received")
    res["missing"] = count - res["sink_events"]
    res["duplicates"] = None
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--count", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--libs", default=",".join(LIBS))
    ap.add_argument("--child")
    ap.add_argument("--port", type=int)
    ap.add_argument("--metrics")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_emitter(args.child, args.port, args.count, args.metrics)))
        return
    if NAGARE_SINK:
        if not os.access(NAGARE_BIN, os.X_OK):
            raise SystemExit(f"{NAGARE_BIN} missing: cargo build --release")
        print(f"receiver: nagare ({NAGARE_BIN}), forward input -> null output", flush=True)
    elif not os.access(FLOWBENCH, os.X_OK):
        raise SystemExit(
            f"{FLOWBENCH} missing: "
            "cd /work/shared/bench/flowbench && go build -o ../bin/flowbench ./..."
        )
    table = {}
    libs = args.libs.split(",")
    # run by run, each library in turn (ours, theirs, ours, theirs...): a load
    # change on a busy machine lands on every side, not on one library's runs
    all_runs: dict[str, list[dict]] = {lib: [] for lib in libs}
    for _ in range(args.runs):
        for lib in libs:
            r = one_run(lib, args.count)
            if r["sink_events"] < args.count or r["missing"]:
                raise SystemExit(f"{lib}: sink got {r['sink_events']} of {args.count}: {r}")
            all_runs[lib].append(r)
    for lib in libs:
        runs = all_runs[lib]
        table[lib] = {
            "events_per_s": statistics.median(r["events_per_s"] for r in runs),
            "emit_us": statistics.median(r["emit_us"] for r in runs),
            "emit_cpu_us": statistics.median(r["emit_cpu_us"] for r in runs),
            "events_per_cpu_s": statistics.median(r["events_per_cpu_s"] for r in runs),
            "runs": runs,
        }
        print(
            f"{lib:13s} {table[lib]['events_per_s']:>12,.0f} ev/s   "
            f"emit {table[lib]['emit_us']:6.2f} us/call "
            f"({table[lib]['emit_cpu_us']:6.2f} us CPU)   "
            f"{table[lib]['events_per_cpu_s']:>10,.0f} ev/CPU-s   (median of {len(runs)}; runs: "
            + ", ".join(f"{r['events_per_s']:,.0f}" for r in runs)
            + ")",
            flush=True,
        )
    # like with like: fluent-logger has no acks, so it is set against nagare
    # without acks (nagare-ack is printed above for what acks cost)
    fluent = [v for k, v in table.items() if k.startswith("fluent")]
    if fluent and "nagare" in table:
        best = max(fluent, key=lambda v: v["events_per_s"])
        cheapest = min(v["emit_us"] for v in fluent)
        cheapest_cpu = min(v["emit_cpu_us"] for v in fluent)
        best_cpu = max(v["events_per_cpu_s"] for v in fluent)
        n = table["nagare"]
        print(
            "nagare (no acks) / best fluent-logger: "
            f"{n['events_per_s'] / best['events_per_s']:.1f}x events/s, "
            f"{cheapest / n['emit_us']:.1f}x cheaper emit, "
            f"{cheapest_cpu / n['emit_cpu_us']:.1f}x cheaper emit in CPU time, "
            f"{n['events_per_cpu_s'] / best_cpu:.1f}x events per client CPU-second"
        )
    print(
        json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "runs"} for k, v in table.items()})
    )


if __name__ == "__main__":
    main()
