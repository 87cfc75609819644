"""Conformance driver for the Python library (protocol: sdk/conformance/README.md)."""

from __future__ import annotations

import json
import logging
import os
import ssl
import sys
import time

from nagare_logger import Client
from nagare_logger.handler import NagareHandler


def main() -> None:
    client: Client | None = None
    seqs: dict[str, int] = {}
    refused = [0]  # connection attempts refused (the runner waits on it, not on sleeps)

    def on_error(e: BaseException) -> None:
        if isinstance(e, ConnectionRefusedError):
            refused[0] += 1

    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        try:
            if cmd == "configure":
                o = json.loads(arg)
                client = Client(
                    o["servers"],
                    spill_path=o.get("spill_path"),
                    require_ack=o.get("require_ack", False),
                    backoff_base=o.get("backoff_base_ms", 100) / 1000,
                    backoff_max=o.get("backoff_max_ms", 30_000) / 1000,
                    on_error=on_error,
                    tls=ssl.create_default_context(cafile=o["tls_ca"]) if "tls_ca" in o else False,
                    **({"buffer_max_bytes": o["buffer_bytes"]} if "buffer_bytes" in o else {}),
                    **({"overflow": o["overflow"]} if "overflow" in o else {}),
                )
                reply = {"ok": True}
            elif cmd == "emit":
                tag, n = arg.split()
                start = seqs.get(tag, 0)
                seqs[tag] = start + int(n)
                accepted = sum(client.emit(tag, {"seq": i}) for i in range(start, start + int(n)))
                reply = {"accepted": accepted}
            elif cmd == "log":
                # through the logging integration: message "seq N", seq also an extra field
                tag, n = arg.split()
                start = seqs.get(tag, 0)
                seqs[tag] = start + int(n)
                logger = logging.getLogger(f"conformance.{tag}")
                if not logger.handlers:
                    logger.addHandler(NagareHandler(tag, client=client))
                    logger.setLevel(logging.INFO)
                    logger.propagate = False
                for i in range(start, start + int(n)):
                    logger.info("seq %d", i, extra={"seq": i})
                reply = {"logged": int(n)}
            elif cmd == "close":
                t0 = time.monotonic()
                ok = client.close(int(arg) / 1000)
                reply = {"closed": ok, "ms": round((time.monotonic() - t0) * 1000)}
            elif cmd == "stats":
                s = client.stats
                # kept: events still in the spill file (after close: what it left there)
                reply = {
                    "sent": s.sent,
                    "dropped": s.dropped,
                    "kept": s.spilled,
                    "buffered": s.buffered,
                    "connect_failures": refused[0],
                }
            elif cmd == "fork":
                # the child emits and closes on its own; the parent goes on
                tag, n = arg.split()
                pid = os.fork()
                if pid == 0:
                    ok = all(client.emit(tag, {"seq": i}) for i in range(int(n)))
                    ok = client.close(10) and ok
                    os._exit(0 if ok else 1)
                _, status = os.waitpid(pid, 0)
                reply = {"child_ok": os.WEXITSTATUS(status) == 0}
            elif cmd == "quit":
                return
            else:
                reply = {"error": f"unknown command {cmd!r}"}
        except Exception as e:  # reported to the runner, which fails the scenario
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
