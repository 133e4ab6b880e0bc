"""Counts what the handler chain decided for each message.

Every outcome carries a label (``handled``, ``failed``, ``duplicates_skipped``,
``expired``, ``deferred``, ``unknown_urn``...) and this middleware adds one to that counter.
What the runtime then did at the broker (retried, dead-lettered by reason, released) is
counted where it happens, in :mod:`babelq.runtime.disposition`.
"""

from __future__ import annotations

from babelq.runtime.counters import Counters
from babelq.runtime.message import Message
from babelq.runtime.middleware import Next
from babelq.runtime.outcome import Outcome


class MetricsMiddleware:
    """Increments the counter named by each outcome's label."""

    def __init__(self, counters: Counters) -> None:
        self.counters = counters

    def __call__(self, message: Message, call_next: Next) -> Outcome:
        outcome = call_next(message)
        self.counters.incr(outcome.label)
        return outcome
