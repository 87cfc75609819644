#!/usr/bin/env python3
"""The floor of benches/elasticsearch.sh: POSTs pre-built `_bulk` bodies of
the documents nagare's elasticsearch output writes (same action line with
an `_id` of the same length, same document: `@timestamp`, `seq` and `message`, as `nagare gen` sends them)
from CONC connections at once, as fast as the server takes them, and
prints one line: events, seconds, events/s.

    elasticsearch-floor.py URL INDEX N BATCH CONC MESSAGE

The bodies are built before the clock starts; every item must answer 2xx
(else it exits 1), so the floor is what the server takes, not what it refuses.
"""
import base64
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse


def main():
    url, index, n, batch, conc, message = sys.argv[1:7]
    n, batch, conc = int(n), int(batch), int(conc)
    u = urllib.parse.urlsplit(url)
    ts = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    bodies = []
    for start in range(0, n, batch):
        chunk = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        lines = []
        for i in range(start, min(start + batch, n)):
            lines.append(json.dumps({"index": {"_index": index, "_id": f"{chunk}-{i - start}"}}, separators=(",", ":")))
            lines.append(json.dumps({"@timestamp": ts, "seq": i, "message": message}, separators=(",", ":")))
        bodies.append(("\n".join(lines) + "\n").encode())
    lock = threading.Lock()
    todo = list(reversed(bodies))
    failed = []

    def worker():
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        while True:
            with lock:
                if not todo:
                    return
                body = todo.pop()
            c.request("POST", "/_bulk?filter_path=errors,items.*.status,items.*.error", body,
                      {"Content-Type": "application/x-ndjson"})
            r = c.getresponse()
            a = json.loads(r.read())
            if r.status != 200 or a.get("errors"):
                failed.append((r.status, str(a)[:300]))
                return

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    if failed:
        print("floor: refused:", failed[0], file=sys.stderr)
        sys.exit(1)
    print(f"{n} {secs:.3f} {n / secs:.0f}")


main()
