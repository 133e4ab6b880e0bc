"""What the consume path decided for one delivery, as a value.

Middleware and handlers never touch the transport. The chain returns an :class:`Outcome`
(ack, release, fail, dead-letter) and one place, :mod:`babelq.runtime.disposition`, turns it into
broker calls. Keeping the decision a value lets middleware look at what happened inside it
(the idempotency middleware remembers an id only when the outcome succeeded; the metrics
middleware counts outcomes) without exceptions crossing every layer.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Action(enum.Enum):
    """The broker operation an outcome asks for."""

    ACK = "ack"  #: done: remove the message
    RELEASE = "release"  #: put the same bytes back, visible after ``delay_ms``
    FAIL = "fail"  #: a failed attempt: retry with attempts+1 and backoff, or dead-letter when exhausted
    DEAD_LETTER = "dead_letter"  #: move to ``<queue>.dlq`` now, with ``reason``


# Labels: the counter each outcome is recorded under (see babelq.runtime.counters).
HANDLED = "handled"
FAILED = "failed"
DUPLICATE = "duplicates_skipped"
EXPIRED = "expired"
DEFERRED = "deferred"
UNKNOWN_URN = "unknown_urn"
REJECTED = "rejected"
SCHEMA_INVALID = "schema_invalid"  #: data breaking its URN's schema or the handler's payload type
UNSTARTED = "unstarted"
UNAVAILABLE = "unavailable"

#: How long a message put back because a dependency was down waits by default (the App's
#: ``unavailable_delay_ms`` replaces it on the consume path).
UNAVAILABLE_DELAY_MS = 5_000


@dataclass(frozen=True, slots=True)
class Outcome:
    """The verdict on one message.

    ``label`` names what happened (``handled``, ``duplicates_skipped``, ``expired``...) and
    is the counter it is recorded under. ``reason``/``cause`` go into the ``dead_letter``
    block; ``error`` is the exception (or text) that caused a failure.
    """

    action: Action
    label: str = HANDLED
    delay_ms: int = 0
    reason: str | None = None
    cause: str | None = None
    error: BaseException | str | None = None

    @property
    def succeeded(self) -> bool:
        """Whether the message was handled successfully (acked and not skipped)."""
        return self.action is Action.ACK and self.label == HANDLED

    @classmethod
    def ack(cls, label: str = HANDLED) -> Outcome:
        """Remove the message; ``label`` says why (``handled`` when the handler succeeded)."""
        return _HANDLED if label == HANDLED else cls(Action.ACK, label)

    @classmethod
    def release(cls, delay_ms: int, label: str) -> Outcome:
        """Put the unchanged message back, visible again after ``delay_ms``."""
        return cls(Action.RELEASE, label, delay_ms=max(0, int(delay_ms)))

    @classmethod
    def unavailable(cls, error: BaseException | str, delay_ms: int = UNAVAILABLE_DELAY_MS) -> Outcome:
        """Something the message needs (a store, a database, an API) is down: put it back unchanged.

        Infrastructure failure is never the message's fault, so this is a release, not a failed
        attempt: the body (and its ``attempts``) stays as it was and it is never dead-lettered.
        """
        return cls(Action.RELEASE, UNAVAILABLE, delay_ms=max(0, int(delay_ms)), error=error)

    @classmethod
    def failed(
        cls, error: BaseException | str, *, cause: str | None = None, label: str = FAILED
    ) -> Outcome:
        """A failed attempt: retried with backoff until the attempts run out, then dead-lettered."""
        return cls(Action.FAIL, label, error=error, cause=cause)

    @classmethod
    def dead_letter(
        cls,
        reason: str,
        *,
        error: BaseException | str | None = None,
        cause: str | None = None,
        label: str = REJECTED,
    ) -> Outcome:
        """Dead-letter now, without retrying (``reason`` is failed, unknown_urn or poison)."""
        return cls(Action.DEAD_LETTER, label, reason=reason, error=error, cause=cause)


_HANDLED = Outcome(Action.ACK, HANDLED)
