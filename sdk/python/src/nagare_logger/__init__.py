"""nagare-logger: a buffered, asynchronous Fluentd forward-protocol client.

from nagare_logger import Client
log = Client("127.0.0.1:24224")
log.emit("app.access", {"path": "/", "status": 200})
log.close()
"""

from .client import AckTimeoutError, BufferFullError, Client, Server, Stats, UndeliveredError
from .handler import NagareHandler
from .protocol import EventTime, HandshakeError, ProtocolError

__all__ = [
    "AckTimeoutError",
    "BufferFullError",
    "Client",
    "EventTime",
    "HandshakeError",
    "NagareHandler",
    "ProtocolError",
    "Server",
    "Stats",
    "UndeliveredError",
]
__version__ = "0.1.0"
