"""Sends GELF to nagare with graypy (a GELF client that is not nagare's):
UDP (zlib, chunked past 1420 bytes) and TCP (NUL-ended), with a bad
datagram and a bad TCP message among the good ones.

usage: send_graypy.py UDP_PORT TCP_PORT N
"""
import logging
import random
import socket
import string
import sys

import graypy

udp_port, tcp_port, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
# Text that does not compress much, so zlib's output still needs chunks.
rnd = random.Random(7)
big = "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(60000))

raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for proto, handler in (
    ("udp", graypy.GELFUDPHandler("127.0.0.1", udp_port, debugging_fields=False)),
    ("tcp", graypy.GELFTCPHandler("127.0.0.1", tcp_port, debugging_fields=False)),
):
    log = logging.getLogger("app." + proto)
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    for i in range(n):
        if i == n // 2:
            if proto == "udp":
                raw.sendto(b"not gelf at all", ("127.0.0.1", udp_port))
            else:
                handler.send(b"{broken json\x00")
        level = logging.WARNING if i % 2 else logging.INFO
        log.log(level, "message %d", i, extra={"seq": i, "proto": proto})
    log.error(big, extra={"seq": n, "proto": proto})
    handler.close()
