"""A Scribe client built from Apache Thrift's Python library and code that
the Thrift compiler generated from scribe.thrift (its folder is argv[1]).

    client.py GEN_DIR PORT CALLS PER_CALL CATEGORIES MESSAGE_KIND [CA [CERT KEY]]

Sends CALLS Log calls of PER_CALL entries on one framed connection. Call i
has the category CATEGORIES.split(",")[i % n]; entry s (counted over all
calls) has the message "message <s>" (MESSAGE_KIND "text") or
{"seq": s, "text": "message <s>"} (MESSAGE_KIND "json"). A call answered
TRY_LATER is sent again, after a short pause, until it is answered OK.
Prints {"sent": N, "try_later": K} when done.

With CA, the connection is TLS (Thrift's TSSLSocket) to a server whose
certificate chains to CA and names "localhost"; CERT and KEY are the
client's certificate (mTLS).
"""
import json
import ssl
import sys
import time

sys.path.insert(0, sys.argv[1])

from scribe import scribe  # noqa: E402  (generated)
from scribe.ttypes import LogEntry, ResultCode  # noqa: E402
from thrift.protocol import TBinaryProtocol  # noqa: E402
from thrift.transport import TSocket, TSSLSocket, TTransport  # noqa: E402

port, calls, per_call = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
categories, kind = sys.argv[5].split(","), sys.argv[6]
tls = sys.argv[7:]

if tls:
    context = ssl.create_default_context(cafile=tls[0])
    if len(tls) == 3:
        context.load_cert_chain(tls[1], tls[2])
    # The context checks the name; Thrift's own check uses ssl.match_hostname,
    # which Python 3.12 removed.
    sock = TSSLSocket.TSSLSocket("127.0.0.1", port, ssl_context=context,
                                 server_hostname="localhost",
                                 validate_callback=lambda cert, hostname: None)
else:
    sock = TSocket.TSocket("127.0.0.1", port)
transport = TTransport.TFramedTransport(sock)
client = scribe.Client(TBinaryProtocol.TBinaryProtocol(transport, strictRead=False, strictWrite=True))
transport.open()

def message(s):
    if kind == "json":
        return json.dumps({"seq": s, "text": f"message {s}"})
    return f"message {s}"

seq, try_later = 0, 0
for i in range(calls):
    category = categories[i % len(categories)]
    entries = [LogEntry(category=category, message=message(seq + j)) for j in range(per_call)]
    while client.Log(entries) == ResultCode.TRY_LATER:
        try_later += 1
        time.sleep(0.05)
    seq += per_call
transport.close()
print(json.dumps({"sent": seq, "try_later": try_later}), flush=True)
