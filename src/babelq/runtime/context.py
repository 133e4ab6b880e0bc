"""The message being handled on this thread, for log lines and trace propagation.

The tracing middleware sets it around each handler call. Two things read it:

* :class:`MessageContextFilter`, a ``logging.Filter`` that stamps ``trace_id`` and
  ``message_id`` on every log record (add it to your handler and use ``%(trace_id)s`` in the
  format), so a handler's own log lines carry the trace without passing it around;
* :meth:`babelq.runtime.App.publish`, which continues the current trace when called from a
  handler without an explicit ``trace_id`` (a downstream message copies the inbound one).
"""

from __future__ import annotations

import contextvars
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from babelq.runtime.message import Message

_current: contextvars.ContextVar[Message | None] = contextvars.ContextVar("babelq_message", default=None)


def current_message() -> Message | None:
    """The message whose handler is running in this context, if any."""
    return _current.get()


def enter(message: Message) -> contextvars.Token[Message | None]:
    """Make ``message`` current; pass the token to :func:`leave`."""
    return _current.set(message)


def leave(token: contextvars.Token[Message | None]) -> None:
    _current.reset(token)


class MessageContextFilter(logging.Filter):
    """Adds ``trace_id`` and ``message_id`` (``-`` outside a handler) to every record it sees.

    A record that already carries them (the runtime's own lines pass them explicitly) keeps
    its values.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "trace_id"):
            message = _current.get()
            record.trace_id = message.trace_id if message is not None else "-"
            record.message_id = message.id if message is not None else "-"
        return True
