"""A Scribe server built from Apache Thrift's Python library and code that
the Thrift compiler generated from scribe.thrift (its folder is argv[1]).

    server.py GEN_DIR PORT OUT_FILE TRY_LATER_CALLS [CERT KEY [CA]]

Answers TRY_LATER (taking nothing) to the Log calls whose numbers (0 for
the first call received) are in TRY_LATER_CALLS, a comma-separated list
("" for none), and OK to the others, appending each entry taken to OUT_FILE as a JSON line
{"category": ..., "message": ...}.

With CERT and KEY it serves over TLS (Thrift's TSSLServerSocket); with CA
too, clients must present a certificate that chains to CA (mTLS).
"""
import json
import ssl
import sys
import threading

sys.path.insert(0, sys.argv[1])

from scribe import scribe  # noqa: E402  (generated)
from scribe.ttypes import ResultCode  # noqa: E402
from thrift.protocol import TBinaryProtocol  # noqa: E402
from thrift.server import TServer  # noqa: E402
from thrift.transport import TSocket, TSSLSocket, TTransport  # noqa: E402

port, out_path = int(sys.argv[2]), sys.argv[3]
refuse = {int(n) for n in sys.argv[4].split(",") if n}
tls = sys.argv[5:]


class Handler:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = 0
        self.out = open(out_path, "a", encoding="utf-8")

    def Log(self, messages):
        with self.lock:
            self.calls += 1
            if self.calls - 1 in refuse:
                return ResultCode.TRY_LATER
            for m in messages:
                self.out.write(json.dumps({"category": m.category, "message": m.message}) + "\n")
            self.out.flush()
            return ResultCode.OK


if tls:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls[0], tls[1])
    if len(tls) == 3:
        context.load_verify_locations(cafile=tls[2])
        context.verify_mode = ssl.CERT_REQUIRED
    # The context checks the client's chain; Thrift's default callback would
    # also want the peer's IP address in the client's certificate.
    listen = TSSLSocket.TSSLServerSocket(host="127.0.0.1", port=port, ssl_context=context,
                                         validate_callback=lambda cert, addr: None)
else:
    listen = TSocket.TServerSocket(host="127.0.0.1", port=port)

server = TServer.TThreadedServer(
    scribe.Processor(Handler()),
    listen,
    TTransport.TFramedTransportFactory(),
    TBinaryProtocol.TBinaryProtocolFactory(),
    daemon=True,
)
server.serve()
