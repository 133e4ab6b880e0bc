"""The store contracts behind :func:`babelq.idempotency.wrap`.

:class:`IdempotencyStore` is the standard's seen-set (``seen``/``remember``/``forget``):
enough for one consumer process. :class:`ClaimingStore` adds an atomic first claim, which
a fleet of consumers sharing one store needs: without it two workers that receive the
same redelivered message at the same moment would both see it as new and both run it.

States an id can be in, for a claiming store::

    absent --claim()--> claimed --remember()--> done
               ^            |
               +--release()-+   (the handler failed: the id is free again)

``seen`` is true only for *done* ids. A claim expires on its own after the store's claim
TTL, so a worker that crashed mid-handler does not block the id forever; a *done* id
expires after the store's optional TTL.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class IdempotencyStore(Protocol):
    """A seen-set of message ids (``meta.id``)."""

    def seen(self, message_id: str, /) -> bool:
        """Whether ``message_id`` was remembered (and has not expired or been forgotten)."""
        ...

    def remember(self, message_id: str, /) -> None:
        """Record that ``message_id``'s handler succeeded."""
        ...

    def forget(self, message_id: str, /) -> None:
        """Remove ``message_id`` (claimed or done) so a later delivery runs again."""
        ...


@runtime_checkable
class ClaimingStore(IdempotencyStore, Protocol):
    """A seen-set that several consumers share, with an atomic first claim."""

    def claim(self, message_id: str, /) -> bool:
        """Atomically take ``message_id`` if it is neither claimed nor done; True if this caller got it."""
        ...

    def release(self, message_id: str, /) -> None:
        """Undo this store's claim whose handler failed (a done id, or a claim another worker
        holds, is left alone)."""
        ...


def check_ttls(ttl_ms: int | None, claim_ttl_ms: int) -> None:
    """Refuse a non-positive TTL for a shared store (names the option)."""
    from babelq.errors import ConfigurationError

    if ttl_ms is not None and (type(ttl_ms) is not int or ttl_ms <= 0):
        raise ConfigurationError(f"ttl_ms must be a positive int of milliseconds or None, got {ttl_ms!r}")
    if type(claim_ttl_ms) is not int or claim_ttl_ms <= 0:
        raise ConfigurationError(f"claim_ttl_ms must be a positive int of milliseconds, got {claim_ttl_ms!r}")
