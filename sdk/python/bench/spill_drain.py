#!/usr/bin/env python3
"""Spill drain rate against the in-memory send rate (issue 17: at least 0.5x).

Both sides use the same library, the same nagare (forward input -> null
output) and acks. The runs alternate (memory, spill, memory, spill, ...) so
load changes on a busy machine land on both sides.

- memory: nagare is up; COUNT events of 100-byte records are emitted, then
  close(); rate = COUNT / (first emit .. close() returned).
- spill:  nagare is down and a spill file is set, so the COUNT events go to
  the spill file; then nagare starts and close() drains the file;
  rate = COUNT / (nagare listening .. close() returned).

    NAGARE_BIN=target/release/nagare python sdk/python/bench/spill_drain.py --count 100000 --runs 3
"""

from __future__ import annotations

import argparse
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from nagare_logger import Client

REPO = pathlib.Path(__file__).resolve().parents[3]
NAGARE_BIN = os.environ.get("NAGARE_BIN", str(REPO / "target" / "release" / "nagare"))
PORT = int(os.environ.get("SUT_PORT", "40600"))


def start_nagare(tmp: pathlib.Path) -> subprocess.Popen:
    cfg = tmp / "nagare.toml"
    cfg.write_text(
        f'[[input]]\ntype = "forward"\nbind = "127.0.0.1:{PORT}"\n\n'
        '[[output]]\ntype = "null"\nmatch = "**"\n'
    )
    proc = subprocess.Popen([NAGARE_BIN, "run", "-c", str(cfg)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", PORT), 1).close()
            return proc
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                sys.exit(f"nagare does not listen on {PORT}")
            time.sleep(0.01)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(20)


def one_run(tmp: pathlib.Path, count: int, spill: bool) -> float:
    msg = "x" * 100
    path = str(tmp / "drain.spill")
    if not spill:
        proc = start_nagare(tmp)
        c = Client(f"127.0.0.1:{PORT}", require_ack=True)
        t0 = time.perf_counter()
        for i in range(count):
            c.emit("bench", {"seq": i, "message": msg})
        assert c.close(120)
        rate = count / (time.perf_counter() - t0)
    else:
        c = Client(f"127.0.0.1:{PORT}", require_ack=True, spill_path=path, backoff_max=0.5)
        for i in range(count):
            c.emit("bench", {"seq": i, "message": msg})
        while c.stats.spilled < count:  # the outage spill moves them to the file
            time.sleep(0.01)
        proc = start_nagare(tmp)
        t0 = time.perf_counter()
        assert c.close(120)
        rate = count / (time.perf_counter() - t0)
    stop(proc)
    return rate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rates: dict[str, list[float]] = {"memory": [], "spill": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            for mode in ("memory", "spill"):
                rates[mode].append(one_run(pathlib.Path(tmp), args.count, mode == "spill"))
    mem, sp = statistics.median(rates["memory"]), statistics.median(rates["spill"])
    print(f"memory: {mem:,.0f} events/s  (runs {[round(r) for r in rates['memory']]})")
    print(f"spill drain: {sp:,.0f} events/s  (runs {[round(r) for r in rates['spill']]})")
    print(f"spill / memory: {sp / mem:.2f}")


if __name__ == "__main__":
    main()
