"""Exceptions a handler may raise to steer its message, and the runtime's own failure types."""

from __future__ import annotations

from babelq.errors import BabelqError


class PermanentError(BabelqError):
    """Raise from a handler to dead-letter the message now (reason ``failed``), without retries.

    For messages that can never succeed (a business rule says no, the payload is invalid):
    retrying them only delays the inevitable. ``cause`` lands in the ``dead_letter`` block.
    """

    def __init__(self, error: str, *, cause: str | None = None) -> None:
        self.cause = cause
        super().__init__(error)


class UnknownURNError(BabelqError):
    """No handler is mapped for a message's URN (the ``fail`` unknown-URN strategy raises this)."""

    def __init__(self, urn: str) -> None:
        self.urn = urn
        super().__init__(f"no handler is registered for URN {urn!r}")
