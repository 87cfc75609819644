"""A scriptable forward-protocol server for the tests.

It decodes all four modes, records every event, answers ``chunk`` acks (or
withholds them on request), can run the shared-key handshake, listen on TCP or
a UNIX socket, with or without TLS, and can be stopped and started again on the
same address.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import threading
import time

import msgpack

from nagare_logger import protocol


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class ForwardServer:
    def __init__(
        self,
        *,
        unix_path: str | None = None,
        port: int = 0,
        shared_key: str | None = None,
        users: dict[str, str] | None = None,
        tls: ssl.SSLContext | None = None,
        answer_acks: bool = True,
        hostname: str = "test-server",
    ):
        self.unix_path = unix_path
        self.port = port
        self.shared_key = shared_key
        self.users = users or {}
        self.tls = tls
        self.answer_acks = answer_acks
        self.withhold_acks = 0  # ignore this many chunk ids (no ack sent)
        # send each ack this long after its frame, from a timer thread, while
        # reading on; max_unacked: the most frames of one connection read and
        # not yet acknowledged at once
        self.ack_later = 0.0
        self.max_unacked = 0
        self._unacked: dict[socket.socket, int] = {}
        self._write_lock = threading.Lock()
        self.hostname = hostname
        self.lock = threading.Lock()
        self.events: list[tuple[str, protocol.EventTime, dict]] = []
        self.frames: list[protocol.Frame] = []
        self.chunks: list[str] = []
        self.connections = 0
        self.auth_failures = 0
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._running = False

    # -- lifecycle ----------------------------------------------------------

    @property
    def address(self) -> str:
        if self.unix_path:
            return f"unix://{self.unix_path}"
        return f"127.0.0.1:{self.port}"

    def start(self) -> ForwardServer:
        if self.unix_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.unix_path)
            ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            ls.bind(self.unix_path)
        else:
            ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind(("127.0.0.1", self.port))
            self.port = ls.getsockname()[1]
        ls.listen(64)
        self._listener = ls
        self._running = True
        t = threading.Thread(target=self._accept_loop, args=(ls,), daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self, *, abort: bool = False, drain: float = 0.3) -> None:
        """Stop listening and close every connection.

        Graceful (default): send FIN, keep reading for ``drain`` seconds what the
        clients still send, then close. abort=True: reset (RST) every connection
        at once, dropping unread data.
        """
        self._running = False
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self.lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                if abort:
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00" * 2)
                    c.shutdown(socket.SHUT_RD)  # wakes the reader, which closes: RST
                else:
                    c.shutdown(socket.SHUT_WR)  # FIN; go on reading for a while
        deadline = time.monotonic() + (0 if abort else drain)
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        with self.lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(5)
        self._threads = [t for t in self._threads if t.is_alive()]
        assert not self._threads, "server threads did not stop"
        if self.unix_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.unix_path)

    def __enter__(self) -> ForwardServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- queries ------------------------------------------------------------

    def wait_for(self, n: int, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.events) >= n:
                    return True
            time.sleep(0.01)
        return False

    def records(self, tag: str | None = None) -> list[dict]:
        with self.lock:
            return [r for t, _, r in self.events if tag is None or t == tag]

    def seqs(self) -> list[int]:
        return [r["seq"] for r in self.records()]

    def wait_seqs(self, n: int, timeout: float = 10.0) -> list[int]:
        """The seq fields once at least n events arrived (or the timeout passed)."""
        self.wait_for(n, timeout)
        return self.seqs()

    # -- internals ----------------------------------------------------------

    def _accept_loop(self, ls: socket.socket) -> None:
        while self._running:
            try:
                r, _, _ = select.select([ls], [], [], 0.05)
            except (OSError, ValueError):
                return
            if not r:
                continue
            try:
                conn, _ = ls.accept()
            except OSError:
                return
            if self.tls is not None:
                try:
                    conn.settimeout(5)
                    conn = self.tls.wrap_socket(conn, server_side=True)
                except (OSError, ssl.SSLError):
                    conn.close()
                    continue
            with self.lock:
                self.connections += 1
                self._conns.add(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(None)
            if self.shared_key is not None and not self._handshake(conn):
                return
            unp = protocol.make_unpacker()
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                unp.feed(data)
                for obj in unp:
                    frame = protocol.frame_from_object(obj)
                    self._record(conn, frame)
        except protocol.ProtocolError:
            return
        finally:
            with self.lock:
                self._conns.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def _record(self, conn: socket.socket, frame: protocol.Frame) -> None:
        chunk = frame.options.get("chunk")
        with self.lock:
            self.frames.append(frame)
            for t, r in frame.entries:
                self.events.append((frame.tag, t, r))
            if chunk is not None:
                self.chunks.append(chunk)
            send_ack = chunk is not None and self.answer_acks
            if send_ack and self.withhold_acks > 0:
                self.withhold_acks -= 1
                send_ack = False
            later = send_ack and self.ack_later > 0
            if later:
                self._unacked[conn] = self._unacked.get(conn, 0) + 1
                self.max_unacked = max(self.max_unacked, self._unacked[conn])
        if later:
            threading.Timer(self.ack_later, self._ack, (conn, chunk)).start()
        elif send_ack:
            with contextlib.suppress(OSError):
                conn.sendall(msgpack.packb({"ack": chunk}))

    def _ack(self, conn: socket.socket, chunk: str) -> None:
        with self.lock:  # before the ack leaves: the client may answer it at once
            self._unacked[conn] -= 1
        with self._write_lock, contextlib.suppress(OSError):
            conn.sendall(msgpack.packb({"ack": chunk}))

    def _handshake(self, conn: socket.socket) -> bool:
        nonce = os.urandom(16)
        auth = os.urandom(16) if self.users else b""
        conn.sendall(msgpack.packb(["HELO", {"nonce": nonce, "auth": auth, "keepalive": True}]))
        unp = msgpack.Unpacker(raw=True)
        while True:
            data = conn.recv(65536)
            if not data:
                return False
            unp.feed(data)
            try:
                ping = unp.unpack()
                break
            except msgpack.OutOfData:
                continue
        _, client_host, salt, digest, user, pw_digest = ping
        key = self.shared_key or ""
        ok = digest.decode() == protocol.ping_digest(salt, client_host, nonce, key)
        reason = "" if ok else "shared key mismatch"
        if ok and self.users:
            name = user.decode()
            pw = self.users.get(name)
            if pw is None or pw_digest.decode() != protocol.password_digest(auth, name, pw):
                ok, reason = False, "username/password mismatch"
        if not ok:
            with self.lock:
                self.auth_failures += 1
        conn.sendall(
            protocol.build_pong(self.hostname, salt, nonce, key, auth_ok=ok, reason=reason)
        )
        return ok
