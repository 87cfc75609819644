"""The encoder and decoder against the shared vectors in sdk/vectors/vectors.json."""

from __future__ import annotations

import gzip
import json
import pathlib

import msgpack
import pytest

from nagare_logger import protocol as p

VECTORS = json.loads(
    (pathlib.Path(__file__).resolve().parents[2] / "vectors" / "vectors.json").read_text("utf-8")
)
FRAMES = VECTORS["frames"]
HANDSHAKES = VECTORS["handshake"]


def _pack_record(rec: dict) -> bytes:
    return msgpack.packb(rec, use_bin_type=True)


def _entries_bytes(vec: dict) -> bytes:
    return b"".join(
        p.encode_entry(e["sec"], e["nsec"], _pack_record(e["record"])) for e in vec["entries"]
    )


def test_vector_file_is_not_empty():
    assert len(VECTORS["event_time"]) >= 5
    assert {f["mode"] for f in FRAMES} == {"message", "forward", "packed", "compressed"}
    assert len(HANDSHAKES) >= 3


@pytest.mark.parametrize("vec", VECTORS["event_time"], ids=lambda v: f"{v['sec']}.{v['nsec']}")
def test_event_time(vec):
    assert p.event_time_bytes(vec["sec"], vec["nsec"]).hex() == vec["hex"]
    assert p.EventTime(vec["sec"], vec["nsec"]).to_bytes().hex() == vec["hex"]
    decoded = msgpack.unpackb(bytes.fromhex(vec["hex"]), ext_hook=p._ext_hook)
    assert decoded == p.EventTime(vec["sec"], vec["nsec"])


def _encode(vec: dict) -> bytes:
    ents = _entries_bytes(vec)
    opts = vec["options"]
    mode = vec["mode"]
    if mode == "message":
        (e,) = vec["entries"]
        return p.encode_message(vec["tag"], e["sec"], e["nsec"], _pack_record(e["record"]), opts)
    if mode == "forward":
        return p.encode_forward(vec["tag"], ents, len(vec["entries"]), opts)
    return p.encode_packed(
        vec["tag"],
        ents,
        len(vec["entries"]),
        opts.get("chunk"),
        compress=(mode == "compressed"),
    )


def _check_decoded(frame: p.Frame, vec: dict) -> None:
    assert frame.mode == vec["mode"]
    assert frame.tag == vec["tag"]
    got = [{"sec": t.sec, "nsec": t.nsec, "record": r} for t, r in frame.entries]
    assert got == vec["entries"]
    opts = dict(frame.options)
    if vec["mode"] in ("packed", "compressed"):
        assert opts.pop("size") == len(vec["entries"])
    if vec["mode"] == "compressed":
        assert opts.pop("compressed") == "gzip"
    assert opts == vec["options"]


@pytest.mark.parametrize("vec", FRAMES, ids=lambda v: v["name"])
def test_frame_encode_decode(vec):
    ents = _entries_bytes(vec)
    assert ents.hex() == vec["entries_hex"]
    mine = _encode(vec)
    theirs = bytes.fromhex(vec["hex"])
    if vec["mode"] == "compressed":
        # gzip bytes differ between implementations: compare what they decode to
        f_mine = p.decode_frame(mine)
        assert f_mine.entries_bytes.hex() == vec["entries_hex"]
        _check_decoded(f_mine, vec)
        obj = msgpack.unpackb(theirs, raw=False)
        assert gzip.decompress(obj[1]).hex() == vec["entries_hex"]
    else:
        assert mine.hex() == vec["hex"]
    f = p.decode_frame(theirs)
    _check_decoded(f, vec)
    if vec["mode"] in ("packed", "compressed"):
        assert f.entries_bytes.hex() == vec["entries_hex"]


@pytest.mark.parametrize("vec", HANDSHAKES, ids=lambda v: v["client_hostname"])
def test_handshake(vec):
    salt = bytes.fromhex(vec["shared_key_salt_hex"])
    nonce = bytes.fromhex(vec["nonce_hex"])
    auth = bytes.fromhex(vec["auth_salt_hex"])
    key = vec["shared_key"]

    assert p.ping_digest(salt, vec["client_hostname"], nonce, key) == vec["ping_digest"]
    assert p.ping_digest(salt, vec["server_hostname"], nonce, key) == vec["pong_digest"]
    assert p.password_digest(auth, vec["username"], vec["password"]) == vec["password_digest"]

    helo = msgpack.unpackb(bytes.fromhex(vec["helo_hex"]), raw=True)
    assert p.parse_helo(helo) == (nonce, auth, True)

    ping = p.build_ping(
        vec["client_hostname"], salt, nonce, key, auth, vec["username"], vec["password"]
    )
    assert ping.hex() == vec["ping_hex"]

    pong_bytes = bytes.fromhex(vec["pong_hex"])
    pong = msgpack.unpackb(pong_bytes, raw=True)
    assert p.parse_pong(pong, salt, nonce, key) == vec["server_hostname"]
    assert p.build_pong(vec["server_hostname"], salt, nonce, key).hex() == vec["pong_hex"]

    # one changed digest character must be rejected
    bad = list(pong)
    bad[4] = bytes([bad[4][0] ^ 0x01]) + bad[4][1:]
    with pytest.raises(p.HandshakeError):
        p.parse_pong(bad, salt, nonce, key)
    # and so must a wrong key
    with pytest.raises(p.HandshakeError):
        p.parse_pong(pong, salt, nonce, key + "x")


def test_decode_rejects_garbage():
    with pytest.raises(p.ProtocolError):
        p.decode_frame(msgpack.packb([1, 2, 3]))
    with pytest.raises(p.ProtocolError):
        p.decode_frame(msgpack.packb(["tag", b"\x92\x01", {"size": 1}]))
    with pytest.raises(p.ProtocolError):
        p.decode_frame(msgpack.packb(["tag", b"xx", {"compressed": "gzip"}]))
    with pytest.raises(p.ProtocolError):
        p.decode_frame(bytes.fromhex(FRAMES[0]["hex"])[:-1])
