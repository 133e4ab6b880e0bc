"""Tracing and logging: every line about a message carries its trace_id and meta.id.

The middleware makes the message current (see :mod:`babelq.runtime.context`) for the rest
of the chain, so log lines written by handlers and feature middleware can carry the trace
through :class:`~babelq.runtime.context.MessageContextFilter`, and ``App.publish`` inside
a handler continues the trace. It logs start and end at DEBUG, cheaply skipped when DEBUG
is off: this runs once per message.
"""

from __future__ import annotations

import logging
import time

from babelq.runtime import context
from babelq.runtime.message import Message
from babelq.runtime.middleware import Binding, Next
from babelq.runtime.outcome import Outcome

logger = logging.getLogger("babelq.runtime")


def log_extra(message: Message) -> dict[str, str]:
    """The ``extra`` mapping that stamps a log record with the message's identity."""
    return {"trace_id": message.trace_id, "message_id": message.id}


class TracingMiddleware(Binding):
    """Sets the current message and logs the handling at DEBUG."""

    def __init__(self, log: logging.Logger = logger) -> None:
        self.log = log

    def bind(self, call_next: Next) -> Next:
        log = self.log
        enter, leave = context.enter, context.leave

        def tracing(message: Message) -> Outcome:
            token = enter(message)
            try:
                if not log.isEnabledFor(logging.DEBUG):
                    return call_next(message)
                started = time.perf_counter()
                log.debug(
                    "handling %s id=%s trace_id=%s attempts=%d",
                    message.urn, message.id, message.trace_id, message.attempts, extra=log_extra(message),
                )
                outcome = call_next(message)
                log.debug(
                    "%s %s id=%s trace_id=%s in %.1f ms",
                    outcome.label, message.urn, message.id, message.trace_id,
                    (time.perf_counter() - started) * 1000, extra=log_extra(message),
                )
                return outcome
            finally:
                leave(token)

        return tracing
