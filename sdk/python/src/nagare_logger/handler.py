"""``logging`` integration: NagareHandler sends log records as forward events."""

from __future__ import annotations

import logging
import traceback
from typing import Any

from .client import Client

__all__ = ["NagareHandler"]

# attributes every LogRecord has; anything else came from `extra=`
_STANDARD = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys()
) | {"message", "asctime", "taskName"}


class NagareHandler(logging.Handler):
    """A logging handler that emits each record as one event.

    The record becomes a map with ``message``, ``level``, ``logger``, ``module``,
    ``function``, ``line``, ``process``, ``thread``, ``exception`` (formatted
    traceback, when there is one), ``stack`` (with ``stack_info=True``) and every
    ``extra=`` field. The event time is the record's creation time.

    Pass either a ``client`` (shared, not closed by the handler) or the
    ``Client`` options as keyword arguments (the handler owns that client).
    """

    def __init__(
        self,
        tag: str = "python",
        level: int = logging.NOTSET,
        *,
        client: Client | None = None,
        tag_level: bool = False,
        include_extra: bool = True,
        flush_timeout: float = 10.0,
        **client_options: Any,
    ):
        super().__init__(level)
        if client is not None and client_options:
            msg = "pass either client= or Client options, not both"
            raise TypeError(msg)
        self.tag = tag
        self.tag_level = tag_level
        self.include_extra = include_extra
        self.flush_timeout = flush_timeout
        self._owns_client = client is None
        self.client = client if client is not None else Client(**client_options)

    def to_record(self, record: logging.LogRecord) -> dict:
        # with a formatter, the formatter decides (tracebacks included)
        message = self.format(record) if self.formatter is not None else record.getMessage()
        out: dict[str, Any] = {
            "message": message,
            "level": record.levelname,
            "logger": record.name,
            "module": record.module,
            "function": record.funcName,
            "line": record.lineno,
            "process": record.process,
            "thread": record.threadName,
        }
        if self.formatter is None:
            if record.exc_info and record.exc_info[0] is not None:
                out["exception"] = "".join(traceback.format_exception(*record.exc_info))
            elif record.exc_text:
                out["exception"] = record.exc_text
            if record.stack_info:
                out["stack"] = record.stack_info
        if self.include_extra:
            for k, v in record.__dict__.items():
                if k not in _STANDARD and not k.startswith("_") and k not in out:
                    out[k] = v
        return out

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tag = f"{self.tag}.{record.levelname.lower()}" if self.tag_level else self.tag
            self.client.emit(tag, self.to_record(record), record.created)
        except Exception:
            self.handleError(record)

    def flush(self) -> None:
        self.client.flush(self.flush_timeout)

    def close(self) -> None:
        try:
            if self._owns_client:
                self.client.close(self.flush_timeout)
            else:
                self.client.flush(self.flush_timeout)
        finally:
            super().close()
