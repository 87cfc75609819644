"""Fluentd forward protocol v1: encoding, decoding and the shared-key handshake.

Everything here is pure (no sockets), so it is checked byte for byte against
the shared vectors in ``sdk/vectors/vectors.json``.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import hashlib
import hmac
import struct
import time as _time
from typing import Any, NamedTuple

import msgpack

__all__ = [
    "EventTime",
    "Frame",
    "HandshakeError",
    "ProtocolError",
    "build_ping",
    "build_pong",
    "decode_frame",
    "encode_entry",
    "encode_forward",
    "encode_message",
    "encode_packed",
    "event_time_bytes",
    "frame_from_object",
    "parse_helo",
    "parse_pong",
    "password_digest",
    "ping_digest",
    "to_event_time",
]

_SEC_NSEC = struct.Struct(">II")
_BILLION = 1_000_000_000
# msgpack fixarray(2) followed by the fixext8 header of ext type 0
_ENTRY_HEAD = b"\x92\xd7\x00"


class ProtocolError(ValueError):
    """A frame or handshake message does not follow forward protocol v1."""


class HandshakeError(ConnectionError):
    """The shared-key / user handshake failed (bad key, bad password, bad PONG)."""


class EventTime(NamedTuple):
    """Forward EventTime: seconds and nanoseconds since the Unix epoch."""

    sec: int
    nsec: int

    @classmethod
    def now(cls) -> EventTime:
        return cls(*divmod(_time.time_ns(), _BILLION))

    def to_bytes(self) -> bytes:
        return event_time_bytes(self.sec, self.nsec)

    @property
    def ns(self) -> int:
        return self.sec * _BILLION + self.nsec


def event_time_bytes(sec: int, nsec: int) -> bytes:
    """msgpack EventTime: ext type 0 as fixext8 (d7 00, u32 BE sec, u32 BE nsec)."""
    return b"\xd7\x00" + _SEC_NSEC.pack(sec, nsec)


def to_event_time(t: Any = None) -> tuple[int, int]:
    """Convert None (now), int/float seconds, EventTime, (sec, nsec) or datetime to (sec, nsec)."""
    if t is None:
        return divmod(_time.time_ns(), _BILLION)
    if isinstance(t, tuple):  # EventTime or (sec, nsec)
        sec, nsec = t
    elif isinstance(t, int):
        sec, nsec = t, 0
    elif isinstance(t, float):
        sec, nsec = divmod(round(t * _BILLION), _BILLION)
    elif isinstance(t, _dt.datetime):
        if t.tzinfo is None:
            t = t.astimezone()  # naive datetimes are local time, as datetime.timestamp() says
        delta = t - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
        ns = (delta.days * 86400 + delta.seconds) * _BILLION + delta.microseconds * 1000
        sec, nsec = divmod(ns, _BILLION)
    else:
        msg = f"unsupported time value {t!r}"
        raise TypeError(msg)
    if not (0 <= sec <= 0xFFFFFFFF and 0 <= nsec < _BILLION):
        msg = f"time out of EventTime range: sec={sec} nsec={nsec}"
        raise ValueError(msg)
    return sec, nsec


def _packb(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def encode_entry(sec: int, nsec: int, record_bytes: bytes) -> bytes:
    """One packed-forward entry: msgpack ``[EventTime, record]`` from an already packed record."""
    return _ENTRY_HEAD + _SEC_NSEC.pack(sec, nsec) + record_bytes


def _bin_header(n: int) -> bytes:
    if n < 0x100:
        return b"\xc4" + bytes((n,))
    if n < 0x10000:
        return b"\xc5" + struct.pack(">H", n)
    return b"\xc6" + struct.pack(">I", n)


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + struct.pack(">H", n)
    return b"\xdd" + struct.pack(">I", n)


def _raw_str(b: bytes) -> bytes:
    """A msgpack str holding arbitrary bytes (not necessarily UTF-8)."""
    n = len(b)
    if n < 32:
        head = bytes((0xA0 | n,))
    elif n < 0x100:
        head = b"\xd9" + bytes((n,))
    elif n < 0x10000:
        head = b"\xda" + struct.pack(">H", n)
    else:
        head = b"\xdb" + struct.pack(">I", n)
    return head + b


def _options(size: int | None, chunk: str | None, compressed: bool) -> dict:
    opt: dict[str, Any] = {}
    if size is not None:
        opt["size"] = size
    if chunk is not None:
        opt["chunk"] = chunk
    if compressed:
        opt["compressed"] = "gzip"
    return opt


def encode_packed(
    tag: str, entries: bytes, count: int, chunk: str | None = None, *, compress: bool = False
) -> bytes:
    """PackedForward (or CompressedPackedForward with ``compress``) frame.

    ``entries`` is the concatenation of ``count`` msgpack ``[time, record]`` entries.
    """
    payload = gzip.compress(entries, compresslevel=6, mtime=0) if compress else entries
    return (
        b"\x93"
        + _packb(tag)
        + _bin_header(len(payload))
        + payload
        + _packb(_options(count, chunk, compress))
    )


def encode_forward(tag: str, entries: bytes, count: int, options: dict | None = None) -> bytes:
    """Forward mode frame ``[tag, [[time, record], ...](, options)]`` from concatenated entries."""
    head = b"\x93" if options else b"\x92"
    out = head + _packb(tag) + _array_header(count) + entries
    if options:
        out += _packb(options)
    return out


def encode_message(
    tag: str, sec: int, nsec: int, record_bytes: bytes, options: dict | None = None
) -> bytes:
    """Message mode frame ``[tag, time, record(, options)]`` from an already packed record."""
    head = b"\x94" if options else b"\x93"
    out = head + _packb(tag) + event_time_bytes(sec, nsec) + record_bytes
    if options:
        out += _packb(options)
    return out


# ---------------------------------------------------------------------------
# decoding
# ---------------------------------------------------------------------------


def _ext_hook(code: int, data: bytes) -> Any:
    if code == 0 and len(data) == 8:
        return EventTime(*_SEC_NSEC.unpack(data))
    return msgpack.ExtType(code, data)


def make_unpacker(**kw: Any) -> msgpack.Unpacker:
    """A streaming unpacker that turns ext type 0 into EventTime."""
    kw.setdefault("raw", False)
    kw.setdefault("unicode_errors", "surrogateescape")
    kw.setdefault("strict_map_key", False)
    kw.setdefault("max_buffer_size", 256 * 1024 * 1024)
    return msgpack.Unpacker(ext_hook=_ext_hook, **kw)


class Frame(NamedTuple):
    """A decoded forward frame."""

    mode: str  # "message" | "forward" | "packed" | "compressed"
    tag: str
    entries: list  # [(EventTime | int, record), ...]
    options: dict  # as sent, including "size" / "compressed" when present
    entries_bytes: bytes | None  # the uncompressed packed payload (packed/compressed only)


def _time_ok(t: Any) -> bool:
    return isinstance(t, (EventTime, int)) and not isinstance(t, bool)


def _entry(ent: Any, kind: str) -> tuple[Any, dict]:
    """Checks one ``[time, record]`` entry of a packed or forward frame."""
    if not (isinstance(ent, list) and len(ent) == 2 and _time_ok(ent[0])):
        msg = f"{kind} entry must be [time, record]"
        raise ProtocolError(msg)
    if not isinstance(ent[1], dict):
        msg = "record must be a map"
        raise ProtocolError(msg)
    return (ent[0], ent[1])


def frame_from_object(obj: Any) -> Frame:
    """Validate and interpret one msgpack-decoded frame array."""
    if not isinstance(obj, (list, tuple)) or not 2 <= len(obj) <= 4:
        msg = "a frame must be an array of 2 to 4 elements"
        raise ProtocolError(msg)
    tag = obj[0]
    if not isinstance(tag, str):
        msg = "frame tag must be a string"
        raise ProtocolError(msg)
    second = obj[1]
    if isinstance(second, (bytes, bytearray)):
        options = obj[2] if len(obj) > 2 else {}
        if not isinstance(options, dict) or len(obj) > 3:
            msg = "packed forward options must be a map"
            raise ProtocolError(msg)
        comp = options.get("compressed")
        if comp is None:
            mode, payload = "packed", bytes(second)
        elif comp == "gzip":
            mode = "compressed"
            try:
                payload = gzip.decompress(second)
            except (OSError, EOFError) as e:
                msg = f"bad gzip payload: {e}"
                raise ProtocolError(msg) from e
        else:
            msg = f"unknown compression {comp!r}"
            raise ProtocolError(msg)
        unp = make_unpacker()
        unp.feed(payload)
        entries = []
        end = 0
        try:
            for ent in unp:
                end = unp.tell()
                entries.append(_entry(ent, "packed"))
        except (msgpack.ExtraData, ValueError) as e:
            if isinstance(e, ProtocolError):
                raise
            msg = f"bad packed entries: {e}"
            raise ProtocolError(msg) from e
        if end != len(payload):
            msg = "truncated packed entries"
            raise ProtocolError(msg)
        return Frame(mode, tag, entries, options, payload)
    if isinstance(second, list):
        options = obj[2] if len(obj) > 2 else {}
        if not isinstance(options, dict) or len(obj) > 3:
            msg = "forward options must be a map"
            raise ProtocolError(msg)
        entries = [_entry(ent, "forward") for ent in second]
        return Frame("forward", tag, entries, options, None)
    if _time_ok(second):
        if len(obj) < 3 or not isinstance(obj[2], dict):
            msg = "message record must be a map"
            raise ProtocolError(msg)
        options = obj[3] if len(obj) > 3 else {}
        if not isinstance(options, dict):
            msg = "message options must be a map"
            raise ProtocolError(msg)
        return Frame("message", tag, [(second, obj[2])], options, None)
    msg = "unrecognised frame"
    raise ProtocolError(msg)


def decode_frame(data: bytes) -> Frame:
    """Decode exactly one complete frame."""
    unp = make_unpacker()
    unp.feed(data)
    try:
        obj = unp.unpack()
    except msgpack.OutOfData as e:
        msg = "truncated frame"
        raise ProtocolError(msg) from e
    if unp.tell() != len(data):
        msg = "trailing bytes after frame"
        raise ProtocolError(msg)
    return frame_from_object(obj)


# ---------------------------------------------------------------------------
# shared-key handshake
# ---------------------------------------------------------------------------


def _b(v: str | bytes) -> bytes:
    return v.encode("utf-8") if isinstance(v, str) else bytes(v)


def ping_digest(
    shared_key_salt: bytes, hostname: str | bytes, nonce: bytes, shared_key: str | bytes
) -> str:
    """hex(sha512(salt + hostname + nonce + key)): PING (client host) or PONG (server host)."""
    h = hashlib.sha512()
    for part in (shared_key_salt, hostname, nonce, shared_key):
        h.update(_b(part))
    return h.hexdigest()


def password_digest(auth_salt: bytes, username: str, password: str) -> str:
    """hex(sha512(auth_salt + username + password)), or "" when the server sent no auth salt."""
    if not auth_salt:
        return ""
    return hashlib.sha512(_b(auth_salt) + _b(username) + _b(password)).hexdigest()


def parse_helo(obj: Any) -> tuple[bytes, bytes, bool]:
    """HELO message (decoded with raw=True) -> (nonce, auth_salt, keepalive)."""
    if not (isinstance(obj, (list, tuple)) and len(obj) == 2 and obj[0] in (b"HELO", "HELO")):
        msg = f"expected HELO, got {obj!r:.80}"
        raise HandshakeError(msg)
    opts = obj[1]
    if not isinstance(opts, dict):
        msg = "HELO options must be a map"
        raise HandshakeError(msg)
    opts = {_b(k): v for k, v in opts.items()}
    nonce = opts.get(b"nonce")
    auth = opts.get(b"auth", b"")
    if not isinstance(nonce, (bytes, str)) or not isinstance(auth, (bytes, str)):
        msg = "HELO nonce/auth must be str or bin"
        raise HandshakeError(msg)
    return _b(nonce), _b(auth), bool(opts.get(b"keepalive", True))


def build_ping(
    client_hostname: str,
    shared_key_salt: bytes,
    nonce: bytes,
    shared_key: str,
    auth_salt: bytes = b"",
    username: str = "",
    password: str = "",
) -> bytes:
    """PING message: salt and digests written as msgpack str, like Fluentd."""
    digest = ping_digest(shared_key_salt, client_hostname, nonce, shared_key)
    if auth_salt:
        user, pw = username, password_digest(auth_salt, username, password)
    else:
        user, pw = "", ""
    return (
        b"\x96"
        + _packb("PING")
        + _packb(client_hostname)
        + _raw_str(shared_key_salt)
        + _packb(digest)
        + _packb(user)
        + _packb(pw)
    )


def build_pong(
    server_hostname: str,
    shared_key_salt: bytes,
    nonce: bytes,
    shared_key: str,
    *,
    auth_ok: bool = True,
    reason: str = "",
) -> bytes:
    digest = ping_digest(shared_key_salt, server_hostname, nonce, shared_key) if auth_ok else ""
    return _packb(["PONG", auth_ok, reason, server_hostname, digest])


def parse_pong(obj: Any, shared_key_salt: bytes, nonce: bytes, shared_key: str) -> str:
    """Check a PONG (decoded with raw=True); return the server hostname or raise HandshakeError."""
    if not (isinstance(obj, (list, tuple)) and len(obj) == 5 and obj[0] in (b"PONG", "PONG")):
        msg = f"expected PONG, got {obj!r:.80}"
        raise HandshakeError(msg)
    _, ok, reason, server_hostname, digest = obj
    if ok is not True:
        msg = f"server refused authentication: {_b(reason or b'').decode('utf-8', 'replace')}"
        raise HandshakeError(msg)
    if not isinstance(server_hostname, (bytes, str)) or not isinstance(digest, (bytes, str)):
        msg = "malformed PONG"
        raise HandshakeError(msg)
    expected = ping_digest(shared_key_salt, _b(server_hostname), nonce, shared_key)
    if not hmac.compare_digest(expected.encode(), _b(digest)):
        msg = "PONG digest mismatch: the server does not know the shared key"
        raise HandshakeError(msg)
    return _b(server_hostname).decode("utf-8", "replace")
