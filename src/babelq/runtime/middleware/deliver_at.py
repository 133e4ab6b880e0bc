"""Early messages wait: a ``meta.deliver_at`` in the future is put back, not handled.

Producers ask for a delay through the broker's native delay (``App.publish`` derives it
from ``deliver_at``), so this is the safety net for brokers without one, clocks that
disagree, or messages moved by hand. The message is released unchanged with the remaining
delay (capped by the disposer at the transport's maximum; it is simply re-checked when it
comes back).
"""

from __future__ import annotations

from babelq.envelope import now_ms
from babelq.runtime import rules
from babelq.runtime.message import Message
from babelq.runtime.middleware import Binding, Next
from babelq.runtime.outcome import DEFERRED, Outcome


class DeliverAtMiddleware(Binding):
    """Releases messages whose ``meta.deliver_at`` is still ahead, with the remaining delay."""

    def bind(self, call_next: Next) -> Next:
        deferred_ms = rules.deferred_ms

        def deliver_at(message: Message) -> Outcome:
            due = message.envelope.deliver_at
            if due is not None:
                remaining = deferred_ms(due, now_ms())
                if remaining > 0:
                    return Outcome.release(remaining, DEFERRED)
            return call_next(message)

        return deliver_at
