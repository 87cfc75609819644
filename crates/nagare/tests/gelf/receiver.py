"""A GELF receiver that is not nagare's: takes GELF over UDP (chunks joined
as GELF 1.1 specifies them; gzip, zlib or plain, decoded by Python's gzip
and zlib modules) and over TCP (NUL-ended), and writes each message's JSON
as a line of OUT with the transport: {"via": "udp", "gelf": {...}}.

usage: receiver.py UDP_PORT TCP_PORT OUT
"""
import gzip
import json
import socket
import sys
import threading
import zlib

udp_port, tcp_port, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
out = open(out_path, "a", buffering=1)
lock = threading.Lock()


def emit(via, payload):
    if payload[:2] == b"\x1f\x8b":
        payload = gzip.decompress(payload)
    elif payload[:1] == b"\x78":
        payload = zlib.decompress(payload)
    line = json.dumps({"via": via, "gelf": json.loads(payload)})
    with lock:
        out.write(line + "\n")


def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("127.0.0.1", udp_port))
    pending = {}
    while True:
        d, _ = s.recvfrom(65536)
        if d[:2] != b"\x1e\x0f":
            emit("udp", d)
            continue
        mid, seq, count = d[2:10], d[10], d[11]
        parts = pending.setdefault(mid, [None] * count)
        parts[seq] = d[12:]
        if all(p is not None for p in parts):
            del pending[mid]
            emit("udp", b"".join(parts))


def tcp():
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", tcp_port))
    ls.listen(8)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=conn, args=(c,), daemon=True).start()


def conn(c):
    buf = b""
    while True:
        d = c.recv(65536)
        if not d:
            return
        buf += d
        while b"\x00" in buf:
            m, buf = buf.split(b"\x00", 1)
            emit("tcp", m)


threading.Thread(target=udp, daemon=True).start()
threading.Thread(target=tcp, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
