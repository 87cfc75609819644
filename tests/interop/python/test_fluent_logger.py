"""Interop: the PyPI `fluent-logger` client (sender and asyncsender) sends
into nagare, and every event arrives.

Runs target/release/nagare (NAGARE_BIN overrides) on free loopback ports
with a file output, sends N events through the client and checks that the
file holds each seq exactly once under the right tag.
"""

import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from fluent import asyncsender, sender

ROOT = Path(__file__).resolve().parents[3]
NAGARE = os.environ.get("NAGARE_BIN", str(ROOT / "target" / "release" / "nagare"))
WAIT = 20.0
N = 2000


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, cond, timeout=WAIT):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Nagare:
    def __init__(self, workdir):
        self.port = free_port()
        self.out = Path(workdir) / "events.log"
        self.config = Path(workdir) / "nagare.toml"
        self.config.write_text(
            f"""
[[input]]
type = "forward"
bind = "127.0.0.1:{self.port}"

[[output]]
type = "file"
match = "**"
path = "{self.out}"
[output.buffer]
flush_interval = "50ms"
"""
        )
        self.stderr = open(Path(workdir) / "nagare.stderr", "w+b")
        self.proc = subprocess.Popen(
            [NAGARE, "run", "-c", str(self.config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            env={**os.environ, "NAGARE_LOG": "info"},
        )

        def accepting():
            if self.proc.poll() is not None:
                raise AssertionError(f"nagare exited: {self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_until(f"nagare on 127.0.0.1:{self.port}", accepting)

    def log(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def events(self):
        if not self.out.exists():
            return []
        # Whole lines only: the file output may be writing the last one.
        text = self.out.read_text()
        whole = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in whole.splitlines() if line]

    def wait_events(self, n):
        wait_until(f"{n} events in {self.out}", lambda: len(self.events()) >= n)
        return self.events()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                code = self.proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
            assert code == 0, f"nagare exit code {code}: {self.log()}"
        self.stderr.close()


@pytest.fixture
def nagare():
    with tempfile.TemporaryDirectory() as d:
        n = Nagare(d)
        try:
            yield n
        finally:
            if n.proc.poll() is None:
                n.proc.kill()
                n.proc.wait()


def check_exact(events, tag, n):
    seqs = sorted(e["record"]["seq"] for e in events)
    assert seqs == list(range(n)), f"expected seq 0..{n} once each, got {len(seqs)} events"
    assert all(e["tag"] == tag for e in events)
    for e in events[:10]:
        assert e["record"]["message"] == f"event number {e['record']['seq']}"


def record(i):
    return {"seq": i, "message": f"event number {i}"}


@pytest.mark.parametrize("nanos", [True, False])
def test_sender(nagare, nanos):
    s = sender.FluentSender("py", host="127.0.0.1", port=nagare.port, nanosecond_precision=nanos)
    for i in range(N):
        assert s.emit("sync", record(i)), s.last_error
    s.close()
    events = nagare.wait_events(N)
    check_exact(events, "py.sync", N)
    if nanos:
        # EventTime keeps sub-second precision: not every time ends in .000000000
        assert any(not e["time"].endswith(".000000000Z") for e in events)
    else:
        assert all(e["time"].endswith(".000000000Z") for e in events)
    nagare.stop()
    assert len(nagare.events()) == N


def test_sender_with_explicit_time(nagare):
    s = sender.FluentSender("py", host="127.0.0.1", port=nagare.port, nanosecond_precision=True)
    t = 1700000000.25
    for i in range(100):
        assert s.emit_with_time("timed", t, record(i)), s.last_error
    s.close()
    events = nagare.wait_events(100)
    check_exact(events, "py.timed", 100)
    assert all(e["time"] == "2023-11-14T22:13:20.250000000Z" for e in events), events[0]
    nagare.stop()


def test_asyncsender(nagare):
    s = asyncsender.FluentSender("py", host="127.0.0.1", port=nagare.port, queue_maxsize=N * 2)
    for i in range(N):
        assert s.emit("async", record(i))
    s.close()  # waits until the queue is sent
    events = nagare.wait_events(N)
    check_exact(events, "py.async", N)
    nagare.stop()
    assert len(nagare.events()) == N
