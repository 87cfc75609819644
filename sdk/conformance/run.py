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
import concurrent.futures
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


# Every port this run handed out. A scenario's server port is free while its
# server is down (before it starts, during an outage); the kernel may hand the
# same port to another scenario running in parallel, whose nagare would then
# take this scenario's events (counted under the other's server: lost here,
# with close() true). Each port goes to one scenario per run.
_PORTS_GIVEN: set[int] = set()
_PORTS_LOCK = threading.Lock()


def free_port() -> int:
    """A loopback port nothing listens on now, never given out before in this run."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with _PORTS_LOCK:
            if port not in _PORTS_GIVEN:
                _PORTS_GIVEN.add(port)
                return port


def seq_of(record: dict) -> int:
    """The event's seq: a field, or (logging integrations that keep only the
    message) the N of the message "seq N"."""
    if "seq" in record:
        return int(record["seq"])
    message = record.get("message", record.get("msg", ""))
    return int(message.removeprefix("seq "))


class Seen:
    """The events (tag, seq) servers printed, counted; several servers may share one."""

    def __init__(self) -> None:
        self.counts: collections.Counter[tuple[str, int]] = collections.Counter()
        self.lock = threading.Lock()

    def add(self, tag: str, seq: int) -> None:
        with self.lock:
            self.counts[(tag, seq)] += 1

    def count(self, tag: str) -> tuple[int, int]:
        """(distinct events, duplicates) seen with this tag."""
        with self.lock:
            mine = [n for (t, _), n in self.counts.items() if t == tag]
        return len(mine), sum(n - 1 for n in mine)

    def missing(self, tag: str, n: int) -> str:
        """The seqs below n not seen with this tag, as ranges ("12-40, 97"), at most 5."""
        with self.lock:
            got = {s for (t, s) in self.counts if t == tag}
        ranges: list[str] = []
        start = None
        for s in range(n + 1):
            if s < n and s not in got:
                start = s if start is None else start
            elif start is not None:
                ranges.append(str(start) if start == s - 1 else f"{start}-{s - 1}")
                start = None
        more = f" (+{len(ranges) - 5} more)" if len(ranges) > 5 else ""
        return ", ".join(ranges[:5]) + more


class Nagare:
    """nagare with a forward input (on `port`, or a UNIX socket at `unix_path`)
    and a stdout output; collects the events it prints (tag, seq) across
    restarts into `seen`. With `file_buffer` the output buffers in files under
    the work directory, so what it acknowledged survives a kill -9."""

    def __init__(
        self,
        port: int,
        workdir: pathlib.Path,
        *,
        seen: Seen | None = None,
        unix_path: pathlib.Path | None = None,
        file_buffer: bool = False,
    ):
        if not (NAGARE_BIN.is_file() and os.access(NAGARE_BIN, os.X_OK)):
            sys.exit(
                f"nagare binary not found at {NAGARE_BIN}: "
                "cargo build --release -p nagare, or set NAGARE_BIN"
            )
        self.port = port
        self.unix_path = unix_path
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / f"nagare-{port}.toml"
        listen = f'path = "{unix_path}"' if unix_path else f'bind = "127.0.0.1:{port}"'
        buffer = (
            f'[output.buffer]\ntype = "file"\npath = "{workdir / f"buffer-{port}"}"\n'
            if file_buffer
            else ""
        )
        self.config.write_text(
            f'[[input]]\ntype = "forward"\n{listen}\n\n'
            f'[[output]]\ntype = "stdout"\nmatch = "**"\nformat = "json"\n{buffer}'
        )
        self.seen = seen or Seen()
        self.proc: subprocess.Popen | None = None
        self.reader: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"unix://{self.unix_path}" if self.unix_path else f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(NAGARE_BIN), "run", "-c", str(self.config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self.reader.start()
        deadline = time.monotonic() + 20
        while True:
            try:
                if self.unix_path:
                    with socket.socket(socket.AF_UNIX) as s:
                        s.connect(str(self.unix_path))
                else:
                    socket.create_connection(("127.0.0.1", self.port), 1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nagare does not listen on {self.address}") from None
                time.sleep(0.02)

    def _read(self, proc: subprocess.Popen) -> None:
        for raw in proc.stdout:
            try:
                ev = json.loads(raw)
            except ValueError:
                continue  # the line a kill -9 cut short: that batch is printed again after restart
            self.seen.add(ev["tag"], seq_of(ev["record"]))

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stops nagare (SIGTERM: it prints what it received before it exits) and
        reads its output to the end."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.reader is not None:
            self.reader.join(30)
        self.proc = None
        self.reader = None

    def count(self, tag: str) -> tuple[int, int]:
        return self.seen.count(tag)

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
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
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
# Each returns (emitted, close reply, stats after close); the runner checks
# what arrived. `ctx` holds what a scenario needs beyond its driver and server.

# the long_outage scenario's outage (--outage-s): 60 s as the issue says; CI
# passes a shorter one. The scenario's maximum reconnect delay is half the
# outage (at most the shared default, 30 s), so the client is waiting out its
# longest delay when the server comes back.
OUTAGE_S = 60.0

# what every buffer-full scenario sets: a small memory buffer
SMALL_BUFFER = 64 * 1024


class Ctx:
    def __init__(self, cmd: list[str], workdir: pathlib.Path, tag: str, seen: Seen):
        self.cmd = cmd
        self.workdir = workdir
        self.tag = tag
        self.seen = seen
        self.drivers: list[Driver] = []
        self.servers: list[Nagare] = []
        self.procs: list[subprocess.Popen] = []  # helpers (socat), killed at the end
        # events the scenario expects to be dropped (overflow "drop"): set by it
        self.may_drop = False

    def driver(self) -> Driver:
        d = Driver(self.cmd)
        self.drivers.append(d)
        return d

    def server(self, **kw) -> Nagare:
        """Another nagare printing into the same `seen`."""
        srv = Nagare(free_port(), self.workdir, seen=self.seen, **kw)
        self.servers.append(srv)
        return srv


def wait_connect_failure(d: Driver, before: int, timeout: float = 20) -> None:
    """Waits until the client reports a refused connection attempt after `before`
    (it found the server gone and is in its backoff)."""
    deadline = time.monotonic() + timeout
    while d.call("stats")["connect_failures"] <= before:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no refused connection attempt within {timeout} s")
        time.sleep(0.02)


# After close(): the most the runner waits for what is on its way to the
# servers, and (UNIX socket servers, whose connections it cannot see) how long
# the count may stand still before it stops waiting.
SETTLE_MAX_S = 120.0
SETTLE_S = 10.0


def open_connections(port: int) -> int:
    """Connections to 127.0.0.1:port that the server has not finished with
    (established, closed by the client but not yet by the server, or still in
    the listen queue), from /proc/net/tcp."""
    n = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, state = fields[1], fields[3]
            if int(local.rsplit(":", 1)[1], 16) == port and state in ("01", "03", "08"):
                n += 1
    return n


def wait_settled(ctx: Ctx, tag: str, n: int) -> None:
    """Waits until n events of tag arrived, or every server finished with
    every connection (it read all the clients sent: they closed them at
    close()). Without acks close() is true once all was written to the socket,
    maybe before the server even accepted the connection on a loaded machine:
    stopping the server then would lose what is on its way."""
    start = last_change = time.monotonic()
    last = -1
    tcp = [s.port for s in ctx.servers if s.proc is not None and s.unix_path is None]
    unix = any(s.proc is not None and s.unix_path is not None for s in ctx.servers)
    while True:
        got = ctx.seen.count(tag)[0]
        now = time.monotonic()
        if got != last:
            last, last_change = got, now
        if got >= n or now - start > SETTLE_MAX_S:
            return
        if not unix and all(open_connections(p) == 0 for p in tcp):
            return
        if unix and now - last_change > SETTLE_S:
            return
        time.sleep(0.05)


def arrived_or_fail(srv: Nagare, tag: str, n: int, what: str) -> None:
    if not srv.wait_for(tag, n, 20):
        raise RuntimeError(f"{what}: {srv.count(tag)[0]} of {n} events arrived within 20 s")


def steady(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """Server up the whole time: everything arrives once, close() says so."""
    srv.start()
    d.call("configure " + json.dumps(cfg))
    d.call(f"emit {tag} 2000")
    closed = d.call("close 10000")
    return 2000, closed, d.call("stats")


def down_at_start(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """No server when the events are emitted; it comes up once the client failed
    to connect."""
    d.call("configure " + json.dumps(cfg))
    d.call(f"emit {tag} 1000")
    wait_connect_failure(d, 0)
    srv.start()
    closed = d.call("close 10000")
    return 1000, closed, d.call("stats")


def close_after_long_backoff(
    d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx
) -> tuple[int, dict, dict]:
    """The server goes away and comes back while the client waits out a long
    backoff delay (10-25 s); close(5 s) must reconnect at once."""
    srv.start()
    d.call("configure " + json.dumps({**cfg, "backoff_base_ms": 20_000, "backoff_max_ms": 30_000}))
    d.call(f"emit {tag} 500")
    arrived_or_fail(srv, tag, 500, "the first 500")
    before = d.call("stats")["connect_failures"]
    srv.stop()
    d.call(f"emit {tag} 500")
    # the client found the server gone and failed to reconnect: in its backoff
    # now (some libraries wait out one 15-25 s delay before the first attempt)
    wait_connect_failure(d, before, timeout=40)
    srv.start()
    closed = d.call("close 5000")
    return 1000, closed, d.call("stats")


def long_outage(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """Server down for OUTAGE_S (the outage itself is the scenario, not a wait
    for something), then up, then close() with its default timeout (10 s)."""
    backoff_max = min(30_000, int(OUTAGE_S * 1000) // 2)
    srv.start()
    d.call(
        "configure " + json.dumps({**cfg, "backoff_base_ms": 100, "backoff_max_ms": backoff_max})
    )
    d.call(f"emit {tag} 500")
    arrived_or_fail(srv, tag, 500, "the first 500")
    srv.stop()
    d.call(f"emit {tag} 500")
    time.sleep(OUTAGE_S)
    srv.start()
    closed = d.call("close 10000")
    return 1000, closed, d.call("stats")


def server_kill9(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """With acks, nagare (file buffer) is killed with -9 mid-stream and restarted:
    every event arrives (at least once)."""
    srv = ctx.server(file_buffer=True)
    cfg = {**cfg, "servers": [srv.address], "require_ack": True}
    srv.start()
    d.call("configure " + json.dumps(cfg))
    d.call(f"emit {tag} 2000")
    arrived_or_fail(srv, tag, 1, "the first event")
    before = d.call("stats")["connect_failures"]
    srv.stop(signal.SIGKILL)
    d.call(f"emit {tag} 1000")
    wait_connect_failure(d, before)
    srv.start()
    d.call(f"emit {tag} 1000")
    closed = d.call("close 10000")
    return 4000, closed, d.call("stats")


def failover(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """Two servers, the primary down: the client sends to the secondary, which is
    killed with -9 mid-stream; the primary comes up. With acks, every event
    arrives (at least once) at one of them (the secondary restarted after
    close() delivers what it acknowledged before the kill)."""
    primary = ctx.server(file_buffer=True)
    secondary = ctx.server(file_buffer=True)
    cfg = {**cfg, "servers": [primary.address, secondary.address], "require_ack": True}
    secondary.start()
    d.call("configure " + json.dumps(cfg))
    d.call(f"emit {tag} 2000")
    arrived_or_fail(secondary, tag, 1, "the first event at the secondary")
    before = d.call("stats")["connect_failures"]
    secondary.stop(signal.SIGKILL)
    d.call(f"emit {tag} 1000")
    wait_connect_failure(d, before)
    primary.start()
    d.call(f"emit {tag} 1000")
    closed = d.call("close 10000")
    # what the secondary acknowledged is in its file buffer, not all printed
    # yet: it delivers it when it runs again
    secondary.start()
    return 4000, closed, d.call("stats")


def overflow_drop(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """Server down, a 64 KiB buffer, overflow "drop": 20,000 events, some dropped
    (counted); the server comes up; every event not dropped arrives."""
    ctx.may_drop = True
    d.call("configure " + json.dumps({**cfg, "buffer_bytes": SMALL_BUFFER, "overflow": "drop"}))
    accepted = d.call(f"emit {tag} 20000")["accepted"]
    if accepted >= 20000:
        raise RuntimeError("nothing dropped: the buffer did not fill")
    srv.start()
    closed = d.call("close 10000")
    return 20000, closed, d.call("stats")


def overflow_block(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """Server up, a 64 KiB buffer, overflow "block": emitting 20,000 events waits
    for room; all arrive."""
    srv.start()
    d.call("configure " + json.dumps({**cfg, "buffer_bytes": SMALL_BUFFER, "overflow": "block"}))
    d.call(f"emit {tag} 20000", timeout=120)
    closed = d.call("close 10000")
    return 20000, closed, d.call("stats")


def overflow_spill(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """Server down, a 64 KiB buffer, overflow "spill" with a spill file: 20,000
    events; the server comes up; all arrive."""
    spill = str(ctx.workdir / f"{tag}.spill")
    d.call(
        "configure "
        + json.dumps(
            {
                **cfg,
                "buffer_bytes": SMALL_BUFFER,
                "overflow": "spill",
                "spill_path": spill,
            }
        )
    )
    d.call(f"emit {tag} 20000")
    srv.start()
    closed = d.call("close 10000")
    return 20000, closed, d.call("stats")


def unix_socket(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """nagare on a UNIX socket: everything arrives once."""
    srv = ctx.server(unix_path=ctx.workdir / "forward.sock")
    srv.start()
    d.call("configure " + json.dumps({**cfg, "servers": [srv.address]}))
    d.call(f"emit {tag} 2000")
    closed = d.call("close 10000")
    return 2000, closed, d.call("stats")


def make_tls_certs(workdir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it, with openssl:
    (ca.pem, server.pem, server.key)."""
    ca, ca_key = workdir / "ca.pem", workdir / "ca.key"
    crt, key, csr, ext = (workdir / n for n in ("server.pem", "server.key", "server.csr", "ext"))
    ext.write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for cmd in (
        ["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "1", "-subj", "/CN=conf-ca"],
        ["req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial"]
        + ["-out", crt, "-days", "1", "-extfile", ext],
    ):
        subprocess.run(["openssl", *map(str, cmd)], check=True, capture_output=True)
    return ca, crt, key


def tls(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """TLS: nagare's forward input has no TLS, so socat terminates it in front
    of nagare (a certificate for 127.0.0.1 from a CA the client trusts);
    2,000 events arrive once."""
    ca, crt, key = make_tls_certs(ctx.workdir)
    srv.start()
    port = free_port()
    socat = subprocess.Popen(
        [
            "socat",
            f"OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={crt},key={key},verify=0",
            f"TCP:127.0.0.1:{srv.port}",
        ],
        stderr=subprocess.DEVNULL,
    )
    ctx.procs.append(socat)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            break
        except OSError:
            if socat.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("socat does not listen") from None
            time.sleep(0.02)
    d.call("configure " + json.dumps({**cfg, "servers": [f"127.0.0.1:{port}"], "tls_ca": str(ca)}))
    d.call(f"emit {tag} 2000")
    closed = d.call("close 10000")
    return 2000, closed, d.call("stats")


def logging_integration(
    d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx
) -> tuple[int, dict, dict]:
    """1,000 log records through the library's logging integration (Python
    logging, Go slog, Java java.util.logging, TypeScript winston, Rust tracing),
    message "seq N"; close(10 s): all arrive once."""
    srv.start()
    d.call("configure " + json.dumps(cfg))
    d.call(f"log {tag} 1000")
    closed = d.call("close 10000")
    return 1000, closed, d.call("stats")


def logging_logback(
    d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx
) -> tuple[int, dict, dict]:
    """(Java) 1,000 records through the Logback appender around the driver's logger,
    message "seq N"; close(10 s): all arrive once."""
    srv.start()
    d.call("configure " + json.dumps(cfg))
    d.call(f"log {tag} 1000 logback")
    closed = d.call("close 10000")
    return 1000, closed, d.call("stats")


def logging_pino(d: Driver, srv: Nagare, tag: str, cfg: dict, ctx: Ctx) -> tuple[int, dict, dict]:
    """(TypeScript) 1,000 records through the pino transport, in pino's worker thread
    with a client of its own (the driver's options); ending the stream closes it.
    All arrive once; its close() result and counters stay in the worker (n/a)."""
    srv.start()
    d.call("configure " + json.dumps(cfg))
    d.call(f"log {tag} 1000 pino")
    closed = d.call("close 10000")
    return 1000, closed, {"unavailable": True}


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
    # the new client's counters cover the 2,000 it found in the file
    return 2000, closed, d2.call("stats")


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
    "long_outage": long_outage,
    "server_kill9": server_kill9,
    "failover": failover,
    "overflow_drop": overflow_drop,
    "overflow_block": overflow_block,
    "overflow_spill": overflow_spill,
    "unix_socket": unix_socket,
    "tls": tls,
    "logging": logging_integration,
    "logging_logback": logging_logback,
    "logging_pino": logging_pino,
    "kill_during_outage": kill_during_outage,
    "fork": fork,
}

# Scenarios that need something only some languages have.
ONLY_FOR = {
    "fork": {"python"},
    "logging": {"python", "go", "java", "typescript", "rust"},
    "logging_logback": {"java"},
    "logging_pino": {"typescript"},
}

# Scenarios only some READMEs promise; for the others a loss is reported
# ("not promised") without failing the run.
PROMISED_BY: dict[str, set[str]] = {}

# Scenarios with acks across a killed server: at least once, so a duplicate is
# reported, not a failure (nagare prints a batch again when it was killed
# after printing and before marking it done).
AT_LEAST_ONCE = {"server_kill9", "failover"}


def run_one(sdk: str, cmd: list[str], name: str, workdir: pathlib.Path) -> dict:
    tag = f"conf.{sdk}.{name}"
    workdir = workdir / f"{sdk}-{name}"
    workdir.mkdir(parents=True, exist_ok=True)
    seen = Seen()
    srv = Nagare(free_port(), workdir, seen=seen)
    cfg = {"servers": [srv.address], "backoff_base_ms": 100, "backoff_max_ms": 2000}
    row = {"sdk": sdk, "scenario": name}
    if sdk not in ONLY_FOR.get(name, {sdk}):
        row["result"] = "n/a"
        return row
    t0 = time.monotonic()
    ctx = Ctx(cmd, workdir, tag, seen)
    ctx.servers.append(srv)
    try:
        d = ctx.driver()
        emitted, closed, stats = SCENARIOS[name](d, srv, tag, cfg, ctx)
        counted = not stats.get("unavailable")
        dropped = stats["dropped"] if counted else 0
        expected = emitted - dropped if ctx.may_drop else emitted
        # Once the servers have everything the clients sent (wait_settled),
        # SIGTERM makes each deliver what it holds and exit, and its output is
        # read to the end: the count is final (late duplicates too), and no
        # fixed wait that a loaded machine outlasts decides it.
        wait_settled(ctx, tag, expected)
        for s in ctx.servers:
            s.stop(signal.SIGTERM)
        arrived, dup = seen.count(tag)
        row.update(
            emitted=emitted,
            arrived=arrived,
            dup=dup,
            close="n/a" if closed["closed"] is None else closed["closed"],
            close_ms=closed["ms"],
        )
        row["counters"] = (
            f"{stats['sent']}+{stats['dropped']}+{stats['kept']}" if counted else "n/a"
        )
        problems = []
        # every scenario has the server listening before close()'s deadline:
        # each README promises delivery of every event it did not drop on purpose
        if arrived < expected:
            gone = "" if ctx.may_drop else f" (seq {seen.missing(tag, emitted)})"
            problems.append(f"lost {expected - arrived}{gone}")
        if dropped and not ctx.may_drop:
            problems.append(f"dropped {dropped}")
        if dup and name not in AT_LEAST_ONCE:
            problems.append(f"{dup} duplicated")
        # close() is true only when it left nothing undelivered (drops on
        # purpose, at emit, count in some libraries and not in others); null:
        # the result is not visible to the driver (pino's worker)
        if closed["closed"] is False and not ctx.may_drop:
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
        for s in ctx.servers:
            s.stop(signal.SIGKILL)
        for p in ctx.procs:
            p.kill()
            p.wait()
    row["s"] = round(time.monotonic() - t0, 1)
    return row


def run_sdk(
    sdk: str, cmd: list[str], names: list[str], workdir: pathlib.Path, repeat: int = 1
) -> list[dict]:
    rows = []
    for rep in range(repeat):
        # each repetition in a directory of its own (spill files, nagare's output)
        wd = workdir / f"rep{rep}" if repeat > 1 else workdir
        for name in names:
            row = run_one(sdk, cmd, name, wd)
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    return rows


def main() -> int:
    global OUTAGE_S
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    drivers = driver_commands()
    ap.add_argument(
        "--sdk",
        default=",".join(drivers),
        help="comma-separated: " + ", ".join(drivers),
    )
    ap.add_argument(
        "--scenario",
        default=",".join(SCENARIOS),
        help="comma-separated: " + ", ".join(SCENARIOS),
    )
    ap.add_argument(
        "--outage-s",
        type=float,
        default=OUTAGE_S,
        help="long_outage: how long the server is down (default 60; the scenario's "
        "maximum reconnect delay is half of it, at most 30 s)",
    )
    ap.add_argument("--jobs", type=int, default=3, help="SDKs run in parallel (default 3)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the scenarios this many times (to catch an intermittent loss)",
    )
    args = ap.parse_args()
    OUTAGE_S = args.outage_s
    sdks = args.sdk.split(",")
    names = args.scenario.split(",")
    t0 = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="nagare-conformance-") as tmp,
        concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool,
    ):
        futures = [
            pool.submit(run_sdk, sdk, drivers[sdk], names, pathlib.Path(tmp), args.repeat)
            for sdk in sdks
        ]
        rows = [row for f in futures for row in f.result()]
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
    print(f"{time.monotonic() - t0:.0f} s with {args.jobs} SDKs in parallel")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
