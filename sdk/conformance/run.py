#!/usr/bin/env python3
"""Runs the conformance scenarios against every SDK's driver, with the real
nagare binary as the server, and prints a table SDK x scenario.

Exit status 1 when any scenario lost an event the SDK's README promises to
keep, duplicated one, got a wrong close() result, or when its counters do not
add up. The protocol and the scenarios are described in README.md.

    python3 sdk/conformance/run.py                 # every driver, every scenario
    python3 sdk/conformance/run.py --sdk python,go --scenario steady
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
NAGARE_BIN = pathlib.Path(os.environ.get("NAGARE_BIN", REPO / "target" / "release" / "nagare"))
# where ci.sh puts the compiled drivers
BUILD = pathlib.Path(os.environ.get("CONFORMANCE_BUILD", REPO / "target" / "conformance"))


def driver_commands() -> dict[str, list[str]]:
    """How to start each SDK's driver (ci.sh builds the compiled ones)."""
    java_cp = BUILD / "java-classpath.txt"
    return {
        "python": [
            str(REPO / "sdk/python/.venv/bin/python"),
            str(HERE / "drivers/python_driver.py"),
        ],
        "go": [str(BUILD / "go-driver")],
        "typescript": ["node", str(HERE / "drivers/typescript_driver.js")],
        "java": [
            "java",
            "-cp",
            java_cp.read_text().strip() if java_cp.exists() else "(not built)",
            "dev.nagare.logger.ConformanceDriver",
        ],
        "rust": [str(REPO / "target/debug/examples/conformance_driver")],
        "c": [str(BUILD / "c-driver")],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nagare:
    """nagare with a forward input on `port` and a stdout output; collects the
    events it prints (tag, seq) across restarts."""

    def __init__(self, port: int, workdir: pathlib.Path):
        if not (NAGARE_BIN.is_file() and os.access(NAGARE_BIN, os.X_OK)):
            sys.exit(
                f"nagare binary not found at {NAGARE_BIN}: "
                "cargo build --release -p nagare, or set NAGARE_BIN"
            )
        self.port = port
        self.config = workdir / "nagare.toml"
        self.config.write_text(
            f'[[input]]\ntype = "forward"\nbind = "127.0.0.1:{port}"\n\n'
            '[[output]]\ntype = "stdout"\nmatch = "**"\nformat = "json"\n'
        )
        self.seen: collections.Counter[tuple[str, int]] = collections.Counter()
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(NAGARE_BIN), "run", "-c", str(self.config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nagare does not listen on 127.0.0.1:{self.port}") from None
                time.sleep(0.02)

    def _read(self, proc: subprocess.Popen) -> None:
        for raw in proc.stdout:
            ev = json.loads(raw)
            with self.lock:
                self.seen[(ev["tag"], ev["record"]["seq"])] += 1

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(20)
        self.proc = None

    def count(self, tag: str) -> tuple[int, int]:
        """(distinct events, duplicates) seen with this tag."""
        with self.lock:
            mine = [n for (t, _), n in self.seen.items() if t == tag]
        return len(mine), sum(n - 1 for n in mine)

    def wait_for(self, tag: str, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.count(tag)[0] < n:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True


class Driver:
    """One SDK driver process: a command per line in, one JSON reply per line out."""

    def __init__(self, cmd: list[str]):
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def call(self, line: str, timeout: float = 60) -> dict:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise RuntimeError(f"driver gave no answer to {line!r} within {timeout} s")
        reply = self.proc.stdout.readline()
        if not reply:
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            raise RuntimeError(f"driver exited on {line!r}: {err.strip()[-500:]}")
        out = json.loads(reply)
        if "error" in out:
            raise RuntimeError(f"driver: {line.split(maxsplit=1)[0]}: {out['error']}")
        return out

    def quit(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------- scenarios
# Each returns (emitted, close reply, stats); the runner checks what arrived.
# `ctx` holds what a scenario needs beyond the first driver: a way to start
# another one (after a kill -9) and a private directory.


class Ctx:
    def __init__(self, cmd: list[str], workdir: pathlib.Path):
        self.cmd = cmd
        self.workdir = workdir
        self.drivers: list[Driver] = []

    def driver(self) -> Driver:
        d = Driver(self.cmd)
        self.drivers.append(d)
        return d


def steady(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """Server up the whole time: everything arrives once, close() says so."""
    srv.start()
    d.call("configure " + json.dumps(cfg))
    d.call(f"emit {tag} 2000")
    closed = d.call("close 10000")
    return 2000, closed, d.call("stats")


def down_at_start(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """No server when the events are emitted; it comes up a second later."""
    d.call("configure " + json.dumps(cfg))
    d.call(f"emit {tag} 1000")
    time.sleep(1.0)  # the outage: the client retries meanwhile
    srv.start()
    closed = d.call("close 10000")
    return 1000, closed, d.call("stats")


def close_after_long_backoff(
    d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx
) -> tuple[int, dict, dict]:
    """The server goes away and comes back while the client waits out a long
    backoff delay (10-20 s); close(5 s) must reconnect at once."""
    srv.start()
    d.call("configure " + json.dumps({**cfg, "backoff_base_ms": 20_000, "backoff_max_ms": 30_000}))
    d.call(f"emit {tag} 500")
    if not srv.wait_for(tag, 500, 20):
        raise RuntimeError("the first 500 events did not arrive")
    srv.stop()
    d.call(f"emit {tag} 500")
    time.sleep(1.5)  # the client finds the server gone and starts its backoff
    srv.start()
    closed = d.call("close 5000")
    return 1000, closed, d.call("stats")


def kill_during_outage(
    d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx
) -> tuple[int, dict, dict]:
    """Server down, spill file configured: 2,000 events, then kill -9 of the
    application. The next run on that spill file sends them."""
    spill = str(ctx.workdir / f"{tag}.spill")
    d.call("configure " + json.dumps({**cfg, "spill_path": spill}))
    d.call(f"emit {tag} 2000")
    # wait (with a deadline) until the library says the events are in the file
    deadline = time.monotonic() + 10
    while d.call("stats")["kept"] < 2000 and time.monotonic() < deadline:
        time.sleep(0.05)
    d.proc.kill()
    d.proc.wait()
    srv.start()
    d2 = ctx.driver()
    d2.call("configure " + json.dumps({**cfg, "spill_path": spill}))
    closed = d2.call("close 10000")
    return 2000, closed, {"unavailable": True}


def fork(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """The application forks while its client is connecting; the child
    emits 1,000 events and closes. (The parent's events use another tag.)"""
    srv.start()
    d.call("configure " + json.dumps(cfg))
    d.call(f"emit {tag}.parent 1")  # starts the sender: it is connecting now
    child = d.call(f"fork {tag} 1000")
    if not child["child_ok"]:
        raise RuntimeError("the child's emit or close() failed")
    closed = d.call("close 10000")
    return 1000, closed, {"unavailable": True}


SCENARIOS = {
    "steady": steady,
    "down_at_start": down_at_start,
    "close_after_long_backoff": close_after_long_backoff,
    "kill_during_outage": kill_during_outage,
    "fork": fork,
}

# Scenarios that need something only some languages have.
ONLY_FOR = {"fork": {"python"}}

# Scenarios only some READMEs promise; for the others a loss is reported
# ("not promised") without failing the run.
PROMISED_BY: dict[str, set[str]] = {}


def run_one(sdk: str, cmd: list[str], name: str, workdir: pathlib.Path) -> dict:
    tag = f"conf.{sdk}.{name}"
    srv = Nagare(free_port(), workdir)
    cfg = {"servers": [f"127.0.0.1:{srv.port}"], "backoff_base_ms": 100, "backoff_max_ms": 2000}
    row = {"sdk": sdk, "scenario": name}
    if sdk not in ONLY_FOR.get(name, {sdk}):
        row["result"] = "n/a"
        return row
    t0 = time.monotonic()
    ctx = Ctx(cmd, workdir)
    try:
        d = ctx.driver()
        emitted, closed, stats = SCENARIOS[name](d, srv, tag, cfg, ctx)
        srv.wait_for(tag, emitted, 10)
        arrived, dup = srv.count(tag)
        row.update(
            emitted=emitted, arrived=arrived, dup=dup, close=closed["closed"], close_ms=closed["ms"]
        )
        # the C library frees the client in close(): no counters after it
        counted = not stats.get("unavailable")
        row["counters"] = (
            f"{stats['sent']}+{stats['dropped']}+{stats['kept']}" if counted else "n/a"
        )
        problems = []
        # every scenario here has the server listening before close()'s
        # deadline: each README promises delivery of all events
        if arrived < emitted:
            problems.append(f"lost {emitted - arrived}")
        if dup:
            problems.append(f"{dup} duplicated")
        if not closed["closed"]:
            problems.append("close() said undelivered")
        if counted and stats["sent"] + stats["dropped"] + stats["kept"] != emitted:
            problems.append("counters do not add up")
        if problems and sdk not in PROMISED_BY.get(name, {sdk}):
            row["result"] = "not promised: " + "; ".join(problems)
        else:
            row["result"] = "; ".join(problems) or "ok"
    except (RuntimeError, OSError, KeyError, ValueError) as e:
        row["result"] = f"error: {e}"
    finally:
        for d in ctx.drivers:
            d.quit()
        srv.stop(signal.SIGKILL)
    row["s"] = round(time.monotonic() - t0, 1)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    drivers = driver_commands()
    ap.add_argument(
        "--sdk", default=",".join(drivers), help="comma-separated: " + ", ".join(drivers)
    )
    ap.add_argument(
        "--scenario", default=",".join(SCENARIOS), help="comma-separated: " + ", ".join(SCENARIOS)
    )
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="nagare-conformance-") as tmp:
        for sdk in args.sdk.split(","):
            for name in args.scenario.split(","):
                row = run_one(sdk, drivers[sdk], name, pathlib.Path(tmp))
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    cols = [
        "sdk",
        "scenario",
        "emitted",
        "arrived",
        "dup",
        "close",
        "close_ms",
        "counters",
        "s",
        "result",
    ]
    print("| " + " | ".join(cols) + " |")
    print("|" + " --- |" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    failed = [
        r
        for r in rows
        if r["result"] not in ("ok", "n/a") and not r["result"].startswith("not promised")
    ]
    print(f"\n{len(rows) - len(failed)} of {len(rows)} passed (or not promised)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
