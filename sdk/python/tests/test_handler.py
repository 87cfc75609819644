"""logging integration."""

from __future__ import annotations

import logging
import time

from fwdserver import ForwardServer
from nagare_logger import Client, NagareHandler

FAST = {"backoff_base": 0.02, "backoff_max": 0.2}


def test_handler_sends_log_records():
    with ForwardServer() as srv:
        handler = NagareHandler("app.log", servers=srv.address, **FAST)
        log = logging.getLogger("test.handler")
        log.setLevel(logging.DEBUG)
        log.propagate = False
        log.addHandler(handler)
        try:
            before = time.time()
            log.info("hello %s", "world", extra={"request_id": "r-1", "user": {"id": 7}})
            try:
                raise ValueError("boom")
            except ValueError:
                log.exception("failed")
            log.warning("with stack", stack_info=True)
        finally:
            log.removeHandler(handler)
            handler.close()
        assert srv.wait_for(3)
        (t0, et0, r0), (_, _, r1), (_, _, r2) = srv.events
        assert t0 == "app.log"
        assert r0["message"] == "hello world"
        assert r0["level"] == "INFO"
        assert r0["logger"] == "test.handler"
        assert r0["function"] == "test_handler_sends_log_records"
        assert r0["request_id"] == "r-1"
        assert r0["user"] == {"id": 7}
        assert isinstance(r0["line"], int)
        assert abs(et0.sec + et0.nsec / 1e9 - before) < 5
        assert "exception" not in r0
        assert r1["level"] == "ERROR"
        assert "ValueError: boom" in r1["exception"]
        assert "Traceback" in r1["exception"]
        assert "stack" in r2 and "test_handler_sends_log_records" in r2["stack"]


def test_handler_with_formatter_and_level_tags_and_shared_client():
    with ForwardServer() as srv:
        client = Client(srv.address, **FAST)
        handler = NagareHandler("svc", client=client, tag_level=True)
        handler.setFormatter(logging.Formatter("%(levelname)s:%(message)s"))
        log = logging.getLogger("test.handler.fmt")
        log.propagate = False
        log.setLevel(logging.INFO)
        log.addHandler(handler)
        try:
            log.info("one")
            log.error("two", extra={"obj": object()})  # not msgpack-able: sent as str()
        finally:
            log.removeHandler(handler)
            handler.close()  # does not close a client it does not own
        assert client.emit("svc.direct", {"still": "open"})
        assert client.close(5)
        assert srv.wait_for(3)
        tags = [t for t, _, _ in srv.events]
        assert tags == ["svc.info", "svc.error", "svc.direct"]
        assert srv.events[0][2]["message"] == "INFO:one"
        assert srv.events[1][2]["obj"].startswith("<object object")


def test_handler_never_raises_when_server_is_down():
    handler = NagareHandler("x", servers="127.0.0.1:1", overflow="drop", buffer_max_bytes=200)
    log = logging.getLogger("test.handler.down")
    log.propagate = False
    log.addHandler(handler)
    try:
        for i in range(100):
            log.warning("event %d", i)
    finally:
        log.removeHandler(handler)
    assert handler.client.stats.dropped > 0
    handler.client.close(0)
    handler.close()
