"""The asynchronous forward-protocol client."""

from __future__ import annotations

import atexit
import base64
import collections
import contextlib
import dataclasses

# getaddrinfo() encodes host names with the idna codec, imported on first use.
# A fork() while the sender thread is in that import leaves the child with a
# half-imported codec: "LookupError: unknown encoding: idna" on every connect.
# Importing it here, before any thread exists, keeps children able to connect.
import encodings.idna  # noqa: F401
import itertools
import os
import random
import select
import socket
import ssl
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import msgpack

from . import protocol
from .spill import SpillFile

__all__ = [
    "AckTimeoutError",
    "BufferFullError",
    "Client",
    "Server",
    "Stats",
    "UndeliveredError",
]

_SEC_NSEC = protocol._SEC_NSEC
_ENTRY_HEAD = protocol._ENTRY_HEAD
_BILLION = 1_000_000_000
# close() retries a refused server this often until its deadline
_CLOSING_RETRY = 0.1
# while events are spilled during an outage, the file is fsync'd this often
_SPILL_SYNC_INTERVAL = 0.2
# in ack mode the sender writes this many frames before it waits for their
# acks, so a spill file or a full buffer drains without a round trip per frame
_MAX_INFLIGHT = 8


class AckTimeoutError(TimeoutError):
    """The server did not acknowledge a chunk within ``ack_timeout``; it will be resent."""


class BufferFullError(Exception):
    """Events were dropped because the buffer (and the spill file, if any) was full."""


class UndeliveredError(Exception):
    """close() gave up on events it could not deliver (and had no spill_path to keep them)."""


@dataclasses.dataclass(frozen=True)
class Server:
    """One destination: TCP ``host:port`` or a UNIX socket ``path``."""

    host: str = "127.0.0.1"
    port: int = 24224
    path: str | None = None  # UNIX socket

    @classmethod
    def parse(cls, spec: str | tuple | Server) -> Server:
        if isinstance(spec, Server):
            return spec
        if isinstance(spec, tuple):
            return cls(host=spec[0], port=int(spec[1]))
        if spec.startswith("unix://"):
            return cls(path=spec[len("unix://") :])
        if spec.startswith("unix:"):
            return cls(path=spec[len("unix:") :])
        if spec.startswith("/"):
            return cls(path=spec)
        if spec.startswith("["):  # [::1]:24224
            host, _, port = spec[1:].partition("]:")
            return cls(host=host, port=int(port or 24224))
        host, sep, port = spec.rpartition(":")
        if not sep:
            return cls(host=spec)
        return cls(host=host, port=int(port))

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix://{self.path}"
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


@dataclasses.dataclass(frozen=True)
class Stats:
    """Counters since the client was created (or since fork, in a child process)."""

    sent: int  # events written to a server (and acknowledged, with require_ack)
    buffered: int  # events waiting: in memory, in flight or in the spill file
    spilled: int  # events in the spill file now (written to it, not yet sent)
    dropped: int  # events lost on purpose: buffer/spill full, or still buffered at close
    reconnects: int  # connections made after the first one
    errors: int  # errors reported (connect/handshake/write/ack failures)
    server: str | None  # the server currently connected, if any


class _Frame:
    __slots__ = ("chunk", "count", "data", "delivered", "encoded", "mem_bytes", "tag")

    def __init__(self, tag: str, data: bytes, count: int, mem_bytes: int):
        self.tag = tag
        self.data = data
        self.count = count
        self.mem_bytes = mem_bytes  # how much of the memory budget this frame holds
        self.chunk: str | None = None
        self.encoded: bytes | None = None
        self.delivered = False  # acknowledged (ack mode)


class _Conn:
    """One live connection and its reader for server messages (HELO, PONG, acks)."""

    def __init__(self, sock: socket.socket, server: Server, index: int):
        self.sock = sock
        self.server = server
        self.index = index
        self.unpacker = msgpack.Unpacker(raw=True, strict_map_key=False)
        self.poller = select.poll() if hasattr(select, "poll") else None
        if self.poller is not None:
            self.poller.register(sock.fileno(), select.POLLIN | select.POLLPRI)

    def readable(self) -> bool:
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        if self.poller is not None:
            return bool(self.poller.poll(0))
        r, _, _ = select.select([self.sock], [], [], 0)
        return bool(r)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


_LIVE: weakref.WeakSet[Client] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for c in list(_LIVE):
        c._reset_after_fork()


def _close_all_at_exit() -> None:
    for c in list(_LIVE):
        with contextlib.suppress(Exception):
            c.close(timeout=c.exit_timeout)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all_at_exit)


def _hostname() -> str:
    return socket.gethostname()


class Client:
    """Buffered, asynchronous forward-protocol client.

    ``emit()`` packs the event and appends it to an in-memory buffer; a
    background thread batches the buffer into PackedForward frames (one per tag)
    and writes them to the first reachable server. See README.md for every option.
    """

    def __init__(
        self,
        servers: str | tuple | Server | Sequence[str | tuple | Server] = ("127.0.0.1:24224",),
        *,
        tag_prefix: str | None = None,
        require_ack: bool = False,
        ack_timeout: float = 10.0,
        buffer_max_bytes: int = 32 * 1024 * 1024,
        overflow: str | None = None,
        spill_path: str | None = None,
        spill_max_bytes: int = 256 * 1024 * 1024,
        block_timeout: float | None = 10.0,
        batch_max_bytes: int = 1024 * 1024,
        compress: bool = False,
        shared_key: str | None = None,
        username: str = "",
        password: str = "",
        client_hostname: str | None = None,
        tls: bool | ssl.SSLContext = False,
        tls_server_hostname: str | None = None,
        connect_timeout: float = 5.0,
        write_timeout: float = 10.0,
        backoff_base: float = 0.1,
        backoff_max: float = 30.0,
        primary_check_interval: float = 30.0,
        on_error: Callable[[BaseException], Any] | None = None,
        default: Callable[[Any], Any] | None = str,
        exit_timeout: float = 5.0,
    ):
        if isinstance(servers, (str, tuple, Server)):
            servers = [servers]
        self.servers = [Server.parse(s) for s in servers]
        if not self.servers:
            msg = "at least one server is required"
            raise ValueError(msg)
        if overflow is None:  # the shared default (sdk/README.md)
            overflow = "spill" if spill_path is not None else "drop"
        if overflow not in ("spill", "block", "drop"):
            msg = f"overflow must be 'spill', 'block' or 'drop', not {overflow!r}"
            raise ValueError(msg)
        if buffer_max_bytes <= 0 or batch_max_bytes <= 0:
            msg = "buffer_max_bytes and batch_max_bytes must be positive"
            raise ValueError(msg)
        if (username or password) and not shared_key:
            msg = "username/password need shared_key (they travel in the handshake)"
            raise ValueError(msg)
        self.tag_prefix = tag_prefix
        self.require_ack = require_ack
        self.ack_timeout = ack_timeout
        self.buffer_max_bytes = buffer_max_bytes
        self.overflow = overflow
        self.spill_path = spill_path
        self.spill_max_bytes = spill_max_bytes
        self.block_timeout = block_timeout
        self.batch_max_bytes = batch_max_bytes
        self.compress = compress
        self.shared_key = shared_key
        self.username = username
        self.password = password
        self.client_hostname = client_hostname or _hostname()
        if tls is True:
            tls = ssl.create_default_context()
        self.tls: ssl.SSLContext | None = tls or None
        self.tls_server_hostname = tls_server_hostname
        self.connect_timeout = connect_timeout
        self.write_timeout = write_timeout
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.primary_check_interval = primary_check_interval
        self.on_error = on_error
        self.default = default
        self.exit_timeout = exit_timeout
        self._init_state()
        _LIVE.add(self)
        # events left in an explicitly configured spill file by an earlier run
        if spill_path is not None and os.path.exists(spill_path) and os.path.getsize(spill_path):
            with self._lock:
                self._open_spill()
                if self._spill is not None and self._spill.events:
                    self._spilling = True
                    self._start_locked()

    # ------------------------------------------------------------------ state

    def _init_state(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # space freed / work done
        self._wake = threading.Event()  # new work for the sender
        self._stop = threading.Event()  # interrupts backoff sleeps
        self._hurry = threading.Event()  # close() was called: retry now, not after backoff
        self._local = threading.local()
        self._mem: dict[str, list[bytes]] = {}
        self._mem_events = 0
        self._mem_bytes = 0  # memory + in-flight frames that came from memory
        self._outbox: collections.deque[_Frame] = collections.deque()
        self._outbox_events = 0
        self._spill: SpillFile | None = None
        self._spill_tmp = False  # spill file is a temporary one of ours
        self._spilling = False  # new events go to the spill file until it is drained
        self._idle = False
        self._thread: threading.Thread | None = None
        self._closing = False  # close() called: no new events
        self._abort = False  # close() timed out: sender gives up
        self._conn: _Conn | None = None
        self._failures = 0
        self._ever_connected = False
        self._last_primary_check = 0.0
        self._sent = 0
        self._spilled_at_close = 0  # events left in the spill file by close()
        self._dropped = 0
        self._dropped_reported = 0
        self._spill_error: BaseException | None = None
        self._reconnects = 0
        self._errors = 0
        self.last_error: BaseException | None = None

    def _reset_after_fork(self) -> None:
        """In a forked child: forget the parent's socket, buffer, thread and spill file."""
        if self._pid == os.getpid():
            return
        conn, spill = self._conn, self._spill
        self._init_state()
        if conn is not None:
            # close our copy of the descriptor only: the parent's connection stays open
            with contextlib.suppress(OSError):
                fd = conn.sock.detach()
                if fd >= 0:
                    os.close(fd)
        if spill is not None:
            spill.discard()

    def _check_pid(self) -> None:
        if self._pid != os.getpid():
            self._reset_after_fork()

    # ------------------------------------------------------------------ public API

    def emit(self, tag: str, record: Mapping[str, Any], time: Any = None) -> bool:
        """Queue one event. Returns False if it was dropped (buffer full, or closed).

        ``time``: None (now), int or float seconds, EventTime/(sec, nsec), or datetime.
        Never blocks unless ``overflow="block"``.
        """
        if self._pid != os.getpid():
            self._reset_after_fork()
        if time is None:
            sec, nsec = divmod(_time_ns(), _BILLION)
        else:
            sec, nsec = protocol.to_event_time(time)
        if type(record) is not dict:
            if not isinstance(record, Mapping):
                msg = f"record must be a mapping, not {type(record).__name__}"
                raise TypeError(msg)
            record = dict(record)
        try:
            packer = self._local.packer
        except AttributeError:
            packer = self._local.packer = msgpack.Packer(use_bin_type=True, default=self.default)
        entry = _ENTRY_HEAD + _SEC_NSEC.pack(sec, nsec) + packer.pack(record)
        if self.tag_prefix:
            tag = f"{self.tag_prefix}.{tag}"
        n = len(entry)
        with self._lock:
            if self._closing:
                self._dropped += 1
                return False
            if self._thread is None:
                self._start_locked()
            if not self._spilling and (self._mem_bytes + n <= self.buffer_max_bytes):
                self._append_locked(tag, entry, n)
                return True
            return self._overflow_locked(tag, entry, n)

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every buffered event was sent (True) or the timeout passed (False)."""
        self._check_pid()
        deadline = None if timeout is None else _now() + timeout
        with self._cond:
            while self._mem_events or self._outbox or self._spilling:
                if self._thread is None or not self._thread.is_alive():
                    return False
                remaining = None if deadline is None else deadline - _now()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining if remaining is None else min(remaining, 0.5))
            return True

    def close(self, timeout: float | None = 10.0) -> bool:
        """Send what is buffered (up to ``timeout`` seconds), then disconnect.

        Returns True if everything was delivered. Undelivered events are kept in
        the spill file when ``spill_path`` is set (sent by the next client that
        opens it), otherwise counted as dropped.
        """
        self._check_pid()
        with self._lock:
            if self._closing and self._thread is None:
                return not (self._mem_events or self._outbox or self._spilling)
            self._closing = True
        self._hurry.set()
        ok = self.flush(timeout)
        with self._cond:
            self._abort = True
            self._cond.notify_all()
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.connect_timeout + self.write_timeout + 1.0)
        with self._lock:
            self._thread = None
            leftovers = [(f.tag, f.data, f.count) for f in self._outbox] + [
                (t, b"".join(lst), len(lst)) for t, lst in self._mem.items()
            ]
            lost = sum(c for _, _, c in leftovers)
            dropped_now = 0
            self._outbox.clear()
            self._mem.clear()
            self._mem_events = self._outbox_events = self._mem_bytes = 0
            spill = self._spill
            self._spill = None
            self._spilling = False
            if spill is not None and not self._spill_tmp:
                if leftovers or not spill.exhausted:
                    self._spilled_at_close = lost + spill.events
                    spill.replace_with(leftovers)
                    spill.discard()
                else:
                    spill.close()
            elif self.spill_path is not None and leftovers:
                # never spilled: keep what is left for the next run
                sp = SpillFile(self.spill_path, self.spill_max_bytes)
                sp.replace_with(leftovers)
                sp.discard()
                self._spilled_at_close = lost
            else:
                if spill is not None:
                    lost += spill.events
                    spill.close(remove=True)
                dropped_now = lost
                self._dropped += lost
                self._dropped_reported += lost  # reported below as UndeliveredError
            conn, self._conn = self._conn, None
            self._cond.notify_all()
        if conn is not None:
            conn.close()
        _LIVE.discard(self)
        self._report_drops()
        if dropped_now:
            self._error(UndeliveredError(f"{dropped_now} event(s) undelivered at close: dropped"))
        return ok

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stats(self) -> Stats:
        self._check_pid()
        with self._lock:
            spill_events = self._spill.events if self._spill is not None else 0
            return Stats(
                sent=self._sent,
                buffered=self._mem_events + self._outbox_events + spill_events,
                spilled=spill_events if self._spill is not None else self._spilled_at_close,
                dropped=self._dropped,
                reconnects=self._reconnects,
                errors=self._errors,
                server=str(self._conn.server) if self._conn is not None else None,
            )

    # ------------------------------------------------------------------ buffer

    def _append_locked(self, tag: str, entry: bytes, n: int) -> None:
        lst = self._mem.get(tag)
        if lst is None:
            self._mem[tag] = [entry]
        else:
            lst.append(entry)
        self._mem_events += 1
        self._mem_bytes += n
        if self._idle:
            self._idle = False
            self._wake.set()

    def _overflow_locked(self, tag: str, entry: bytes, n: int) -> bool:
        if self.overflow == "spill":
            if self._spill is None:
                self._open_spill()
            if self._spill is not None and self._spill.append(tag.encode("utf-8"), entry, 1):
                self._spilling = True
                if self._idle:
                    self._idle = False
                    self._wake.set()
                return True
        elif self.overflow == "block":
            deadline = None if self.block_timeout is None else _now() + self.block_timeout
            while (
                not self._closing
                and self._mem_bytes
                and (self._mem_bytes + n > self.buffer_max_bytes)
            ):
                remaining = None if deadline is None else deadline - _now()
                if remaining is not None and remaining <= 0:
                    break
                self._cond.wait(remaining)
            else:
                if not self._closing:
                    self._append_locked(tag, entry, n)
                    return True
        self._dropped += 1
        return False

    def _open_spill(self) -> None:
        path = self.spill_path
        self._spill_tmp = path is None
        if path is None:
            path = os.path.join(
                tempfile.gettempdir(), f"nagare-logger-{os.getpid()}-{id(self):x}.spill"
            )
        try:
            self._spill = SpillFile(path, self.spill_max_bytes)
        except OSError as e:  # reported by the sender thread (we hold the lock here)
            self._spill = None
            self._spill_error = e

    def _start_locked(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nagare-logger-sender", daemon=True)
        self._thread.start()

    def _next_frame(self) -> _Frame | None:
        """The oldest frame to send, or None when there is nothing (after waiting) or we stop."""
        while True:
            with self._lock:
                if self._abort:
                    return None
                if self._outbox:
                    return self._outbox[0]
                if self._mem:
                    mem, self._mem = self._mem, {}
                    self._mem_events = 0
                    for tag, entries in mem.items():
                        self._frames_locked(tag, entries)
                    return self._outbox[0]
                if self._spilling and self._spill is not None:
                    # a window's worth of frames: several in flight in ack mode
                    frames = _MAX_INFLIGHT if self.require_ack else 1
                    while len(self._outbox) < frames and not self._spill.exhausted:
                        for tag, data, count in self._spill.read(self.batch_max_bytes):
                            self._outbox.append(_Frame(tag, data, count, 0))
                            self._outbox_events += count
                    if self._spill.exhausted:
                        self._spill.reset()
                        self._spilling = False
                    if self._outbox:
                        return self._outbox[0]
                    continue
                self._spilling = False
                self._cond.notify_all()  # flush() waiters: all done
                if self._closing:
                    return None
                self._idle = True
                self._wake.clear()
            self._wake.wait()

    def _frames_locked(self, tag: str, entries: list[bytes]) -> None:
        batch: list[bytes] = []
        size = 0
        for e in entries:
            if batch and size + len(e) > self.batch_max_bytes:
                self._outbox.append(_Frame(tag, b"".join(batch), len(batch), size))
                self._outbox_events += len(batch)
                batch, size = [], 0
            batch.append(e)
            size += len(e)
        if batch:
            self._outbox.append(_Frame(tag, b"".join(batch), len(batch), size))
            self._outbox_events += len(batch)

    # ------------------------------------------------------------------ sender thread

    def _run(self) -> None:
        while True:
            try:
                if self._run_once():
                    return
            except Exception as e:  # a bug must not silently stop delivery
                self._error(e)
                if self._stop.wait(1.0):
                    return

    def _run_once(self) -> bool:
        """Send frames until told to stop (True); exceptions go up to _run."""
        while True:
            frame = self._next_frame()
            if frame is None:
                return True
            with self._lock:
                # ack mode: the first frames of the outbox, written before any ack is read
                window = list(
                    itertools.islice(self._outbox, _MAX_INFLIGHT if self.require_ack else 1)
                )
            if not self._deliver(window):
                return True  # aborted by close()
            self._report_drops()

    def _commit(self, frame: _Frame) -> None:
        """frame was delivered: out of the outbox (wherever it is: acks may come out of order)."""
        with self._cond:
            for i, f in enumerate(self._outbox):
                if f is frame:
                    del self._outbox[i]
                    self._outbox_events -= frame.count
                    self._mem_bytes -= frame.mem_bytes
                    self._sent += frame.count
                    break
            self._cond.notify_all()
        self._failures = 0

    def _deliver(self, window: list[_Frame]) -> bool:
        """Write the frames (and in ack mode wait for their acks) until each is delivered,
        or has moved to the spill file; False when close() gave up."""
        for frame in window:
            if frame.encoded is None:
                if self.require_ack and frame.chunk is None:
                    frame.chunk = base64.b64encode(os.urandom(16)).decode("ascii")
                frame.encoded = protocol.encode_packed(
                    frame.tag, frame.data, frame.count, frame.chunk, compress=self.compress
                )
        while window:
            conn = self._connection()
            if conn is None:
                return False
            with self._lock:
                if not (self._outbox and self._outbox[0] is window[0]):
                    return True  # moved to the spill file during the outage
            try:
                self._check_peer(conn)
                conn.sock.settimeout(self.write_timeout)
                for frame in window:
                    conn.sock.sendall(frame.encoded)
                if not self.require_ack:
                    self._commit(window[0])  # a window of one without acks
                    return True
                self._wait_acks(conn, window)
                return True
            except (OSError, AckTimeoutError, protocol.ProtocolError, ValueError) as e:
                self._error(e)
                self._drop_conn(conn)
                self._failures += 1
                # the acknowledged ones are committed; the others go again, same chunk ids
                window = [f for f in window if not f.delivered]
        return True

    def _check_peer(self, conn: _Conn) -> None:
        """Notice a closed connection (peer's FIN) before writing into it."""
        while conn.readable():
            conn.sock.setblocking(False)
            try:
                data = conn.sock.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError):
                return
            finally:
                conn.sock.settimeout(self.write_timeout)
            if not data:
                raise ConnectionResetError(f"{conn.server} closed the connection")
            conn.unpacker.feed(data)
            for obj in conn.unpacker:
                self._unexpected(obj)

    def _unexpected(self, obj: Any) -> None:
        if isinstance(obj, list) and obj and obj[0] == b"HELO":
            raise protocol.HandshakeError("server requires a shared key (got HELO)")
        # stale acks of frames that were already resent, heartbeats: ignore

    def _wait_acks(self, conn: _Conn, window: list[_Frame]) -> None:
        """Read acks until every frame of the window has its own; each is committed
        as its ack comes. The ack timeout runs from the last ack (or the writes)."""
        waiting = {(f.chunk or "").encode("ascii"): f for f in window}
        deadline = _now() + self.ack_timeout
        while True:
            for obj in conn.unpacker:
                f = waiting.pop(obj.get(b"ack"), None) if isinstance(obj, dict) else None
                if f is None:
                    self._unexpected(obj)
                    continue
                f.delivered = True
                self._commit(f)
                if not waiting:
                    return
                deadline = _now() + self.ack_timeout
            remaining = deadline - _now()
            if remaining <= 0 or self._abort:
                first = next(iter(waiting.values())).chunk
                raise AckTimeoutError(f"no ack for chunk {first} from {conn.server}")
            conn.sock.settimeout(min(remaining, 0.25))
            try:
                data = conn.sock.recv(65536)
            except (socket.timeout, ssl.SSLWantReadError):
                continue
            if not data:
                raise ConnectionResetError(f"{conn.server} closed the connection")
            conn.unpacker.feed(data)

    def _connection(self) -> _Conn | None:
        conn = self._conn
        if conn is not None:
            if conn.index > 0 and _now() - self._last_primary_check >= self.primary_check_interval:
                self._last_primary_check = _now()
                better = self._connect_first(conn.index)
                if better is not None:
                    self._drop_conn(conn)
                    self._use(better)
                    return better
            return conn
        while not self._abort:
            if self._failures:
                if self.spill_path is not None and self.overflow == "spill":
                    self._spill_buffered()
                if not self._sleep_backoff(self._backoff(self._failures)):
                    return None
            conn = self._connect_first(len(self.servers))
            if conn is not None:
                self._use(conn)
                return conn
            self._failures += 1
        return None

    def _sleep_backoff(self, delay: float) -> bool:
        """Wait before the next connect round; False when close() gave up.

        close() cuts the wait short and from then on the client retries every
        _CLOSING_RETRY seconds until close()'s deadline. While events are
        spilled the file is fsync'd every _SPILL_SYNC_INTERVAL.
        """
        deadline = _now() + delay
        while not self._abort:
            if self._closing:
                deadline = min(deadline, _now() + _CLOSING_RETRY)
            self._sync_spill()
            remaining = deadline - _now()
            if remaining <= 0:
                return True
            step = min(remaining, _SPILL_SYNC_INTERVAL)
            if self._closing:
                self._stop.wait(step)
            else:
                self._hurry.wait(step)
        return False

    def _spill_buffered(self) -> None:
        """Server unreachable: move what waits in memory to the spill file.

        It goes before what the file already holds (it is older), and new
        events follow it into the file until it is drained, so a kill -9
        during an outage loses nothing that emit() accepted (the file is
        written on every emit; fsync'd every _SPILL_SYNC_INTERVAL).
        """
        with self._lock:
            if not (self._outbox or self._mem):
                return
            records = [(f.tag, f.data, f.count) for f in self._outbox] + [
                (t, b"".join(lst), len(lst)) for t, lst in self._mem.items()
            ]
            if self._spill is None:
                self._open_spill()
            spill = self._spill
            if spill is None:
                return  # could not open it: _report_drops tells on_error
            try:
                spill.replace_with(records)
            except OSError as e:
                self._spill_error = e
                return
            # the file was replaced: open the new one (what it holds is counted anew)
            spill.discard()
            try:
                self._spill = SpillFile(spill.path, self.spill_max_bytes)
            except OSError as e:
                self._spill = None
                self._spill_error = e
                return
            self._outbox.clear()
            self._mem.clear()
            self._mem_events = self._outbox_events = self._mem_bytes = 0
            self._spilling = True
            self._cond.notify_all()  # block-mode emitters: memory is free

    def _sync_spill(self) -> None:
        # Under the lock, so close() cannot close the file meanwhile; it runs
        # only while no server is reachable, when emit() waits on nothing else.
        with self._lock:
            spill = self._spill
            if spill is None or not spill.dirty:
                return
            try:
                spill.sync()
            except OSError as e:
                self._spill_error = e

    def _use(self, conn: _Conn) -> None:
        with self._lock:
            self._conn = conn
            if self._ever_connected:
                self._reconnects += 1
            self._ever_connected = True
        if conn.index > 0:
            self._last_primary_check = _now()

    def _backoff(self, failures: int) -> float:
        """Exponential backoff with jitter: base*2^(n-1), capped, times a random 0.5..1."""
        delay = min(self.backoff_max, self.backoff_base * (2 ** min(failures - 1, 30)))
        return delay * random.uniform(0.5, 1.0)

    def _connect_first(self, limit: int) -> _Conn | None:
        for i, server in enumerate(self.servers[:limit]):
            if self._abort:
                return None
            try:
                return self._connect(server, i)
            except (OSError, protocol.ProtocolError, ValueError) as e:
                self._error(e)
        return None

    def _connect(self, server: Server, index: int) -> _Conn:
        if server.path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.connect_timeout)
            try:
                sock.connect(server.path)
            except OSError:
                sock.close()
                raise
        else:
            sock = socket.create_connection((server.host, server.port), self.connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if self.tls is not None:
                sock = self.tls.wrap_socket(
                    sock, server_hostname=self.tls_server_hostname or server.host
                )
            conn = _Conn(sock, server, index)
            if self.shared_key is not None:
                self._handshake(conn)
            return conn
        except BaseException:
            sock.close()
            raise

    def _handshake(self, conn: _Conn) -> None:
        deadline = _now() + self.connect_timeout
        helo = self._read_message(conn, deadline)
        nonce, auth_salt, _ = protocol.parse_helo(helo)
        if auth_salt and not self.username:
            raise protocol.HandshakeError("server requires username/password")
        salt = os.urandom(16).hex().encode("ascii")
        key = self.shared_key or ""
        conn.sock.settimeout(self.write_timeout)
        conn.sock.sendall(
            protocol.build_ping(
                self.client_hostname, salt, nonce, key, auth_salt, self.username, self.password
            )
        )
        pong = self._read_message(conn, deadline)
        protocol.parse_pong(pong, salt, nonce, key)

    def _read_message(self, conn: _Conn, deadline: float) -> Any:
        while True:
            try:
                return conn.unpacker.unpack()
            except msgpack.OutOfData:
                pass
            remaining = deadline - _now()
            if remaining <= 0:
                raise socket.timeout(f"handshake with {conn.server} timed out")
            conn.sock.settimeout(remaining)
            data = conn.sock.recv(65536)
            if not data:
                raise ConnectionResetError(f"{conn.server} closed the connection in the handshake")
            conn.unpacker.feed(data)

    def _drop_conn(self, conn: _Conn) -> None:
        with self._lock:
            if self._conn is conn:
                self._conn = None
        conn.close()

    # ------------------------------------------------------------------ errors

    def _error(self, e: BaseException) -> None:
        with self._lock:
            self._errors += 1
        self.last_error = e
        cb = self.on_error
        if cb is not None:
            with contextlib.suppress(Exception):
                cb(e)

    def _report_drops(self) -> None:
        with self._lock:
            n = self._dropped - self._dropped_reported
            self._dropped_reported = self._dropped
            spill_error, self._spill_error = self._spill_error, None
        if spill_error is not None:
            self._error(spill_error)
        if n > 0:
            self._error(BufferFullError(f"{n} event(s) dropped: buffer full"))


def _now() -> float:
    return time.monotonic()


_time_ns = time.time_ns
