"""The client against the scripted ForwardServer on loopback."""

from __future__ import annotations

import datetime as dt
import os
import ssl
import threading
import time

import msgpack
import pytest

from fwdserver import ForwardServer, free_port
from nagare_logger import (
    BufferFullError,
    Client,
    EventTime,
    HandshakeError,
    UndeliveredError,
    protocol,
)

FAST = {"backoff_base": 0.02, "backoff_max": 0.2, "connect_timeout": 2.0}


def wait_total(servers, n: int, timeout: float = 10.0) -> list[int]:
    """All seq fields received by these servers, once there are at least n."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seqs = [x for s in servers for x in s.seqs()]
        if len(seqs) >= n:
            return sorted(seqs)
        time.sleep(0.01)
    return sorted(x for s in servers for x in s.seqs())


@pytest.fixture
def server():
    srv = ForwardServer().start()
    yield srv
    srv.stop()


def test_emit_delivers_packed_frames_with_nanosecond_time(server):
    c = Client(server.address, **FAST)
    c.emit("app.a", {"seq": 0, "msg": "hello"}, time=EventTime(1_700_000_000, 123_456_789))
    c.emit("app.a", {"seq": 1, "msg": "ünïcode ✓"}, time=1_700_000_001.5)
    c.emit("app.b", {"seq": 2, "nested": {"k": [1, None, True]}})
    assert c.flush(5)
    assert server.wait_for(3)
    by_tag = {t: (et, r) for t, et, r in server.events if r["seq"] != 1}
    assert by_tag["app.a"] == (EventTime(1_700_000_000, 123_456_789), {"seq": 0, "msg": "hello"})
    assert server.records("app.a")[1] == {"seq": 1, "msg": "ünïcode ✓"}
    assert server.events[1][1] == EventTime(1_700_000_001, 500_000_000)
    assert by_tag["app.b"][1] == {"seq": 2, "nested": {"k": [1, None, True]}}
    assert abs(by_tag["app.b"][0].sec - time.time()) < 60
    assert {f.mode for f in server.frames} == {"packed"}
    st = c.stats
    assert (st.sent, st.buffered, st.dropped) == (3, 0, 0)
    assert c.close(5)


def test_one_frame_per_tag_per_batch():
    port = free_port()
    c = Client(f"127.0.0.1:{port}", **FAST)
    # buffered while the server is down; the sender took a first batch when the
    # first event arrived, the rest waits in a second one
    for i in range(300):
        c.emit(f"tag{i % 3}", {"seq": i})
    with ForwardServer(port=port) as srv:
        assert c.close(5)
        assert srv.wait_for(300)
        assert 3 <= len(srv.frames) <= 6
        assert sum(f.options["size"] for f in srv.frames) == 300
        for tag in ("tag0", "tag1", "tag2"):
            frames = [f for f in srv.frames if f.tag == tag]
            assert 1 <= len(frames) <= 2
            seqs = [r["seq"] for f in frames for _, r in f.entries]
            assert seqs == list(range(int(tag[-1]), 300, 3))


def test_batches_many_events_into_few_frames(server):
    c = Client(server.address, **FAST)
    for i in range(5000):
        c.emit("bulk", {"seq": i})
    assert c.close(10)
    assert server.wait_seqs(5000) == list(range(5000))
    assert len(server.frames) < 5000 / 10


def test_close_flushes_everything(server):
    c = Client(server.address, **FAST)
    for i in range(2000):
        c.emit("t", {"seq": i, "pad": "x" * 100})
    assert c.close(10)  # no flush() before
    assert server.wait_seqs(2000) == list(range(2000))
    assert not c.emit("t", {"seq": -1})  # closed: refused and counted
    assert c.stats.dropped == 1


def test_unix_socket(tmp_path):
    path = str(tmp_path / "fwd.sock")
    with ForwardServer(unix_path=path) as srv:
        c = Client(f"unix://{path}", **FAST)
        for i in range(100):
            c.emit("unix", {"seq": i})
        assert c.close(5)
        assert srv.wait_seqs(100) == list(range(100))


def test_nothing_lost_across_server_restart():
    srv = ForwardServer().start()
    c = Client(srv.address, **FAST)
    for i in range(100):
        c.emit("r", {"seq": i})
    assert c.flush(5)
    assert srv.wait_for(100)
    srv.stop()  # graceful: FIN; the client must notice it before writing
    for i in range(100, 200):
        c.emit("r", {"seq": i})
    time.sleep(0.3)  # retries against a dead port
    assert c.stats.buffered == 100
    srv.start()  # same port
    assert c.flush(10)
    assert srv.wait_for(200)
    assert sorted(srv.seqs()) == list(range(200))
    assert c.stats.reconnects >= 1
    assert c.close(5)
    srv.stop()


def test_restart_between_every_event_loses_nothing():
    srv = ForwardServer().start()
    c = Client(srv.address, **FAST)
    for i in range(10):
        c.emit("r", {"seq": i})
        assert c.flush(5)
        # the server read it, then restarts; the client must notice the FIN before
        # its next write (a write into the closed connection would be lost)
        assert srv.wait_for(i + 1)
        srv.stop()
        srv.start()
    assert c.close(5)
    assert srv.wait_for(10)
    assert sorted(srv.seqs()) == list(range(10))
    srv.stop()


def test_backoff_intervals_grow():
    port = free_port()  # nothing listens here
    attempts: list[float] = []
    c = Client(
        f"127.0.0.1:{port}",
        backoff_base=0.02,
        backoff_max=10.0,
        connect_timeout=1.0,
        on_error=lambda e: attempts.append(time.monotonic()),
    )
    c.emit("b", {"seq": 0})
    deadline = time.monotonic() + 5
    while len(attempts) < 7 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(attempts) >= 7
    gaps = [b - a for a, b in zip(attempts, attempts[1:])][:6]
    # delay n is base*2^(n-1) scaled by a random factor in [0.5, 1]: never shrinks
    for a, b in zip(gaps, gaps[1:]):
        assert b >= a * 0.9, gaps
    assert gaps[-1] > 3 * gaps[0], gaps
    assert gaps[5] >= 0.02 * 2**5 * 0.5 * 0.9, gaps
    c.close(0.1)


def test_backoff_is_capped_and_jittered():
    c = Client("127.0.0.1:1", backoff_base=0.1, backoff_max=1.0)
    delays = [c._backoff(n) for n in range(1, 40)]
    assert all(0.05 <= d <= 1.0 for d in delays)
    assert len(set(delays)) > 30  # jitter
    c.close(0)


def test_spill_to_disk_and_drain_in_order(tmp_path):
    port = free_port()
    spill = str(tmp_path / "spill.bin")
    c = Client(
        f"127.0.0.1:{port}",
        buffer_max_bytes=2000,
        overflow="spill",
        spill_path=spill,
        **FAST,
    )
    n = 3000
    for i in range(n):
        assert c.emit("s", {"seq": i, "pad": "y" * 20})
    st = c.stats
    assert st.spilled > n - 200
    assert st.buffered == n
    assert os.path.getsize(spill) > 50_000
    with ForwardServer(port=port) as srv:
        # events keep coming while the spill file drains
        for i in range(n, n + 500):
            c.emit("s", {"seq": i, "pad": "y" * 20})
        assert c.flush(20)
        assert srv.wait_for(n + 500)
        assert srv.wait_seqs(n + 500) == list(range(n + 500))  # in order, no duplicates
        assert c.close(5)
    assert not os.path.exists(spill)  # drained and removed


def test_ack_mode_drains_spill_with_several_frames_in_flight(tmp_path):
    """Draining a spill file in ack mode, the sender writes the next frames before
    the first one's ack is back."""
    port = free_port()
    c = Client(
        f"127.0.0.1:{port}",
        spill_path=str(tmp_path / "window.spill"),
        require_ack=True,
        batch_max_bytes=1024,
        **FAST,
    )
    for i in range(800):
        c.emit("app.window", {"seq": i})
    deadline = time.monotonic() + 5
    while c.stats.spilled < 800:  # the outage moved them to the file
        assert time.monotonic() < deadline, c.stats
        time.sleep(0.01)
    srv = ForwardServer(port=port)
    srv.ack_later = 0.02
    with srv:
        assert c.flush(timeout=20)
        assert srv.wait_seqs(800) == list(range(800))
        assert srv.max_unacked >= 2, f"at most {srv.max_unacked} frame in flight"
    c.close(timeout=1)


def test_spill_file_survives_close_and_is_sent_by_next_client(tmp_path):
    port = free_port()
    spill = str(tmp_path / "keep.spill")
    c = Client(f"127.0.0.1:{port}", buffer_max_bytes=500, spill_path=spill, **FAST)
    for i in range(300):
        c.emit("p", {"seq": i})
    assert not c.close(0.2)  # server down: nothing delivered
    assert c.stats.dropped == 0
    assert os.path.getsize(spill) > 0
    with ForwardServer(port=port) as srv:
        c2 = Client(f"127.0.0.1:{port}", buffer_max_bytes=500, spill_path=spill, **FAST)
        assert c2.flush(10)
        assert srv.wait_seqs(300) == list(range(300))
        c2.emit("p", {"seq": 300})
        assert c2.close(5)
        assert srv.wait_seqs(301) == list(range(301))


def test_torn_spill_tail_is_cut(tmp_path):
    port = free_port()
    spill = str(tmp_path / "torn.spill")
    c = Client(f"127.0.0.1:{port}", buffer_max_bytes=100, spill_path=spill, **FAST)
    for i in range(20):
        c.emit("p", {"seq": i})
    c.close(0.1)
    with open(spill, "ab") as f:
        f.write(b"\x00\x00\x01\x00\x00")  # half a record header
    with ForwardServer(port=port) as srv:
        c2 = Client(f"127.0.0.1:{port}", spill_path=spill, **FAST)
        assert c2.close(10)
        assert srv.wait_seqs(20) == list(range(20))


def test_overflow_drop_counts(tmp_path):
    errors: list[BaseException] = []
    port = free_port()
    c = Client(
        f"127.0.0.1:{port}",
        buffer_max_bytes=1000,
        overflow="drop",
        on_error=errors.append,
        **FAST,
    )
    accepted = sum(c.emit("d", {"seq": i}) for i in range(500))
    assert 0 < accepted < 500
    st = c.stats
    assert st.dropped == 500 - accepted
    assert st.buffered == accepted
    assert st.spilled == 0
    with ForwardServer(port=port) as srv:
        assert c.flush(10)
        assert srv.wait_seqs(accepted) == list(range(accepted))
        assert any(isinstance(e, BufferFullError) for e in errors)
        c.close(5)


def test_overflow_block_waits_for_room():
    port = free_port()
    c = Client(f"127.0.0.1:{port}", buffer_max_bytes=300, overflow="block", **FAST)
    srv = ForwardServer(port=port)
    done = threading.Event()

    def producer():
        for i in range(200):
            c.emit("blk", {"seq": i})
        done.set()

    t = threading.Thread(target=producer)
    t.start()
    time.sleep(0.3)
    assert not done.is_set()  # blocked: buffer full, server down
    assert c.stats.dropped == 0
    srv.start()
    t.join(10)
    assert done.is_set()
    assert c.close(5)
    assert srv.wait_seqs(200) == list(range(200))
    srv.stop()


def test_overflow_block_timeout_drops():
    c = Client("127.0.0.1:1", buffer_max_bytes=100, overflow="block", block_timeout=0.05, **FAST)
    results = [c.emit("blk", {"seq": i}) for i in range(20)]
    assert results[0]
    assert not all(results)
    assert c.stats.dropped == results.count(False)
    c.close(0)


def test_failover_and_return_to_primary():
    p_port = free_port()
    primary = ForwardServer(port=p_port)
    with ForwardServer() as secondary:
        c = Client(
            [f"127.0.0.1:{p_port}", secondary.address],
            primary_check_interval=0.2,
            **FAST,
        )
        for i in range(50):
            c.emit("f", {"seq": i})
        assert c.flush(5)
        assert secondary.wait_seqs(50) == list(range(50))
        assert c.stats.server == secondary.address
        primary.start()
        time.sleep(0.4)
        for i in range(50, 100):
            c.emit("f", {"seq": i})
            time.sleep(0.005)
        assert c.flush(5)
        assert wait_total([primary, secondary], 100) == list(range(100))
        assert primary.seqs()  # went back to the primary
        assert c.stats.server == primary.address
        # primary down again: fail over at once
        primary.stop()
        for i in range(100, 150):
            c.emit("f", {"seq": i})
        assert c.flush(5)
        assert wait_total([primary, secondary], 150) == list(range(150))
        assert c.close(5)


def test_ack_mode_resends_unacked_frames():
    with ForwardServer() as srv:
        srv.withhold_acks = 2  # the first two chunks get no ack
        c = Client(srv.address, require_ack=True, ack_timeout=0.3, **FAST)
        c.emit("ack", {"seq": 0})
        assert c.flush(10)
        c.emit("ack", {"seq": 1})
        assert c.close(10)
        # the first frame was sent three times with the same chunk id, then acked
        assert srv.chunks[0] == srv.chunks[1] == srv.chunks[2]
        assert srv.chunks[3] != srv.chunks[0]
        assert sorted(set(srv.wait_seqs(4))) == [0, 1]
        assert srv.seqs().count(0) == 3
        assert all(f.options.get("chunk") for f in srv.frames)


def test_ack_mode_survives_abortive_server_restart():
    srv = ForwardServer().start()
    c = Client(srv.address, require_ack=True, ack_timeout=1.0, batch_max_bytes=200, **FAST)
    n = 3000

    def restarter():
        for _ in range(3):
            time.sleep(0.05)
            srv.stop(abort=True)  # RST: whatever was unread is lost on the server side
            time.sleep(0.05)
            srv.start()

    t = threading.Thread(target=restarter)
    t.start()
    for i in range(n):
        c.emit("a", {"seq": i})
        if i % 100 == 0:
            time.sleep(0.005)
    t.join()
    assert c.close(20)
    assert srv.wait_for(n)
    assert set(srv.seqs()) == set(range(n))  # at least once
    srv.stop()


def test_shared_key_handshake():
    with ForwardServer(shared_key="s3cret") as srv:
        c = Client(srv.address, shared_key="s3cret", **FAST)
        c.emit("h", {"seq": 0})
        assert c.close(5)
        assert srv.wait_seqs(1) == [0]


def test_user_password_handshake():
    with ForwardServer(shared_key="k", users={"alice": "pw"}) as srv:
        c = Client(srv.address, shared_key="k", username="alice", password="pw", **FAST)
        c.emit("h", {"seq": 0})
        assert c.close(5)
        assert srv.wait_seqs(1) == [0]


@pytest.mark.parametrize(
    ("users", "opts"),
    [
        (None, {"shared_key": "wrong"}),
        ({"alice": "pw"}, {"shared_key": "k", "username": "alice", "password": "bad"}),
        ({"alice": "pw"}, {"shared_key": "k", "username": "mallory", "password": "pw"}),
    ],
)
def test_handshake_rejected(users, opts):
    errors: list[BaseException] = []
    with ForwardServer(shared_key="k", users=users) as srv:
        c = Client(srv.address, on_error=errors.append, **FAST, **opts)
        c.emit("h", {"seq": 0})
        assert not c.flush(0.5)
        assert srv.seqs() == []
        assert srv.auth_failures >= 1
        assert any(isinstance(e, HandshakeError) for e in errors)
        c.close(0)


def test_server_that_does_not_know_the_key_is_rejected():
    """A PONG whose digest was made with another key must not be trusted."""
    errors: list[BaseException] = []

    class Impostor(ForwardServer):
        def _handshake(self, conn):
            real, self.shared_key = self.shared_key, "other"
            try:
                # accepts every client, answers with a digest of the wrong key
                nonce = os.urandom(16)
                conn.sendall(msgpack.packb(["HELO", {"nonce": nonce, "auth": b""}]))
                unp = msgpack.Unpacker(raw=True)
                while True:
                    unp.feed(conn.recv(65536))
                    try:
                        ping = unp.unpack()
                        break
                    except msgpack.OutOfData:
                        continue
                conn.sendall(protocol.build_pong("evil", ping[2], nonce, "other"))
                return True
            finally:
                self.shared_key = real

    with Impostor(shared_key="k") as srv:
        c = Client(srv.address, shared_key="k", on_error=errors.append, **FAST)
        c.emit("h", {"seq": 0})
        assert not c.flush(0.5)
        assert srv.seqs() == []
        assert any("digest" in str(e) for e in errors)
        c.close(0)


def test_tls(tmp_path):
    trustme = pytest.importorskip("trustme")  # a test dependency: installed by [test]
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    with ForwardServer(tls=server_ctx, shared_key="k") as srv:
        c = Client(srv.address, tls=client_ctx, shared_key="k", require_ack=True, **FAST)
        for i in range(100):
            c.emit("tls", {"seq": i})
        assert c.close(5)
        assert srv.wait_seqs(100) == list(range(100))


def test_compressed_frames(server):
    c = Client(server.address, compress=True, **FAST)
    for i in range(100):
        c.emit("z", {"seq": i, "text": "repeat " * 20})
    assert c.close(5)
    assert server.wait_seqs(100) == list(range(100))
    assert {f.mode for f in server.frames} == {"compressed"}


def test_counters_and_error_callback():
    port = free_port()
    errors: list[BaseException] = []
    c = Client(f"127.0.0.1:{port}", on_error=errors.append, **FAST)
    c.emit("c", {"seq": 0})
    time.sleep(0.2)
    assert errors and isinstance(errors[0], ConnectionRefusedError)
    st = c.stats
    assert st.errors == len(errors) or st.errors >= 1
    assert st.buffered == 1 and st.sent == 0 and st.server is None
    with ForwardServer(port=port) as srv:
        assert c.flush(5)
        assert c.stats.sent == 1
        assert srv.wait_seqs(1) == [0]
        assert c.stats.server == srv.address
        srv.stop()
        srv.start()
        c.emit("c", {"seq": 1})
        assert c.flush(5)
        assert c.stats.reconnects == 1
        assert c.close(5)


def test_tag_prefix_and_time_types(server):
    c = Client(server.address, tag_prefix="svc", **FAST)
    c.emit("x", {"i": 0}, time=5)
    c.emit("x", {"i": 1}, time=(6, 7))
    c.emit("x", {"i": 2}, time=dt.datetime(2024, 1, 2, 3, 4, 5, 600000, tzinfo=dt.timezone.utc))
    assert c.close(5)
    assert server.wait_for(3)
    assert [(t, et) for t, et, _ in server.events] == [
        ("svc.x", EventTime(5, 0)),
        ("svc.x", EventTime(6, 7)),
        ("svc.x", EventTime(1704164645, 600_000_000)),
    ]


def test_fork_child_starts_fresh():
    port = free_port()
    c = Client(f"127.0.0.1:{port}", **FAST)
    c.emit("fork", {"seq": 0, "who": "parent-before-fork"})  # buffered: server down
    time.sleep(0.05)
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            st = c.stats
            ok_fresh = st.buffered == 0 and st.sent == 0
            c.emit("fork", {"seq": 1, "who": "child"})
            ok_sent = c.close(10)
            code = 0 if (ok_fresh and ok_sent) else 3
        finally:
            os._exit(code)
    with ForwardServer(port=port) as srv:
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        c.emit("fork", {"seq": 2, "who": "parent"})
        assert c.close(10)
        assert sorted(srv.wait_seqs(3)) == [0, 1, 2]  # the child did not resend the parent's event
        assert srv.connections >= 2


def test_close_without_spill_path_counts_undelivered_events():
    errors: list[BaseException] = []
    c = Client("127.0.0.1:1", on_error=errors.append, **FAST)
    for i in range(10):
        c.emit("u", {"seq": i})
    assert not c.close(0.2)
    st = c.stats
    assert (st.dropped, st.buffered, st.sent) == (10, 0, 0)
    assert any(isinstance(e, UndeliveredError) and "10 event" in str(e) for e in errors)
