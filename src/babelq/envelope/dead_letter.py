"""Dead-letter annotation and redrive (docs/standard.md §5).

Annotating returns a copy: the original envelope (ids, trace, data, unknown keys) stays
intact inside the dead-letter message, so any SDK can still read it. ``reason`` stays
within the three values the canonical schema allows; a finer ``cause`` (``expired``,
``schema``...) may ride along as an extra key of the block.
"""

from __future__ import annotations

from typing import Any

from babelq.envelope import ids
from babelq.envelope.constants import DEAD_LETTER_REASONS, INT64_MAX, LANG
from babelq.envelope.model import Envelope
from babelq.errors import EnvelopeError


def dlq_name(queue: str) -> str:
    """The dead-letter queue of ``queue`` (``orders`` -> ``orders.dlq``)."""
    return f"{queue}.dlq"


def exception_name(exc: BaseException | type[BaseException]) -> str:
    """A language-neutral-enough name for an exception type (``module.Qualname``)."""
    cls = exc if isinstance(exc, type) else type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _text(value: str | None) -> str | None:
    """``value`` made encodable as UTF-8 (a lone surrogate becomes a ``\\udXXX`` escape)."""
    if value is None or value.isascii():
        return value
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def dead_letter_block(
    reason: str,
    *,
    original_queue: str,
    attempts: int,
    error: str | None = None,
    exception: str | None = None,
    failed_at: int | None = None,
    cause: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``dead_letter`` member, keys in canonical order, extras last."""
    if reason not in DEAD_LETTER_REASONS:
        raise EnvelopeError(
            "dead_letter.reason", f"must be one of {sorted(DEAD_LETTER_REASONS)}, got {reason!r}"
        )
    # both are read back as signed 64-bit integers: a larger one makes the dead letter poison
    if type(attempts) is not int or not 0 <= attempts <= INT64_MAX:
        raise EnvelopeError("dead_letter.attempts", f"must be an integer from 0 to 2**63-1, got {attempts!r}")
    if failed_at is not None and (type(failed_at) is not int or not 0 <= failed_at <= INT64_MAX):
        raise EnvelopeError("dead_letter.failed_at", f"must be Unix epoch milliseconds, got {failed_at!r}")
    if type(original_queue) is not str:
        raise EnvelopeError("dead_letter.original_queue", f"must be a string, got {original_queue!r}")
    block: dict[str, Any] = {
        "reason": reason,
        "error": _text(error),
        "exception": _text(exception),
        "failed_at": ids.now_ms() if failed_at is None else failed_at,
        "original_queue": _text(original_queue),
        "attempts": attempts,
        "lang": LANG,
    }
    if cause is not None:
        block["cause"] = _text(cause)
    if extra:
        block.update(extra)
    return block


def annotate(
    envelope: Envelope,
    reason: str,
    *,
    original_queue: str | None = None,
    attempts: int | None = None,
    error: str | BaseException | None = None,
    exception: str | BaseException | type[BaseException] | None = None,
    failed_at: int | None = None,
    cause: str | None = None,
) -> Envelope:
    """A copy of ``envelope`` with a ``dead_letter`` block.

    Passing an exception as ``error`` fills both the error text and the exception type.
    ``original_queue`` and ``attempts`` default to the envelope's own.
    """
    if isinstance(error, BaseException):
        if exception is None:
            exception = error
        error = str(error) or exception_name(error)
    exc_name = None if exception is None else (
        exception if isinstance(exception, str) else exception_name(exception)
    )
    block = dead_letter_block(
        reason,
        original_queue=envelope.queue if original_queue is None else original_queue,
        attempts=envelope.attempts if attempts is None else attempts,
        error=error,
        exception=exc_name,
        failed_at=failed_at,
        cause=cause,
    )
    return envelope.with_dead_letter(block)


def redrive(envelope: Envelope) -> Envelope:
    """The message to put back on its queue: ``dead_letter`` removed, attempts reset to 0.

    trace_id, meta.id and every other key are kept, so consumers still dedupe on meta.id.
    """
    return envelope.without_dead_letter().with_attempts(0)
