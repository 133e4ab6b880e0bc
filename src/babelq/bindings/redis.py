"""Redis binding: the key layout of a queue, and nothing else (SPEC section 4).

Redis lists carry no native metadata, so there is no projection: the list element IS the
canonical envelope, byte for byte, and a consumer's attempts are the body's attempts. What
every Redis producer and consumer must agree on is *where* things live, so the layout is
written down here as pure functions (no client, no I/O) and shared by the transport, the
docs and the interop tests:

==================================  =====================================================
``<prefix><queue>``                 list: ready bodies; producers RPUSH, consumers take the head
``<prefix><queue>:processing``      list: bodies reserved by a worker (the reliable-queue list)
``<prefix><queue>:processing:deadlines``  sorted set: one member ``<token>:<body>`` per
                                    reservation, scored by its deadline (epoch seconds)
``<prefix><queue>:delayed``         sorted set: member ``<token>:<body>``, scored by due time
                                    (epoch seconds)
``<prefix><queue>:deliveries``      hash: sha1(body) -> times handed out (delivery_count)
==================================  =====================================================

``<token>`` is 32 lowercase hex characters, so a member splits without ambiguity even when
identical bodies are reserved twice. The reservation set uses the same name, member form and
unit as the ``babelqueue`` SDK's default ("legacy") Redis layout, so either SDK's sweep
recovers the other's crashed reservations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: length of a reservation/delay token (lowercase hex)
TOKEN_LENGTH: Final = 32
PROCESSING_SUFFIX: Final = ":processing"
DEADLINES_SUFFIX: Final = ":processing:deadlines"
DELAYED_SUFFIX: Final = ":delayed"
DELIVERIES_SUFFIX: Final = ":deliveries"


def queue_key(queue: str, prefix: str = "") -> str:
    """The ready list of ``queue``: where producers RPUSH the envelope bytes."""
    return f"{prefix}{queue}"


def processing_key(queue: str, prefix: str = "") -> str:
    """The list that holds ``queue``'s reserved bodies until they are settled."""
    return f"{prefix}{queue}{PROCESSING_SUFFIX}"


def deadlines_key(queue: str, prefix: str = "") -> str:
    """The sorted set of ``queue``'s reservations, scored by deadline (epoch seconds)."""
    return f"{prefix}{queue}{DEADLINES_SUFFIX}"


def delayed_key(queue: str, prefix: str = "") -> str:
    """The sorted set of ``queue``'s delayed bodies, scored by due time (epoch seconds)."""
    return f"{prefix}{queue}{DELAYED_SUFFIX}"


def deliveries_key(queue: str, prefix: str = "") -> str:
    """The hash counting how often each in-flight body of ``queue`` was handed out."""
    return f"{prefix}{queue}{DELIVERIES_SUFFIX}"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Every key of one queue, in the order the transport's scripts take them."""

    ready: str
    processing: str
    deadlines: str
    delayed: str
    deliveries: str

    def all(self) -> tuple[str, ...]:
        return (self.ready, self.processing, self.deadlines, self.delayed, self.deliveries)


def keys_for(queue: str, prefix: str = "") -> QueueKeys:
    """All keys of ``queue`` under ``prefix``."""
    return QueueKeys(
        ready=queue_key(queue, prefix),
        processing=processing_key(queue, prefix),
        deadlines=deadlines_key(queue, prefix),
        delayed=delayed_key(queue, prefix),
        deliveries=deliveries_key(queue, prefix),
    )


def element(body: bytes) -> bytes:
    """The list element for ``body``: the body itself (no wrapping, no added fields)."""
    return bytes(body)


def member(token: str, body: bytes) -> bytes:
    """A reservation/delay set member: ``<token>:<body>``."""
    if len(token) != TOKEN_LENGTH:
        raise ValueError(f"token: must be {TOKEN_LENGTH} hex characters, got {token!r}")
    return token.encode("ascii") + b":" + body


def split_member(value: bytes) -> tuple[str, bytes]:
    """``(token, body)`` of a set member written by :func:`member`."""
    if len(value) <= TOKEN_LENGTH or value[TOKEN_LENGTH : TOKEN_LENGTH + 1] != b":":
        raise ValueError(f"not a <token>:<body> member: {value[:48]!r}")
    return value[:TOKEN_LENGTH].decode("ascii"), value[TOKEN_LENGTH + 1 :]


def reconcile_attempts(body_attempts: int) -> int:
    """A Redis consumer's attempts: the body's (a list has no delivery counter of its own)."""
    return body_attempts
