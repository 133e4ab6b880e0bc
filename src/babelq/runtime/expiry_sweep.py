"""Dead-lettering expired messages that nobody consumes: ``babelq expire`` and idle workers.

A consumer dead-letters a message whose ``meta.expire_at`` has passed when it takes it (the
``expired`` consume rule, :mod:`babelq.runtime.rules`). A message on a queue with no consumer, or
waiting in a delay, would sit there past its time until one comes. A sweep reads the messages
waiting on a queue without reserving them (:meth:`~babelq.transports.base.BaseTransport.scan_waiting`),
and moves those the same rule calls expired to ``<queue>.dlq`` with the same record a worker
writes: the verdict is the runtime's :class:`~babelq.runtime.middleware.expiry.ExpiryMiddleware`
and the record :func:`~babelq.runtime.disposition.dead_letter_now`, so there is one expiry rule
and one record whoever moves the message. No handler runs.

The move is one atomic broker step per page (a Lua script on Redis, a transaction on SQLite)
that removes a message only while it still waits exactly as read and publishes its record in
the same step: a message a worker reserved meanwhile stays the worker's, and a sweep killed at
any moment leaves every message in exactly one place, its queue or the DLQ. Messages that are
not expired, and anything the consume rules judge before expiry (poison, unsupported), are
never written: they stay where they are, byte for byte, in their order.

Transports that cannot show a waiting message without delivering it (AMQP 0-9-1, SQS) refuse
with the reason (:attr:`~babelq.transports.base.BaseTransport.scan_refusal`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from babelq.envelope import decode, dlq_name
from babelq.errors import ConfigurationError, DecodeError
from babelq.runtime.counters import Counters
from babelq.runtime.disposition import dead_letter_now
from babelq.runtime.failpoint import failpoint
from babelq.runtime.message import Message
from babelq.runtime.middleware.expiry import ExpiryMiddleware
from babelq.runtime.outcome import Outcome
from babelq.runtime.pipeline import Processed
from babelq.transports.base import Delivery, Transport

#: crash points (:mod:`babelq.runtime.failpoint`): a page judged, its move not sent; and the move
#: done, nothing counted or reported yet
BEFORE_MOVE = "expire.before_move"
AFTER_MOVE = "expire.after_move"

#: messages read per page (one atomic move per page)
PAGE = 500

_KEEP = Outcome.release(0, "kept")
#: the consume path's expiry step, with "not expired" as what comes after it
_judge = ExpiryMiddleware().bind(lambda message: _KEEP)

log = logging.getLogger("babelq.expire")


def refusal(transport: Transport | type[Transport]) -> str:
    """Why ``transport`` cannot be swept (empty: it can)."""
    return str(getattr(transport, "scan_refusal", "it cannot list waiting messages"))


def check_sweepable(transport: Transport | type[Transport], queue: str = "") -> None:
    """ConfigurationError naming the broker's reason when it cannot be swept."""
    why = refusal(transport)
    if why:
        scheme = getattr(transport, "scheme", "") or getattr(transport, "__name__", "this transport")
        where = f" of queue {queue!r}" if queue else ""
        raise ConfigurationError(
            f"the {scheme} transport cannot dead-letter expired messages{where} without a consumer: {why}"
        )


def judge(delivery: Delivery) -> Processed | None:
    """The dead-letter-now verdict on a waiting message the runtime would dead-letter as expired;
    None for every other message (not expired, no ``expire_at``, or judged before expiry by the
    consume rules: poison and unsupported bodies are left to the worker that takes them)."""
    if delivery.refusal is not None:
        return None
    try:
        envelope = decode(delivery.body)
    except DecodeError:
        return None
    if envelope.expire_at is None:
        return None
    if not envelope.accepts() and envelope.rejection() is not None:
        return None
    message = Message.of(envelope, delivery)
    outcome = _judge(message)
    if outcome is _KEEP:
        return None
    return Processed(delivery, message, outcome)


@dataclass(slots=True)
class SweepResult:
    """What one pass over a queue did: messages ``read``, found ``expired``, ``moved`` to the DLQ
    (an expired message a worker reserved meanwhile is expired but not moved: the worker has it)."""

    queue: str
    read: int = 0
    expired: int = 0
    moved: int = 0

    def as_dict(self) -> dict[str, int | str]:
        return {"queue": self.queue, "read": self.read, "expired": self.expired, "moved": self.moved}


class ExpirySweep:
    """Passes over queues that dead-letter the expired messages waiting on them."""

    def __init__(
        self,
        transport: Transport,
        *,
        counters: Counters | None = None,
        logger: logging.Logger | None = None,
        page: int = PAGE,
    ) -> None:
        check_sweepable(transport)
        if page < 1:
            raise ConfigurationError(f"page: must be >= 1, got {page}")
        self.transport = transport
        self.counters = counters
        self.log = logger or log
        self.page = page

    def sweep(self, queue: str) -> SweepResult:
        """One pass over ``queue`` from its head. A broker error (UnavailableError when it is
        down) is raised as it is; what was moved before it stays moved, the rest stays waiting."""
        transport = self.transport
        dlq = dlq_name(queue)
        result = SweepResult(queue)
        cursor: object = None
        while True:
            page, cursor = transport.scan_waiting(queue, after=cursor, limit=self.page)
            result.read += len(page)
            by_reason: dict[str, list[tuple[Delivery, bytes]]] = {}
            for delivery in page:
                processed = judge(delivery)
                if processed is None:
                    continue
                letter = dead_letter_now(processed)
                if letter.unwritable is not None:
                    self.log.error("cannot re-encode an expired message of %r (%s); dead-lettering its "
                                   "original bytes", queue, letter.unwritable)
                by_reason.setdefault(letter.reason, []).append((delivery, letter.record))
            if by_reason:
                failpoint(BEFORE_MOVE)
                for reason, moves in by_reason.items():
                    moved = transport.dead_letter_waiting(moves, dlq=dlq)
                    result.expired += len(moves)
                    result.moved += moved
                    self._count(reason, moved)
                failpoint(AFTER_MOVE)
            if cursor is None:
                break
        if result.moved:
            self.log.warning("expired %d message(s) waiting on %r: moved to %r (cause expired)",
                             result.moved, queue, dlq)
        return result

    def sweep_all(self, queues: Sequence[str]) -> list[SweepResult]:
        return [self.sweep(queue) for queue in queues]

    def _count(self, reason: str, moved: int) -> None:
        counters = self.counters
        if counters is None or not moved:
            return
        counters.incr("expired", moved)
        counters.incr("dead_lettered", moved)
        counters.incr(f"dead_lettered.{reason}", moved)
