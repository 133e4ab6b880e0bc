"""A dependency that is down puts the message back: never a failed attempt, never a dead letter.

House rule: infrastructure failure is never the message's fault. A handler, a store or a
feature middleware says "what I need is down" by raising
:class:`~babelq.errors.UnavailableError` (the idempotency stores do for lost connections);
the router turns that into :meth:`Outcome.unavailable <babelq.runtime.outcome.Outcome.unavailable>`.
This middleware, outside the router, gives every such outcome the App's
``unavailable_delay_ms`` and says so in the log:

* the message is released unchanged (same bytes, same ``attempts``) and comes back after the
  delay; it is counted as ``unavailable`` (and ``released``), not as ``failed``;
* one WARNING line, without a traceback, names the message and the error; during a long
  outage further lines are folded into one summary every few seconds instead of one per
  message (each message still gets a DEBUG line, with the traceback).

An ``UnavailableError`` that escapes the chain below (a middleware that did not catch it) is
handled the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

from babelq.errors import UnavailableError
from babelq.runtime.message import Message
from babelq.runtime.middleware import Binding, Next
from babelq.runtime.outcome import UNAVAILABLE, Outcome
from babelq.urls import one_line

#: Seconds between two WARNING lines about messages put back (the rest are summed up).
LOG_EVERY = 5.0


class UnavailableMiddleware(Binding):
    """Releases messages whose dependencies are down after ``delay_ms``, logging without flooding."""

    def __init__(self, delay_ms: int, log: logging.Logger) -> None:
        self.delay_ms = delay_ms
        self.log = log
        self._lock = threading.Lock()
        self._next_line = 0.0
        self._folded = 0

    def bind(self, call_next: Next) -> Next:
        put_back = self._put_back

        def unavailable(message: Message) -> Outcome:
            try:
                outcome = call_next(message)
            except UnavailableError as exc:
                outcome = Outcome.unavailable(exc)
            if outcome.label != UNAVAILABLE:
                return outcome
            return put_back(message, outcome)

        return unavailable

    def _put_back(self, message: Message, outcome: Outcome) -> Outcome:
        outcome = replace(outcome, delay_ms=self.delay_ms)
        self._report(message, outcome)
        return outcome

    def _report(self, message: Message, outcome: Outcome) -> None:
        error = outcome.error
        why = one_line(error, typed=True) if isinstance(error, BaseException) else str(error)
        extra = {"trace_id": message.trace_id, "message_id": message.id}
        if self.log.isEnabledFor(logging.DEBUG):
            self.log.debug(
                "put back %s id=%s: unavailable", message.urn, message.id,
                exc_info=error if isinstance(error, BaseException) else None, extra=extra,
            )  # fmt: skip
        now = time.monotonic()
        with self._lock:
            if now < self._next_line:
                self._folded += 1
                return
            folded, self._folded = self._folded, 0
            self._next_line = now + LOG_EVERY
        more = f" ({folded} more put back since the last line)" if folded else ""
        self.log.warning(
            "put back %s id=%s trace_id=%s for %d ms: a dependency is unavailable (%s); "
            "not counted as an attempt%s",
            message.urn, message.id, message.trace_id, self.delay_ms, why, more, extra=extra,
        )  # fmt: skip
