"""Against the real receiving side: the nagare daemon (forward input -> stdout output).

The binary is $NAGARE_BIN, by default target/release/nagare at the repository
root. These tests fail (they do not skip) when it is missing: build it with
`cargo build --release` first.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import threading
import time

import pytest

from fwdserver import free_port
from nagare_logger import Client, EventTime

REPO = pathlib.Path(__file__).resolve().parents[3]
NAGARE_BIN = pathlib.Path(os.environ.get("NAGARE_BIN", REPO / "target" / "release" / "nagare"))


class Nagare:
    def __init__(self, tmp_path: pathlib.Path, input_lines: list[str]):
        if not (NAGARE_BIN.is_file() and os.access(NAGARE_BIN, os.X_OK)):
            pytest.fail(
                f"nagare binary not found at {NAGARE_BIN} "
                "(build it with `cargo build --release` or set NAGARE_BIN)"
            )
        cfg = tmp_path / "nagare.toml"
        cfg.write_text(
            "[[input]]\n"
            'type = "forward"\n'
            + "".join(line + "\n" for line in input_lines)
            + '\n[[output]]\ntype = "stdout"\nmatch = "**"\n'
        )
        self.lines: list[dict] = []
        self.stderr = b""
        self.proc = subprocess.Popen(
            [str(NAGARE_BIN), "run", "-c", str(cfg)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.strip()
            if line:
                self.lines.append(json.loads(line))

    def wait_lines(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.lines) < n and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()


def wait_listening(connect, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            s = connect()
            s.close()
            return
        except OSError:
            time.sleep(0.05)
    pytest.fail("nagare did not start listening")


def check_events(lines: list[dict], tag: str, n: int) -> None:
    mine = [ln for ln in lines if ln.get("tag") == tag]
    seqs = sorted({ln["record"]["seq"] for ln in mine})
    assert seqs == list(range(n)), f"got {len(mine)} lines, {len(seqs)} distinct seqs"
    for ln in mine[:5]:
        assert ln["record"]["msg"] == "x" * 100
        assert "T" in ln["time"]


@pytest.mark.parametrize("require_ack", [False, True])
def test_tcp_to_nagare(tmp_path, require_ack):
    port = free_port()
    d = Nagare(tmp_path, [f'bind = "127.0.0.1:{port}"'])
    try:
        wait_listening(lambda: socket.create_connection(("127.0.0.1", port), 1))
        c = Client(f"127.0.0.1:{port}", require_ack=require_ack, ack_timeout=5)
        n = 5000
        for i in range(n):
            c.emit("py.sdk", {"seq": i, "msg": "x" * 100})
        c.emit("py.time", {"seq": 0}, time=EventTime(1_700_000_000, 123_456_789))
        assert c.close(30)
        assert c.stats.sent == n + 1
        d.wait_lines(n + 1, 30)
    finally:
        d.stop()
    check_events(d.lines, "py.sdk", n)
    (t,) = [ln for ln in d.lines if ln.get("tag") == "py.time"]
    assert t["time"] == "2023-11-14T22:13:20.123456789Z"


def test_tcp_with_users_to_nagare(tmp_path):
    port = free_port()
    d = Nagare(
        tmp_path,
        [
            f'bind = "127.0.0.1:{port}"',
            'shared_key = "k3y"',
            "[[input.users]]",
            'username = "alice"',
            'password = "pw"',
        ],
    )
    try:
        wait_listening(lambda: socket.create_connection(("127.0.0.1", port), 1))
        bad = Client(f"127.0.0.1:{port}", shared_key="k3y", username="alice", password="wrong")
        bad.emit("py.bad", {"seq": 0, "msg": "x" * 100})
        assert not bad.flush(1.0)
        assert bad.stats.sent == 0
        bad.close(0)
        c = Client(
            f"127.0.0.1:{port}",
            shared_key="k3y",
            username="alice",
            password="pw",
            require_ack=True,
            ack_timeout=5,
        )
        n = 1000
        for i in range(n):
            c.emit("py.users", {"seq": i, "msg": "x" * 100})
        assert c.close(30), c.last_error
        d.wait_lines(n, 30)
    finally:
        d.stop()
    check_events(d.lines, "py.users", n)
    assert not [ln for ln in d.lines if ln.get("tag") == "py.bad"]


def test_unix_socket_with_shared_key_to_nagare(tmp_path):
    path = str(tmp_path / "fwd.sock")
    d = Nagare(tmp_path, [f'path = "{path}"', 'shared_key = "py-secret"'])
    try:

        def connect():
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            return s

        wait_listening(connect)
        c = Client(f"unix://{path}", shared_key="py-secret", require_ack=True, ack_timeout=5)
        n = 1000
        for i in range(n):
            c.emit("py.unix", {"seq": i, "msg": "x" * 100})
        assert c.close(30), c.last_error
        d.wait_lines(n, 30)
    finally:
        d.stop()
    check_events(d.lines, "py.unix", n)
