"""The idempotency store as runtime middleware: a redelivered message does not run twice.

>>> from babelq.idempotency import MemoryStore
>>> from babelq.idempotency.middleware import IdempotencyMiddleware
>>> from babelq.runtime import App
>>> app = App("memory://", middleware=[IdempotencyMiddleware(MemoryStore())])

docs/standard.md §7 on the runtime's terms (the decision is an outcome, see
:mod:`babelq.runtime.outcome`):

* the key is ``meta.id``; a message without one fails open (the handler runs every time);
* a seen id is skipped and acked (counted as ``duplicates_skipped``);
* an unseen id runs the rest of the chain and is remembered only when the outcome is a
  success; a failure, a release or a dead letter leaves it unmarked, so retries and the
  dead-letter queue still apply;
* with a claiming store (shared by a fleet) the id is claimed atomically first. An id claimed
  by another worker that has not finished is put back with ``busy_delay_ms``, neither acked
  (the other worker may still fail) nor counted as a failed attempt; a failed run releases
  the claim.

A store that is down is not the message's fault (house rule). When ``seen`` or ``claim``
raises :class:`~babelq.errors.UnavailableError` (the Redis and PostgreSQL stores do once
their one reconnect failed) the handler does not run and the message is put back
(:meth:`Outcome.unavailable <babelq.runtime.outcome.Outcome.unavailable>`: released after the
App's ``unavailable_delay_ms``, counted as ``unavailable``, no attempt spent, never
dead-lettered). Other store errors are failed attempts, as any exception in the chain.

If the store cannot remember an id after the handler succeeded, the error is logged and the
message is still acked: failing it would run the handler again, the very thing this
middleware exists to prevent. (Its claim then stays until the claim TTL.) If it cannot
give a claim back after a failed run, the store keeps the claim's owner token, so this
worker's retry of the message takes its own claim again instead of waiting for the TTL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from babelq.errors import UnavailableError
from babelq.idempotency.store import ClaimingStore, IdempotencyStore
from babelq.idempotency.wrap import message_id
from babelq.runtime.message import Message
from babelq.runtime.middleware import Next
from babelq.runtime.outcome import DUPLICATE, Outcome

log = logging.getLogger(__name__)

#: Label (and counter) of a message put back because another worker holds its claim.
CLAIMED_ELSEWHERE = "claimed_elsewhere"


class IdempotencyMiddleware:
    """Skip-and-ack messages whose ``meta.id`` was already handled; remember ids after success."""

    def __init__(
        self,
        store: IdempotencyStore,
        *,
        key: Callable[[Message], str | None] = message_id,
        busy_delay_ms: int = 5_000,
    ) -> None:
        self.store = store
        self.key = key
        self.busy_delay_ms = busy_delay_ms
        self._claiming: ClaimingStore | None = store if isinstance(store, ClaimingStore) else None

    def __call__(self, message: Message, call_next: Next) -> Outcome:
        k = self.key(message)
        if not k:
            return call_next(message)
        claiming = self._claiming
        if claiming is None:
            try:
                seen = self.store.seen(k)
            except UnavailableError as exc:
                return Outcome.unavailable(exc)
            if seen:
                return Outcome.ack(DUPLICATE)
            outcome = call_next(message)
            if outcome.succeeded:
                self._quietly(self.store.remember, k, "remember", message)
            return outcome
        try:
            claimed = claiming.claim(k)
            done = not claimed and claiming.seen(k)
        except UnavailableError as exc:  # the store is down: the handler must not run unguarded
            return Outcome.unavailable(exc)
        if not claimed:
            if done:
                return Outcome.ack(DUPLICATE)
            return Outcome.release(self.busy_delay_ms, CLAIMED_ELSEWHERE)
        try:
            outcome = call_next(message)
        except BaseException:
            self._quietly(claiming.release, k, "release the claim on", message)
            raise
        if outcome.succeeded:
            self._quietly(claiming.remember, k, "remember", message)
        else:
            self._quietly(claiming.release, k, "release the claim on", message)
        return outcome

    @staticmethod
    def _quietly(action: Callable[[str], object], k: str, what: str, message: Message) -> None:
        extra = {"trace_id": message.trace_id, "message_id": message.id}
        try:
            action(k)
        except UnavailableError as exc:  # an outage: one line, the traceback adds nothing
            log.warning(
                "idempotency store unavailable, could not %s message id %r (trace_id=%s): %s",
                what, k, message.trace_id, exc, extra=extra,
            )  # fmt: skip
        except Exception:
            log.exception(
                "idempotency store failed to %s message id %r (trace_id=%s)", what, k, message.trace_id,
                extra=extra,
            )  # fmt: skip
