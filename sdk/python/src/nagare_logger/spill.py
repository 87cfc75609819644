"""Append-only spill file: where events go when the memory buffer is full or
the server is unreachable.

Layout: a sequence of records, each

    u32 BE  payload length (tag length + entries length)
    u16 BE  tag length
    u32 BE  number of events in the entries
    tag     UTF-8
    entries concatenated msgpack [EventTime, record] entries (packed-forward payload)

Records are read back in the order they were written; consecutive records of
one tag are sent as one frame (up to the batch size). When every record has
been read the file is truncated to zero. A torn record at the end (a crash in
the middle of a write) is cut off when the file is opened again.
"""

from __future__ import annotations

import contextlib
import os
import struct

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

_HEAD = struct.Struct(">IHI")


class SpillFile:
    def __init__(self, path: str, max_bytes: int):
        self.max_bytes = max_bytes
        self.path = self._open_locked(path)
        self._w = open(self.path, "ab")  # noqa: SIM115 - lives as long as the client
        self._r = open(self.path, "rb")  # noqa: SIM115
        self.size = 0  # bytes of valid records in the file
        self.read_pos = 0  # next unread record
        self.events = 0  # unread events
        self.dirty = False  # written since the last fsync
        self._recover()

    def _open_locked(self, path: str) -> str:
        """Lock the spill file so two processes never share one; fall back to path.<pid>."""
        for candidate in (path, f"{path}.{os.getpid()}"):
            fd = os.open(candidate, os.O_RDWR | os.O_CREAT, 0o600)
            if fcntl is None:
                self._lock_fd = fd
                return candidate
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self._lock_fd = fd
            return candidate
        msg = f"spill file {path} is locked by another process"
        raise OSError(msg)

    def _recover(self) -> None:
        self._r.seek(0)
        pos = 0
        events = 0
        while True:
            head = self._r.read(_HEAD.size)
            if len(head) < _HEAD.size:
                break
            n, tag_len, count = _HEAD.unpack(head)
            body = self._r.read(n)
            if len(body) < n or tag_len > n:
                break
            pos += _HEAD.size + n
            events += count
        total = os.fstat(self._w.fileno()).st_size
        if total != pos:  # torn tail: cut it off
            os.ftruncate(self._w.fileno(), pos)
        self.size = pos
        self.events = events

    @property
    def exhausted(self) -> bool:
        return self.read_pos >= self.size

    def append(self, tag_bytes: bytes, entries: bytes, count: int) -> bool:
        """Append one record; False (nothing written) when the size limit would be passed."""
        n = len(tag_bytes) + len(entries)
        if self.size + _HEAD.size + n > self.max_bytes:
            return False
        self._w.write(_HEAD.pack(n, len(tag_bytes), count) + tag_bytes + entries)
        self._w.flush()  # in the OS at once: survives a kill -9 of the process
        self.dirty = True
        self.size += _HEAD.size + n
        self.events += count
        return True

    def sync(self) -> None:
        """fsync: what was written survives a machine crash too."""
        os.fsync(self._w.fileno())
        self.dirty = False

    def read(self, max_bytes: int) -> list[tuple[str, bytes, int]]:
        """Read records from the current position, about max_bytes of them (at least one).

        Consecutive records of one tag are joined into one (tag, entries, count)
        of at most max_bytes, so events spilled one by one drain as big frames.
        """
        # one read of about max_bytes, parsed in memory: events spilled one by
        # one are one record each, and a read call per record is what cost
        self._r.seek(self.read_pos)
        block = self._r.read(min(self.size - self.read_pos, max_bytes + _HEAD.size))
        out: list[tuple[str, list[bytes], int, int]] = []  # tag, parts, count, bytes
        got = pos = 0
        while self.read_pos < self.size and (not out or got < max_bytes):
            if pos + _HEAD.size > len(block) or pos + _HEAD.size + _HEAD.unpack_from(block, pos)[
                0
            ] > len(block):
                # the next record goes past the block: a new block from it on
                self._r.seek(self.read_pos)
                head = self._r.read(_HEAD.size)
                block = head + self._r.read(max(_HEAD.unpack(head)[0], max_bytes))
                pos = 0
            n, tag_len, count = _HEAD.unpack_from(block, pos)
            body = block[pos + _HEAD.size : pos + _HEAD.size + n]
            pos += _HEAD.size + n
            tag, entries = body[:tag_len].decode("utf-8"), body[tag_len:]
            if out and out[-1][0] == tag and out[-1][3] + len(entries) <= max_bytes:
                t, parts, c, b = out[-1]
                parts.append(entries)
                out[-1] = (t, parts, c + count, b + len(entries))
            else:
                out.append((tag, [entries], count, len(entries)))
            self.read_pos += _HEAD.size + n
            self.events -= count
            got += n
        return [(t, b"".join(parts), c) for t, parts, c, _ in out]

    def unread_bytes(self) -> bytes:
        self._r.seek(self.read_pos)
        return self._r.read(self.size - self.read_pos)

    def reset(self) -> None:
        """Everything was read: empty the file."""
        self._w.flush()
        os.ftruncate(self._w.fileno(), 0)
        self.size = self.read_pos = self.events = 0

    def replace_with(self, records: list[tuple[str, bytes, int]]) -> None:
        """Rewrite the file as `records` followed by the unread rest (used at close)."""
        rest = self.unread_bytes()
        tmp = f"{self.path}.tmp"
        with open(tmp, "wb") as f:
            for tag, entries, count in records:
                tb = tag.encode("utf-8")
                f.write(_HEAD.pack(len(tb) + len(entries), len(tb), count) + tb + entries)
            f.write(rest)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def close(self, *, remove: bool = False) -> None:
        for f in (self._w, self._r):
            with contextlib.suppress(OSError):
                f.close()
        if remove or self.size == 0:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)

    def discard(self) -> None:
        """Forget the file without touching it (a forked child must not use the parent's)."""
        for f in (self._w, self._r):
            with contextlib.suppress(OSError):
                f.close()
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)
