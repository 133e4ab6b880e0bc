"""Counts what the handler chain decided for each message.

Every outcome carries a label (``handled``, ``failed``, ``duplicates_skipped``,
``expired``, ``deferred``, ``unknown_urn``...) and this middleware adds one to that counter.
What the runtime then did at the broker (retried, dead-lettered by reason, released) is
counted where it happens, in :mod:`babelq.runtime.disposition`.
"""

from __future__ import annotations

from babelq.runtime.counters import Counters
from babelq.runtime.message import Message
from babelq.runtime.middleware import Binding, Next
from babelq.runtime.outcome import Outcome


class MetricsMiddleware(Binding):
    """Increments the counter named by each outcome's label."""

    def __init__(self, counters: Counters) -> None:
        self.counters = counters

    def bind(self, call_next: Next) -> Next:
        incr = self.counters.incr

        def metrics(message: Message) -> Outcome:
            outcome = call_next(message)
            incr(outcome.label)
            return outcome

        return metrics
