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

FLOWBENCH = os.environ.get("FLOWBENCH", "/work/shared/bench/bin/flowbench")
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
    raise SystemExit("flowbench sink did not start")


def run_emitter(lib: str, port: int, count: int) -> dict:
    """Runs inside a child process: emit COUNT events, close, print timings."""
    if lib.startswith("nagare"):
        from nagare_logger import Client

        c = Client(f"127.0.0.1:{port}", require_ack=(lib == "nagare-ack"))
        emit = c.emit
        tag = "bench.load"

        def close() -> None:
            if not c.close(120):
                raise SystemExit(f"nagare close timed out: {c.stats}")

        t0 = time.perf_counter()
        for i in range(count):
            emit(tag, {"seq": i, "message": MESSAGE})
        t1 = time.perf_counter()
        close()
    else:
        if lib == "fluent-sync":
            from fluent.sender import FluentSender
        else:
            from fluent.asyncsender import FluentSender
        s = FluentSender("bench", host="127.0.0.1", port=port, nanosecond_precision=True)
        emit = s.emit
        t0 = time.perf_counter()
        for i in range(count):
            emit("load", {"seq": i, "message": MESSAGE})
        t1 = time.perf_counter()
        s.close()
        if s.last_error:
            raise SystemExit(f"fluent-logger error: {s.last_error}")
    t2 = time.perf_counter()
    return {
        "emit_us": (t1 - t0) / count * 1e6,
        "events_per_s": count / (t2 - t0),
        "seconds": t2 - t0,
    }


def one_run(lib: str, count: int) -> dict:
    port = free_port()
    with tempfile.TemporaryDirectory() as td:
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
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            res = json.loads(out.stdout.strip().splitlines()[-1])
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--count", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--libs", default=",".join(LIBS))
    ap.add_argument("--child")
    ap.add_argument("--port", type=int)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_emitter(args.child, args.port, args.count)))
        return
    if not os.access(FLOWBENCH, os.X_OK):
        raise SystemExit(
            f"{FLOWBENCH} missing: "
            "cd /work/shared/bench/flowbench && go build -o ../bin/flowbench ./..."
        )
    table = {}
    for lib in args.libs.split(","):
        runs = [one_run(lib, args.count) for _ in range(args.runs)]
        for r in runs:
            if r["sink_events"] < args.count or r["missing"]:
                raise SystemExit(f"{lib}: sink got {r['sink_events']} of {args.count}: {r}")
        table[lib] = {
            "events_per_s": statistics.median(r["events_per_s"] for r in runs),
            "emit_us": statistics.median(r["emit_us"] for r in runs),
            "runs": runs,
        }
        print(
            f"{lib:13s} {table[lib]['events_per_s']:>12,.0f} ev/s   "
            f"emit {table[lib]['emit_us']:6.2f} us/call   (median of {len(runs)})",
            flush=True,
        )
    base = table.get("fluent-sync") or table.get("fluent-async")
    if base and "nagare" in table:
        best = max(v["events_per_s"] for k, v in table.items() if k.startswith("fluent"))
        print(
            f"nagare / best fluent-logger throughput: {table['nagare']['events_per_s'] / best:.1f}x"
        )
    print(
        json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "runs"} for k, v in table.items()})
    )


if __name__ == "__main__":
    main()
