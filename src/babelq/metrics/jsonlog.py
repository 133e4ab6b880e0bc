"""One JSON object per log line, carrying the message's ``trace_id`` and ``meta.id``.

The runtime's :class:`~babelq.runtime.context.MessageContextFilter` stamps the message in
hand on each record; :class:`JsonFormatter` writes it out (``-`` outside a handler) so log
pipelines can join lines to traces and envelopes without parsing text.
"""

from __future__ import annotations

import json
import logging
import time
from typing import IO

from babelq.runtime.context import MessageContextFilter


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", "trace_id", "meta.id"[, "exc"]}`` per line."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "trace_id": getattr(record, "trace_id", "-"),
            "meta.id": getattr(record, "message_id", "-"),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure_json_logging(
    level: int = logging.INFO, *, logger: logging.Logger | None = None, stream: IO[str] | None = None
) -> logging.Handler:
    """Send ``logger``'s records (the root by default) as JSON lines to ``stream`` (stderr)."""
    handler: logging.Handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(MessageContextFilter())
    target = logger or logging.getLogger()
    target.addHandler(handler)
    target.setLevel(level)
    return handler


def use_json_format(logger: logging.Logger | None = None) -> None:
    """Switch the handlers already on ``logger`` (the root by default) to JSON lines."""
    for handler in (logger or logging.getLogger()).handlers:
        handler.setFormatter(JsonFormatter())
        if not any(isinstance(f, MessageContextFilter) for f in handler.filters):
            handler.addFilter(MessageContextFilter())
