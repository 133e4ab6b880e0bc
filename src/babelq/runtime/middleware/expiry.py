"""Expired messages are dead-lettered, never handled (docs/standard.md §6, ``meta.expire_at``).

A message whose ``meta.expire_at`` (epoch ms) has passed is stale: acting on it late can be
worse than not acting (a payment authorisation that timed out). It goes to the dead-letter
queue with reason ``failed`` and ``cause: "expired"`` (the three canonical reasons stay
untouched), so it can still be inspected or redriven.
"""

from __future__ import annotations

from babelq.envelope import now_ms
from babelq.runtime import rules
from babelq.runtime.message import Message
from babelq.runtime.middleware import Binding, Next
from babelq.runtime.outcome import EXPIRED, Outcome


class ExpiryMiddleware(Binding):
    """Short-circuits messages past their ``meta.expire_at``."""

    def bind(self, call_next: Next) -> Next:
        is_expired = rules.is_expired

        def expiry(message: Message) -> Outcome:
            expire_at = message.envelope.expire_at
            if expire_at is not None:
                now = now_ms()
                if is_expired(expire_at, now):
                    return Outcome.dead_letter(
                        rules.REASON_FAILED,
                        error=rules.expired_error(expire_at, now),
                        cause=rules.EXPIRED,
                        label=EXPIRED,
                    )
            return call_next(message)

        return expiry
