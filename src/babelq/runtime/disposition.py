"""Turning outcomes into broker calls: ack, retry with backoff, dead-letter, release.

This is the only module of the runtime that changes what is on the broker, and it runs on
the one thread that owns the transport (many broker clients are not thread-safe). Acks are
collected by the caller and sent with ``ack_many`` once a batch of handlers finished;
nothing is acked before its handler returned.

Retries go through ``Transport.retry`` with the body's ``attempts`` set to the reconciled
attempts + 1 and the delay given to the broker's native delay; whether a failure is retried,
after how long, and the cause of the dead letter once the attempts ran out are the
:class:`~babelq.runtime.rules.RetryPolicy`'s (shared with settle). ``meta.deliver_at`` is never
written on a retry: ``meta`` is the producer's and immutable (docs/standard.md §2).

Settling never fails on a message it was given, whatever the message holds: a retry whose
body cannot be written goes to the DLQ instead of looping, and a dead letter that cannot be
annotated or encoded falls back to the poison record of the original bytes
(:func:`babelq.envelope.poison_record`), which keeps them exactly. ``attempts`` never goes
beyond signed 64-bit (consumers call a larger one poison): a message already at the maximum
that fails again is dead-lettered. (Otherwise a body decode accepted but encode refused would
come back after every visibility timeout, its ``attempts`` never counted, the DLQ empty.)

When dead-lettering is switched off a message that should be dead-lettered is still never
silently dropped: the ``release`` policy puts it back unchanged with the maximum delay and
logs at ERROR (an operator sees it, the message is kept); only ``delete`` drops it, and
says so at ERROR.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, get_args

from babelq.envelope import annotate, dlq_name, exception_name, poison_record, record_or_poison
from babelq.envelope.constants import INT64_MAX
from babelq.errors import ConfigurationError
from babelq.runtime import rules
from babelq.runtime.backoff import Backoff
from babelq.runtime.counters import Counters
from babelq.runtime.message import Message
from babelq.runtime.outcome import UNSTARTED, Action, Outcome
from babelq.runtime.pipeline import Processed
from babelq.transports.base import Delivery, Transport

#: What happens to a message that must be dead-lettered: ``queue`` moves it to ``<queue>.dlq``;
#: ``release`` keeps it on its queue, released with the maximum delay; ``delete`` acks it.
DeadLetterPolicy = Literal["queue", "release", "delete"]
DEAD_LETTER_POLICIES: tuple[str, ...] = get_args(DeadLetterPolicy)

_ACK = Action.ACK


def _error_text(error: BaseException | str | None) -> str | None:
    if isinstance(error, BaseException):
        return str(error) or exception_name(error)
    return error


def _extra(message: Message | None) -> dict[str, str]:
    if message is None:
        return {"trace_id": "-", "message_id": "-"}
    return {"trace_id": message.trace_id, "message_id": message.id}


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    """How failures are retried and where dead letters go (validated on creation)."""

    max_attempts: int = 3
    backoff: Backoff = field(default_factory=Backoff)
    dead_letter: DeadLetterPolicy = "queue"
    max_delay_ms: int = rules.MAX_DELAY_MS

    def __post_init__(self) -> None:
        if type(self.max_attempts) is not int or self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts: must be an integer >= 1, got {self.max_attempts!r}")
        if self.dead_letter not in DEAD_LETTER_POLICIES:
            raise ConfigurationError(
                f"dead_letter: must be one of {', '.join(DEAD_LETTER_POLICIES)}, got {self.dead_letter!r}"
            )
        if self.max_delay_ms < 0:
            raise ConfigurationError(f"max_delay_ms: must be >= 0, got {self.max_delay_ms}")


class DeadLetter(NamedTuple):
    """What a dead-letter-now outcome writes: the ``record`` for the DLQ, its ``reason``, the
    ``why`` of the log line, and the error that made the annotated record unwritable (the record
    is then the poison record of the original bytes, reason ``poison``), else None."""

    record: bytes
    reason: str
    why: str
    unwritable: Exception | None


def dead_letter_now(processed: Processed) -> DeadLetter:
    """The dead letter of ``processed`` (a dead-letter-now outcome: poison, expired, unknown URN...).

    The one place that writes such a record: the consume path's disposer and the expiry sweep
    (:mod:`babelq.runtime.expiry_sweep`, which dead-letters expired messages no worker took)
    both call it, so an expired message's record is the same whoever moved it."""
    outcome = processed.outcome
    reason = outcome.reason or "failed"
    error = _error_text(outcome.error)
    message = processed.message
    unwritable: Exception | None = None
    if message is None:
        record = poison_record(
            processed.delivery.body,
            original_queue=processed.delivery.queue,
            error=error or "unreadable message",
            cause=outcome.cause,
        )
    else:
        exc = outcome.error if isinstance(outcome.error, BaseException) else None
        attempts = min(max(message.attempts, 0), INT64_MAX)
        record, unwritable = record_or_poison(
            lambda: annotate(
                message.envelope,
                reason,
                original_queue=processed.delivery.queue,
                attempts=attempts,
                error=error,
                exception=exc,
                cause=outcome.cause,
            ).encode(),
            processed.delivery.body,
            original_queue=processed.delivery.queue,
            error=error,
            attempts=attempts,
            cause=outcome.cause,
        )
        if unwritable is not None:
            reason = "poison"
    label = outcome.cause or reason
    why = (error if error.startswith(f"{label}: ") else f"{label}: {error}") if error else label
    return DeadLetter(record, reason, why, unwritable)


class Disposer:
    """Applies outcomes to the transport and counts what it did."""

    def __init__(
        self,
        transport: Transport,
        counters: Counters,
        policy: FailurePolicy,
        log: logging.Logger,
        per_urn: Mapping[str, rules.RetryPolicy] | None = None,
    ) -> None:
        self.transport = transport
        self.counters = counters
        self.max_attempts = policy.max_attempts
        self.backoff = policy.backoff
        self.retry = rules.RetryPolicy(policy.max_attempts, policy.backoff)
        #: a URN's own max_attempts/backoff (``@app.handler(urn, max_attempts=...)``)
        self.per_urn: Mapping[str, rules.RetryPolicy] = dict(per_urn or {})
        self.policy = policy.dead_letter
        self.max_delay_ms = policy.max_delay_ms
        self.log = log

    # -- acks -------------------------------------------------------------------------------
    def flush(self, acks: list[Delivery]) -> None:
        """Ack every delivery in ``acks`` with one batched call, then empty the list."""
        if not acks:
            return
        batch: Sequence[Delivery] = list(acks)
        acks.clear()
        try:
            if len(batch) == 1:
                self.transport.ack(batch[0])
            else:
                self.transport.ack_many(batch)
        except Exception:
            self.counters.incr("disposition_errors")
            self.log.exception(
                "acking %d message(s) failed; they will be delivered again after the visibility timeout",
                len(batch),
            )

    # -- one outcome ----------------------------------------------------------------------------
    def settle(self, processed: Processed, acks: list[Delivery]) -> None:
        """Apply ``processed.outcome``; acks are appended to ``acks`` for :meth:`flush`.

        A transport error is logged and counted, never raised: the reservation then simply
        comes back after the visibility timeout.
        """
        if processed.outcome.action is _ACK:  # most outcomes: nothing to send yet
            acks.append(processed.delivery)
            return
        try:
            self._settle(processed, acks)
        except Exception:
            self.counters.incr("disposition_errors")
            message = processed.message
            self.log.exception(
                "settling %s (%s) failed; it will be delivered again after the visibility timeout",
                message.id if message is not None else "a message", processed.outcome.action.value,
                extra=_extra(message),
            )

    def _settle(self, processed: Processed, acks: list[Delivery]) -> None:
        outcome = processed.outcome
        action = outcome.action
        if action is Action.ACK:
            acks.append(processed.delivery)
        elif action is Action.RELEASE:
            self._release(processed, outcome)
        elif action is Action.FAIL:
            self._fail(processed, outcome, acks)
        else:
            self._dead_letter_now(processed, outcome, acks)

    def _release(self, processed: Processed, outcome: Outcome) -> None:
        delay = min(outcome.delay_ms, self.max_delay_ms)
        self.transport.release(processed.delivery, delay_ms=delay)
        self.counters.incr("unstarted_released" if outcome.label == UNSTARTED else "released")

    def _fail(self, processed: Processed, outcome: Outcome, acks: list[Delivery]) -> None:
        message = processed.message
        if message is None:  # nothing to re-encode: keep the bytes
            self.transport.release(processed.delivery, delay_ms=self.backoff.delay_ms(1))
            self.counters.incr("released")
            return
        retry = self.per_urn.get(message.urn, self.retry) if self.per_urn else self.retry
        runs = retry.runs(message.attempts)
        error = _error_text(outcome.error)
        if retry.retries(message.attempts):
            delay = min(retry.delay_ms(runs), self.max_delay_ms)
            body, unwritable = record_or_poison(  # cannot be written back: dead-letter it rather than loop
                lambda: message.envelope.with_attempts(runs).encode(), processed.delivery.body,
                original_queue=processed.delivery.queue, error=error, attempts=runs, cause=outcome.cause,
            )
            if unwritable is not None:
                self._unencodable(processed, unwritable)
                self._to_dlq(processed, body, "poison", f"retry {runs} cannot be encoded: {unwritable}", acks)
                return
            self.transport.retry(processed.delivery, body, delay_ms=delay)
            self.counters.incr("retried")
            self.log.warning(
                "attempt %d/%d of %s id=%s trace_id=%s failed (%s); retrying in %d ms",
                runs, retry.max_attempts, message.urn, message.id, message.trace_id, error, delay,
                extra=_extra(message),
            )
            return
        runs = min(runs, INT64_MAX)  # at the maximum: dead-lettered, never written as 2**63
        exc = outcome.error if isinstance(outcome.error, BaseException) else None
        cause = retry.exhausted_cause(outcome.cause)
        record, reason = self._record(
            processed,
            lambda: annotate(
                message.envelope.with_attempts(runs),
                "failed",
                original_queue=processed.delivery.queue,
                attempts=runs,
                error=error,
                exception=exc,
                cause=cause,
            ).encode(),
            error=error,
            attempts=runs,
            cause=cause,
            reason="failed",
        )
        self._to_dlq(processed, record, reason, f"failed {runs} time(s): {error}", acks)

    def _dead_letter_now(self, processed: Processed, outcome: Outcome, acks: list[Delivery]) -> None:
        letter = dead_letter_now(processed)
        if letter.unwritable is not None:
            self._unencodable(processed, letter.unwritable)
        self._to_dlq(processed, letter.record, letter.reason, letter.why, acks)

    def _record(
        self,
        processed: Processed,
        build: Callable[[], bytes],
        *,
        error: str | None,
        attempts: int,
        cause: str | None,
        reason: str,
    ) -> tuple[bytes, str]:
        """``(record, reason)``: the annotated dead letter ``build`` makes, or, if it fails for
        any reason, the poison record of the original bytes (reason ``poison``)."""
        record, unwritable = record_or_poison(
            build, processed.delivery.body, original_queue=processed.delivery.queue, error=error,
            attempts=attempts, cause=cause,
        )
        if unwritable is None:
            return record, reason
        self._unencodable(processed, unwritable)
        return record, "poison"

    def _unencodable(self, processed: Processed, exc: Exception) -> None:
        """Count and log a message whose dead letter or retry could not be written (its original
        bytes went to the DLQ instead)."""
        self.counters.incr("unencodable")
        self.log.error(
            "cannot re-encode %s from %r (%s); dead-lettering its original bytes",
            processed.message.id if processed.message is not None else "a message", processed.delivery.queue,
            exc, extra=_extra(processed.message),
        )

    def _to_dlq(
        self, processed: Processed, record: bytes, reason: str, why: str, acks: list[Delivery]
    ) -> None:
        delivery = processed.delivery
        message = processed.message
        what = f"{message.urn} id={message.id} trace_id={message.trace_id}" if message else "poison message"
        if self.policy == "queue":
            dlq = dlq_name(delivery.queue)
            self.transport.dead_letter(delivery, record, dlq=dlq)
            self.counters.incr("dead_lettered")
            self.counters.incr(f"dead_lettered.{reason}")
            self.log.error("dead-lettered %s to %r (%s): %s", what, dlq, reason, why, extra=_extra(message))
        elif self.policy == "release":
            self.transport.release(delivery, delay_ms=self.max_delay_ms)
            self.counters.incr("exhausted_kept")
            self.log.error(
                "dead-lettering is off: kept %s on %r, released for %d ms (%s): %s",
                what, delivery.queue, self.max_delay_ms, reason, why, extra=_extra(message),
            )
        else:
            acks.append(delivery)
            self.counters.incr("deleted")
            self.log.error(
                "dead-lettering is off: deleted %s from %r (%s): %s",
                what, delivery.queue, reason, why, extra=_extra(message),
            )
