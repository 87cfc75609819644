#!/usr/bin/env python3
"""Spill drain rate against the in-memory send rate, for every SDK (issue 17's
bar: drain at least 0.5x the library's in-memory send rate).

It drives each SDK through its conformance driver (built by ci.sh), so all six
are measured the same way: the same library on both sides, the same nagare
(forward input -> null output), acks on. The runs alternate run by run
(memory, spill, memory, spill, ...) so load changes on a busy machine land on
both sides.

- memory: nagare is up; `emit bench N` then `close`; rate = N / (emit sent ..
  close() returned).
- spill: nagare is down and a spill file is set; `emit bench N`; once `stats`
  says all N are in the spill file, nagare starts and `close` drains the file;
  rate = N / (nagare listening .. close() returned).

The events are the drivers' `{"seq": k}` records (small: the per-frame and
per-event costs show, not the bytes). It prints one line per SDK with the two
medians and their ratio. A measurement, not a test: it asserts no speed, but
fails when a run loses events (close() false or counters short).

    python3 sdk/conformance/drain_bench.py --count 100000 --runs 3
    python3 sdk/conformance/drain_bench.py --sdk go,rust --count 20000 --runs 1
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import run  # the conformance runner: drivers and the nagare wrapper

# SUT_PORT: a fixed port for nagare (benchmarks use their helper's range);
# otherwise a free one per run
PORT = int(os.environ["SUT_PORT"]) if os.environ.get("SUT_PORT") else None


def nagare(workdir: pathlib.Path) -> run.Nagare:
    """nagare with a forward input and a null output (nothing to read back)."""
    srv = run.Nagare(PORT or run.free_port(), workdir)
    srv.config.write_text(
        f'[[input]]\ntype = "forward"\nbind = "127.0.0.1:{srv.port}"\n\n'
        '[[output]]\ntype = "null"\nmatch = "**"\n'
    )
    return srv


def check(close: dict, stats: dict, count: int, what: str) -> None:
    if not close["closed"] or stats.get("sent", count) != count:
        raise RuntimeError(f"{what}: close() {close}, stats {stats}: events lost")


def one_run(cmd: list[str], workdir: pathlib.Path, count: int, spill: bool) -> float:
    srv = nagare(workdir)
    cfg = {
        "servers": [f"127.0.0.1:{srv.port}"],
        "require_ack": True,
        "backoff_base_ms": 50,
        "backoff_max_ms": 200,
    }
    d = run.Driver(cmd)
    try:
        if not spill:
            srv.start()
            d.call("configure " + json.dumps(cfg))
            t0 = time.perf_counter()
            d.call(f"emit bench {count}", timeout=300)
            closed = d.call("close 300000", timeout=310)
            elapsed = time.perf_counter() - t0
        else:
            path = workdir / "drain.spill"
            path.unlink(missing_ok=True)
            d.call("configure " + json.dumps({**cfg, "spill_path": str(path)}))
            d.call(f"emit bench {count}", timeout=300)
            deadline = time.monotonic() + 120
            while d.call("stats")["kept"] < count:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"spill: not all {count} events on disk within 120 s")
                time.sleep(0.02)
            srv.start()
            t0 = time.perf_counter()
            closed = d.call("close 300000", timeout=310)
            elapsed = time.perf_counter() - t0
        check(closed, d.call("stats"), count, "spill" if spill else "memory")
        return count / elapsed
    finally:
        d.quit()
        srv.stop()


def main() -> int:
    drivers = run.driver_commands()
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sdk",
        default=",".join(drivers),
        help="comma-separated: " + ", ".join(drivers),
    )
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    print("| SDK | memory events/s | spill drain events/s | drain / memory |")
    print("| --- | ---: | ---: | ---: |", flush=True)
    with tempfile.TemporaryDirectory(prefix="nagare-drain-bench-") as tmp:
        for sdk in args.sdk.split(","):
            rates: dict[str, list[float]] = {"memory": [], "spill": []}
            for _ in range(args.runs):
                for mode in ("memory", "spill"):
                    rates[mode].append(
                        one_run(drivers[sdk], pathlib.Path(tmp), args.count, mode == "spill")
                    )
            mem, sp = (
                statistics.median(rates["memory"]),
                statistics.median(rates["spill"]),
            )
            print(f"| {sdk} | {mem:,.0f} | {sp:,.0f} | {sp / mem:.2f} |", flush=True)
            print(
                f"  runs: memory {[round(r) for r in rates['memory']]}, "
                f"spill {[round(r) for r in rates['spill']]}",
                file=sys.stderr,
                flush=True,
            )
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
