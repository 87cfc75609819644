#!/usr/bin/env python3
"""Generate sdk/vectors/vectors.json: shared forward-protocol test vectors.

Every nagare client library checks its encoder and decoder against this file,
so the bytes must be reproducible in every language.  See README.md for the
format and for the record rules that make that possible.

Run:  python3 sdk/vectors/generate.py          (needs `pip install msgpack`)
The output is deterministic: running it twice gives the same file.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import pathlib
import struct
import sys

import msgpack

OUT = pathlib.Path(__file__).with_name("vectors.json")

MAX_SAFE_INT = 2**53 - 1  # integers stay exact in every JSON parser (JavaScript)


# ---------------------------------------------------------------------------
# encoding helpers
# ---------------------------------------------------------------------------


def event_time(sec: int, nsec: int) -> msgpack.ExtType:
    """Forward EventTime: ext type 0, 8 bytes (u32 BE seconds, u32 BE nanoseconds)."""
    assert 0 <= sec <= 0xFFFFFFFF and 0 <= nsec <= 999_999_999
    return msgpack.ExtType(0, struct.pack(">II", sec, nsec))


def pack(obj) -> bytes:
    # use_bin_type=True: str -> msgpack str, bytes -> msgpack bin.
    # Floats are always float64 (use_single_float defaults to False).
    return msgpack.packb(obj, use_bin_type=True)


def check_record(obj, path="record"):
    """Enforce the cross-language record rules (see README.md)."""
    if isinstance(obj, dict):
        keys = list(obj.keys())
        for k in keys:
            if not isinstance(k, str):
                raise TypeError(f"{path}: map keys must be strings")
        enc = [k.encode("utf-8") for k in keys]
        if enc != sorted(enc):
            raise ValueError(f"{path}: keys not in ascending order: {keys}")
        # UTF-16 code unit order (Java, JavaScript) must agree with UTF-8 byte order
        u16 = [k.encode("utf-16-be") for k in keys]
        if u16 != sorted(u16):
            raise ValueError(f"{path}: key order differs between UTF-8 and UTF-16")
        for k, v in obj.items():
            check_record(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            check_record(v, f"{path}[{i}]")
    elif isinstance(obj, bool) or obj is None or isinstance(obj, str):
        pass
    elif isinstance(obj, int):
        if abs(obj) > MAX_SAFE_INT:
            raise ValueError(f"{path}: integer {obj} is outside +-(2^53-1)")
    elif isinstance(obj, float):
        if not math.isfinite(obj) or obj.is_integer():
            raise ValueError(
                f"{path}: floats must be finite and non-integral ({obj}) so JSON keeps them floats"
            )
    else:
        raise TypeError(f"{path}: unsupported type {type(obj)}")


def entry_bytes(sec: int, nsec: int, record: dict) -> bytes:
    return pack([event_time(sec, nsec), record])


def frame(name, mode, tag, entries, options=None):
    options = dict(options or {})
    for e in entries:
        check_record(e["record"])
    entries_bin = b"".join(
        entry_bytes(e["sec"], e["nsec"], e["record"]) for e in entries
    )

    if mode == "message":
        assert len(entries) == 1, "a Message frame carries exactly one event"
        e = entries[0]
        arr = [tag, event_time(e["sec"], e["nsec"]), e["record"]]
        if options:
            arr.append(options)
        raw = pack(arr)
    elif mode == "forward":
        arr = [tag, [[event_time(e["sec"], e["nsec"]), e["record"]] for e in entries]]
        if options:
            arr.append(options)
        raw = pack(arr)
    elif mode in ("packed", "compressed"):
        opt = {"size": len(entries)}  # key order: size, chunk, compressed
        if "chunk" in options:
            opt["chunk"] = options["chunk"]
        payload = entries_bin
        if mode == "compressed":
            opt["compressed"] = "gzip"
            payload = gzip.compress(entries_bin, compresslevel=6, mtime=0)
        raw = pack([tag, payload, opt])
    else:
        raise ValueError(mode)

    # self-check: decoding gives back what we put in
    dec = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    assert dec[0] == tag
    if mode in ("packed", "compressed"):
        body = dec[1] if mode == "packed" else gzip.decompress(dec[1])
        assert body == entries_bin

    return {
        "name": name,
        "mode": mode,
        "tag": tag,
        "entries": entries,
        "options": options,
        "hex": raw.hex(),
        "entries_hex": entries_bin.hex(),
    }


# ---------------------------------------------------------------------------
# event times
# ---------------------------------------------------------------------------

EVENT_TIMES = [
    (0, 0),
    (0, 1),
    (1, 999_999_999),
    (1_763_770_800, 123_456_789),  # 2025-11-22T00:20:00.123456789Z
    (2_147_483_648, 500_000_000),  # past the signed 32-bit range (2038)
    (4_294_967_295, 0),
    (4_294_967_295, 999_999_999),  # max u32 seconds, max nanoseconds
]


def event_time_vectors():
    out = []
    for sec, nsec in EVENT_TIMES:
        b = pack(event_time(sec, nsec))
        assert b[:2] == b"\xd7\x00" and len(b) == 10
        out.append({"sec": sec, "nsec": nsec, "hex": b.hex()})
    return out


# ---------------------------------------------------------------------------
# frames
# ---------------------------------------------------------------------------

T0 = 1_763_770_800

SIMPLE = [
    {"sec": T0, "nsec": 0, "record": {"message": "hello", "seq": 0}},
    {"sec": T0, "nsec": 1, "record": {"message": "world", "seq": 1}},
    {"sec": T0 + 1, "nsec": 999_999_999, "record": {"message": "again", "seq": 2}},
]

TYPES_RECORD = {
    "bool_f": False,
    "bool_t": True,
    "float": 1.5,
    "float_neg": -0.25,
    "float_pi": 3.141592653589793,
    "float_tiny": 1e-300,
    "int_neg_fix": -1,
    "int_neg_fix_min": -32,
    "int_neg_i16": -129,
    "int_neg_i32": -32769,
    "int_neg_i64": -2147483649,
    "int_neg_i8": -33,
    "int_neg_max_safe": -MAX_SAFE_INT,
    "int_pos_fix": 127,
    "int_pos_u16": 256,
    "int_pos_u32": 65536,
    "int_pos_u64": 4294967296,
    "int_pos_u8": 128,
    "int_zero": 0,
    "max_safe": MAX_SAFE_INT,
    "nil": None,
    "str_empty": "",
    "str_fix31": "a" * 31,
    "str_str8": "b" * 32,
}

NESTED_RECORD = {
    "arr": [1, "two", 3.5, None, True, [], {}],
    "empty_arr": [],
    "empty_map": {},
    "kubernetes": {
        "container": {"image": "nginx:1.27", "name": "web"},
        "labels": {"app": "shop", "tier": "frontend"},
        "namespace": "default",
        "pod": "web-7d4b9c-xkq2p",
    },
    "matrix": [[1, 2], [3, [4, [5, {"deep": "yes"}]]]],
}

UNICODE_RECORD = {
    "emoji": "log \U0001f600 \U0001f680 done",
    "ja": "こんにちは世界",
    "mixed": "Zoë · naïve · 中文 · русский · ελληνικά",
    "rtl": "שלום עולם",
    "名前": "流れ",
}


def repeat_to(n: int) -> str:
    pat = "abcdefghijklmnopqrstuvwxyz0123456789-ABCDEFGHIJKLMNOPQRSTUVWXYZ_"
    return (pat * (n // len(pat) + 1))[:n]


CHUNK_A = "AAECAwQFBgcICQoLDA0ODw=="  # base64 of bytes 0..15
CHUNK_B = "bmFnYXJlLWNodW5rLWlkLTE="  # base64 of b"nagare-chunk-id-1"


def frame_vectors():
    frames = []
    modes = ["message", "forward", "packed", "compressed"]

    # the same simple batch in every mode, with and without a chunk option
    for mode in modes:
        ents = SIMPLE[:1] if mode == "message" else SIMPLE
        frames.append(frame(f"{mode}_simple", mode, "app.access", ents))
        frames.append(
            frame(f"{mode}_simple_chunk", mode, "app.access", ents, {"chunk": CHUNK_A})
        )

    # a message frame with an option map (chunk)
    frames.append(
        frame(
            "message_option_map",
            "message",
            "app.audit",
            [{"sec": T0, "nsec": 42, "record": {"action": "login", "user": "alice"}}],
            {"chunk": CHUNK_B},
        )
    )

    # all the scalar types, every mode
    for mode in modes:
        frames.append(
            frame(
                f"{mode}_types",
                mode,
                "app.types",
                [{"sec": T0, "nsec": 123_456_789, "record": TYPES_RECORD}],
            )
        )

    # nested records, several entries
    nested = [
        {"sec": T0, "nsec": 1, "record": NESTED_RECORD},
        {
            "sec": T0,
            "nsec": 2,
            "record": {"a": {"b": {"c": {"d": [True, False, None]}}}},
        },
    ]
    for mode in ("forward", "packed", "compressed"):
        frames.append(frame(f"{mode}_nested", mode, "app.nested", nested))
    frames.append(frame("message_nested", "message", "app.nested", nested[:1]))

    # unicode tag and values
    uni = [
        {"sec": T0, "nsec": 5, "record": UNICODE_RECORD},
        {"sec": T0, "nsec": 6, "record": {"msg": "второе событие", "n": -7}},
    ]
    for mode in ("forward", "packed", "compressed"):
        frames.append(
            frame(f"{mode}_unicode", mode, "アプリ.ログ.ü", uni, {"chunk": CHUNK_B})
        )
    frames.append(frame("message_unicode", "message", "アプリ.ログ.ü", uni[:1]))

    # an empty record
    for mode in modes:
        frames.append(
            frame(
                f"{mode}_empty_record",
                mode,
                "app.empty",
                [{"sec": 0, "nsec": 0, "record": {}}],
            )
        )

    # event-time edge cases inside a packed frame
    frames.append(
        frame(
            "packed_time_edges",
            "packed",
            "app.time",
            [
                {"sec": s, "nsec": n, "record": {"i": i}}
                for i, (s, n) in enumerate(EVENT_TIMES)
            ],
        )
    )

    # a 300-byte string (str16) in every mode
    for mode in modes:
        frames.append(
            frame(
                f"{mode}_str16",
                mode,
                "app.big",
                [{"sec": T0, "nsec": 0, "record": {"message": repeat_to(300)}}],
            )
        )

    # many entries: the packed bin grows past 255 bytes (bin16)
    many = [
        {
            "sec": T0 + i,
            "nsec": i * 1000,
            "record": {"message": repeat_to(100), "seq": i},
        }
        for i in range(20)
    ]
    frames.append(
        frame("packed_bin16_many", "packed", "bench.load", many, {"chunk": CHUNK_A})
    )
    frames.append(frame("forward_many", "forward", "bench.load", many))

    # one 70000-byte string (str32; the packed payload needs bin32)
    frames.append(
        frame(
            "packed_str32",
            "packed",
            "app.huge",
            [{"sec": T0, "nsec": 7, "record": {"message": repeat_to(70000)}}],
        )
    )

    names = [f["name"] for f in frames]
    assert len(names) == len(set(names)), "duplicate frame names"
    return frames


# ---------------------------------------------------------------------------
# handshake
# ---------------------------------------------------------------------------


class RawStr:
    """Bytes that must be written as a msgpack *str* (not bin), e.g. a non-UTF-8 nonce."""

    def __init__(self, b: bytes):
        self.b = b


def pack_with_raw_str(obj) -> bytes:
    """msgpack-pack obj; RawStr values become str headers followed by the raw bytes."""
    out = bytearray()

    def w(o):
        if isinstance(o, RawStr):
            n = len(o.b)
            if n < 32:
                out.append(0xA0 | n)
            elif n < 256:
                out.extend(b"\xd9" + bytes([n]))
            elif n < 65536:
                out.extend(b"\xda" + struct.pack(">H", n))
            else:
                out.extend(b"\xdb" + struct.pack(">I", n))
            out.extend(o.b)
        elif isinstance(o, list):
            n = len(o)
            out.extend(bytes([0x90 | n]) if n < 16 else b"\xdc" + struct.pack(">H", n))
            for x in o:
                w(x)
        elif isinstance(o, dict):
            n = len(o)
            out.extend(bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n))
            for k, v in o.items():
                w(k)
                w(v)
        else:
            out.extend(pack(o))

    w(obj)
    return bytes(out)


def sha512_hex(*parts: bytes) -> str:
    h = hashlib.sha512()
    for p in parts:
        h.update(p)
    return h.hexdigest()


def handshake(
    *,
    shared_key,
    shared_key_salt: bytes,
    client_hostname,
    server_hostname,
    nonce: bytes,
    auth_salt: bytes,
    username="",
    password="",
    nonce_as_str=False,
    auth_ok=True,
    reason="",
):
    sk = shared_key.encode()
    ping_digest = sha512_hex(shared_key_salt, client_hostname.encode(), nonce, sk)
    pong_digest = sha512_hex(shared_key_salt, server_hostname.encode(), nonce, sk)
    if auth_salt:
        password_digest = sha512_hex(auth_salt, username.encode(), password.encode())
    else:
        # no user authentication: username and password digest are both ""
        assert username == "" and password == ""
        password_digest = ""

    # HELO from the server.  Fluentd writes nonce/auth as binary; one vector
    # writes the nonce as a msgpack str holding arbitrary (non-UTF-8) bytes.
    helo_opts = {
        "nonce": RawStr(nonce) if nonce_as_str else nonce,
        "auth": auth_salt,
        "keepalive": True,
    }
    helo = pack_with_raw_str(["HELO", helo_opts])
    # PING: salt and digests as msgpack str.
    ping = pack_with_raw_str(
        [
            "PING",
            client_hostname,
            RawStr(shared_key_salt),
            ping_digest,
            username,
            password_digest,
        ]
    )
    pong = pack(["PONG", auth_ok, reason, server_hostname, pong_digest])

    # self-check the HELO decodes to the raw nonce either way
    d = msgpack.unpackb(helo, raw=True)
    assert d[0] == b"HELO" and d[1][b"nonce"] == nonce and d[1][b"auth"] == auth_salt

    return {
        "shared_key": shared_key,
        "shared_key_salt_hex": shared_key_salt.hex(),
        "client_hostname": client_hostname,
        "server_hostname": server_hostname,
        "nonce_hex": nonce.hex(),
        "auth_salt_hex": auth_salt.hex(),
        "username": username,
        "password": password,
        "ping_digest": ping_digest,
        "password_digest": password_digest,
        "pong_digest": pong_digest,
        "helo_hex": helo.hex(),
        "ping_hex": ping.hex(),
        "pong_hex": pong.hex(),
    }


def handshake_vectors():
    return [
        # shared key only, nonce as bin (what Fluentd sends)
        handshake(
            shared_key="secret",
            shared_key_salt=b"0123456789abcdef0123456789abcdef",
            client_hostname="client.example",
            server_hostname="server.example",
            nonce=bytes(range(16)),
            auth_salt=b"",
        ),
        # shared key + user/password
        handshake(
            shared_key="s3cr3t-key",
            shared_key_salt=b"fedcba9876543210fedcba9876543210",
            client_hostname="app-01",
            server_hostname="nagare-01",
            nonce=bytes.fromhex("8f1e2d3c4b5a69788796a5b4c3d2e1f0"),
            auth_salt=bytes.fromhex("a1b2c3d4e5f60718293a4b5c6d7e8f90"),
            username="alice",
            password="p@ssw0rd",
        ),
        # nonce written as a msgpack str holding non-UTF-8 bytes; unicode hostnames and key
        handshake(
            shared_key="ключ-鍵",
            shared_key_salt=b"00112233445566778899aabbccddeeff",
            client_hostname="クライアント",
            server_hostname="serveur-é",
            nonce=b"\xff\xfe\x00\x80\xc3\x28\xa0\xa1\xe2\x28\xa1\xf0\x90\x28\xbc\x80",
            auth_salt=b"",
            nonce_as_str=True,
        ),
        # user/password with an empty password, non-UTF-8 nonce as str, auth salt as bin
        handshake(
            shared_key="k",
            shared_key_salt=b"5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
            client_hostname="c",
            server_hostname="s",
            nonce=b"\x80" * 16,
            auth_salt=b"\x00\xff" * 8,
            username="bob",
            password="",
            nonce_as_str=True,
        ),
    ]


def main() -> int:
    doc = {
        "event_time": event_time_vectors(),
        "frames": frame_vectors(),
        "handshake": handshake_vectors(),
    }
    text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
    OUT.write_text(text, encoding="utf-8")
    print(
        f"wrote {OUT} ({len(text)} bytes): {len(doc['event_time'])} event times, "
        f"{len(doc['frames'])} frames, {len(doc['handshake'])} handshakes"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
