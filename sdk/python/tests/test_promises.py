"""README promises that failed in issue 17: fork, close() after an outage,
spill during an outage, spill drain in batches, counters that add up."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time

from fwdserver import ForwardServer, free_port
from nagare_logger import Client

FAST = {"backoff_base": 0.02, "backoff_max": 0.2, "connect_timeout": 2.0}


def wait_until(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_the_idna_codec_is_imported_before_any_fork():
    # A child forked while the sender thread imports it gets "unknown encoding: idna".
    out = subprocess.run(
        [sys.executable, "-c", "import sys, nagare_logger; print('encodings.idna' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "True"


def test_child_forked_during_the_first_connect_delivers(tmp_path):
    with ForwardServer() as srv:
        for attempt in range(5):
            c = Client(f"localhost:{srv.port}", **FAST)
            c.emit("parent", {"seq": -1})  # starts the sender thread: it is connecting now
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                ok = True
                for i in range(100):
                    ok &= c.emit("child", {"seq": attempt * 100 + i})
                ok &= c.close(10)
                os._exit(0 if ok else 1)
            _, status = os.waitpid(pid, 0)
            assert os.WEXITSTATUS(status) == 0, f"attempt {attempt}: the child's close() failed"
            assert c.close(10)
        assert wait_until(lambda: len(srv.records("child")) >= 500)
        assert sorted(r["seq"] for r in srv.records("child")) == list(range(500))


def test_close_reconnects_at_once_after_a_long_backoff():
    port = free_port()
    errors: list[BaseException] = []
    # the first failed connect starts a 10-20 s backoff
    c = Client(f"127.0.0.1:{port}", backoff_base=20.0, backoff_max=30.0, on_error=errors.append)
    for i in range(1000):
        c.emit("late", {"seq": i})
    assert wait_until(lambda: errors)
    with ForwardServer(port=port) as srv:
        t0 = time.monotonic()
        assert c.close(5)
        assert time.monotonic() - t0 < 5
        assert srv.wait_seqs(1000) == list(range(1000))
    st = c.stats
    assert (st.sent, st.dropped, st.spilled, st.buffered) == (1000, 0, 0, 0)


def test_close_keeps_retrying_until_its_deadline():
    port = free_port()
    c = Client(f"127.0.0.1:{port}", backoff_base=20.0, backoff_max=30.0)
    for i in range(10):
        c.emit("late", {"seq": i})
    srv = ForwardServer(port=port)
    # the server comes up 1 s into close(): close() must still be trying then
    threading.Timer(1.0, srv.start).start()
    try:
        assert c.close(6)
        assert srv.wait_seqs(10) == list(range(10))
    finally:
        wait_until(lambda: srv._running)
        srv.stop()


_OUTAGE_APP = textwrap.dedent(
    """
    import sys, time
    from nagare_logger import Client
    port, spill, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    c = Client(f"127.0.0.1:{port}", spill_path=spill, backoff_base=0.05, backoff_max=0.2)
    for i in range(n):
        c.emit("outage", {"seq": i})
    while c.stats.spilled < n:
        time.sleep(0.01)
    print("spilled", flush=True)
    time.sleep(60)
    """
)


def test_kill_9_during_an_outage_loses_nothing_with_a_spill_path(tmp_path):
    port = free_port()
    spill = str(tmp_path / "app.spill")
    n = 5000
    app = subprocess.Popen(
        [sys.executable, "-c", _OUTAGE_APP, str(port), spill, str(n)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # memory is far from full: the events are spilled because the server is down
        ready, _, _ = select.select([app.stdout], [], [], 20)
        assert ready, "the application never had all events in its spill file"
        assert app.stdout.readline().strip() == "spilled"
    finally:
        app.send_signal(signal.SIGKILL)
        app.wait()
    with ForwardServer(port=port) as srv:
        c = Client(f"127.0.0.1:{port}", spill_path=spill, **FAST)
        assert c.close(10)
        assert srv.wait_seqs(n) == list(range(n))


def test_spilled_events_drain_in_big_frames(tmp_path):
    port = free_port()
    # memory holds a few events: the rest are spilled one record per event
    c = Client(f"127.0.0.1:{port}", buffer_max_bytes=500, spill_path=str(tmp_path / "s"), **FAST)
    n = 3000
    for i in range(n):
        assert c.emit("drain", {"seq": i})
    with ForwardServer(port=port) as srv:
        assert c.close(20)
        assert srv.wait_seqs(n) == list(range(n))
        assert len(srv.frames) < 20


def test_counters_add_up_after_close(tmp_path):
    port = free_port()
    # no spill file: what close() cannot deliver is dropped
    c = Client(f"127.0.0.1:{port}", buffer_max_bytes=2000, **FAST)
    emitted = 500
    for i in range(emitted):
        c.emit("count", {"seq": i})
    assert not c.close(0.3)
    st = c.stats
    assert st.sent + st.dropped + st.spilled == emitted
    assert st.dropped > 0 and st.buffered == 0
    # with a spill file: it keeps them, and spilled says how many are in it
    c = Client(f"127.0.0.1:{port}", buffer_max_bytes=2000, spill_path=str(tmp_path / "c"), **FAST)
    for i in range(emitted):
        c.emit("count", {"seq": i})
    assert not c.close(0.3)
    st = c.stats
    assert (st.sent, st.dropped, st.spilled, st.buffered) == (0, 0, emitted, 0)
