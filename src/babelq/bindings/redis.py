"""Redis binding: the key layout of a queue, and nothing else (docs/standard.md §4).

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
``<prefix><queue>:deliveries``      hash: sha1(body) -> times handed out (delivery_count);
                                    babelq adds a field ``babelq:encoding`` (no digest) that
                                    keeps it a hash table, see :mod:`babelq.transports.redis`
``<prefix><queue>:<tag>:reads``     list: a tagged reservation's record (babelq only): a
                                    header, then the deadline members the tag took, in order
==================================  =====================================================

``<token>`` is 32 lowercase hex characters, so a member splits without ambiguity even when
identical bodies are reserved twice. The reservation set uses the same name, member form and
unit as the ``babelqueue`` SDK's default ("legacy") Redis layout, so either SDK's sweep
recovers the other's crashed reservations.

Queue names. A queue's bookkeeping keys are its name plus a suffix, in the same key space as
every other queue's ready list, so a queue *named* ``orders:processing`` would be the in-flight
list of ``orders`` (its consumer would take ``orders``' reserved bodies) and a queue named
``orders:delayed`` would put a list where ``orders`` keeps a sorted set (every reserve on
``orders`` then fails with ``WRONGTYPE``). The layout is shared with the ``babelqueue`` SDK and
cannot change, so the names give way instead: :func:`check_queue` refuses a name that ends in
one of :data:`RESERVED_SUFFIXES` (ours, plus the ones babelqueue's layouts append: its default
layout's ``:processing`` and ``:processing:deadlines``, its Laravel-compatible layout's
``:reserved``, ``:delayed`` and ``:notify``), and the dead-letter queue (``.dlq``) of such a
name. No reserved suffix is a suffix of another, so two accepted names can never produce the
same key (``tests/transports/test_redis_binding.py`` checks this as a property). Every key
function below applies the rule, so nothing can build a key for a refused name.

Also here: the babelqueue SDK's header frame (:func:`frame`, :func:`unframe`) and the keys of
its Laravel-compatible layout (:func:`laravel_keys`), both pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from babelq.errors import ConfigurationError

#: length of a reservation/delay token (lowercase hex)
TOKEN_LENGTH: Final = 32
#: starts the token of a delayed body parked as a reservation (``delays=lease``): never the
#: start of a reservation's hex token, so a count can tell what waits from what is in flight;
#: the babelqueue SDK's sweep reads any 32-byte token
PARKED_TOKEN_PREFIX: Final = "delayed-"
PROCESSING_SUFFIX: Final = ":processing"
DEADLINES_SUFFIX: Final = ":processing:deadlines"
DELAYED_SUFFIX: Final = ":delayed"
DELIVERIES_SUFFIX: Final = ":deliveries"
#: ends the record key of a tagged reservation, ``<queue>:<tag>:reads`` (``<tag>``: 32 hex)
READS_SUFFIX: Final = ":reads"

#: Suffixes the ``babelqueue`` SDK appends to a queue's key that ours do not: its
#: Laravel-compatible layout's reserved set and wake-up list (its default layout uses
#: ``:processing`` and ``:processing:deadlines``, as we do; ``:delayed`` is in both).
BABELQUEUE_ONLY_SUFFIXES: Final = (":reserved", ":notify")

#: A queue name may not end in any of these (nor may its dead-letter queue's): each is where
#: some queue's own bookkeeping lives, in our layout or in babelqueue's. Longest first, so an
#: error names the whole suffix (``:processing:deadlines``, not a shorter one).
RESERVED_SUFFIXES: Final = tuple(
    sorted(
        {
            PROCESSING_SUFFIX, DEADLINES_SUFFIX, DELAYED_SUFFIX, DELIVERIES_SUFFIX, READS_SUFFIX,
            *BABELQUEUE_ONLY_SUFFIXES,
        },
        key=lambda suffix: (-len(suffix), suffix),
    )
)

#: The runtime dead-letters queue ``q`` to ``q.dlq`` (docs/standard.md §4).
DLQ_SUFFIX: Final = ".dlq"


def check_queue(queue: str) -> str:
    """``queue`` unchanged when its keys cannot reach another queue's; else ConfigurationError.

    A name is refused when it ends in a reserved suffix, or when it is the dead-letter queue
    (``.dlq``, repeated or not) of such a name: ``q.dlq`` is accepted exactly when ``q`` is,
    so a worker's queue is never fine while its dead-letter queue fails at the first poison
    message. The message is one line naming the queue and the suffix.
    """
    base = queue
    while base.endswith(DLQ_SUFFIX):
        base = base[: -len(DLQ_SUFFIX)]
    for suffix in RESERVED_SUFFIXES:
        if base.endswith(suffix):
            which = "ends" if base == queue else f"is the dead-letter queue of {base!r}, which ends"
            raise ConfigurationError(
                f"queue: redis queue name {queue!r} {which} in the reserved suffix {suffix!r} (where "
                f"queue {base[: -len(suffix)]!r} keeps its own keys in the layout babelq shares with "
                "babelqueue); choose another name"
            )
    return queue


def queue_key(queue: str, prefix: str = "") -> str:
    """The ready list of ``queue``: where producers RPUSH the envelope bytes."""
    return f"{prefix}{check_queue(queue)}"


def processing_key(queue: str, prefix: str = "") -> str:
    """The list that holds ``queue``'s reserved bodies until they are settled."""
    return f"{prefix}{check_queue(queue)}{PROCESSING_SUFFIX}"


def deadlines_key(queue: str, prefix: str = "") -> str:
    """The sorted set of ``queue``'s reservations, scored by deadline (epoch seconds)."""
    return f"{prefix}{check_queue(queue)}{DEADLINES_SUFFIX}"


def delayed_key(queue: str, prefix: str = "") -> str:
    """The sorted set of ``queue``'s delayed bodies, scored by due time (epoch seconds)."""
    return f"{prefix}{check_queue(queue)}{DELAYED_SUFFIX}"


def deliveries_key(queue: str, prefix: str = "") -> str:
    """The hash counting how often each in-flight body of ``queue`` was handed out."""
    return f"{prefix}{check_queue(queue)}{DELIVERIES_SUFFIX}"


def reads_key(queue: str, tag: str, prefix: str = "") -> str:
    """The record of the tagged reservation ``tag`` (32 lowercase hex) on ``queue``.

    Unambiguous: read from the right, ``:reads``, exactly 32 hex characters and ``:`` leave the
    queue's name, and no accepted name ends in ``:reads``, so no other queue's key can be it.
    """
    if len(tag) != TOKEN_LENGTH or any(c not in "0123456789abcdef" for c in tag):
        raise ValueError(f"tag: must be {TOKEN_LENGTH} lowercase hex characters, got {tag!r}")
    return f"{prefix}{check_queue(queue)}:{tag}{READS_SUFFIX}"


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
    """All keys of ``queue`` under ``prefix`` (ConfigurationError for a refused name)."""
    base = f"{prefix}{check_queue(queue)}"
    return QueueKeys(
        ready=base,
        processing=base + PROCESSING_SUFFIX,
        deadlines=base + DEADLINES_SUFFIX,
        delayed=base + DELAYED_SUFFIX,
        deliveries=base + DELIVERIES_SUFFIX,
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


# -- header frames (the babelqueue SDK's out-of-band headers on Redis) ---------------------------
#
# A Redis list element has no metadata slot, so the ``babelqueue`` SDK carries out-of-band headers
# (a W3C ``traceparent``...) by storing, instead of the bare envelope, a small JSON object whose
# reserved member ``__bq_frame`` says "this is a transport frame, the envelope is in ``body``".
# An envelope never has that member, so its presence is the whole test: no structural guessing.
# Only the default layout carries frames; the Laravel-compatible layout must store the bare
# envelope (its reserve script decodes the job to bump ``attempts``).

#: the reserved member that marks a header frame, and the frame version written
FRAME_KEY: Final = "__bq_frame"
FRAME_VERSION: Final = 1
_FRAME_MARK: Final = b'"' + FRAME_KEY.encode("ascii") + b'"'


def clean_headers(headers: Mapping[str, object] | None) -> dict[str, str]:
    """``headers`` as strings, without blank keys or blank/None values (what a frame carries)."""
    out: dict[str, str] = {}
    for key, value in (headers or {}).items():
        if key and value is not None and value != "":
            out[str(key)] = str(value)
    return out


def frame(body: bytes, headers: Mapping[str, object] | None) -> bytes:
    """The list element for ``body`` published with ``headers``.

    No usable header: the body itself (byte-identical to a plain publish). Otherwise the frame
    ``{"__bq_frame":1,"headers":{...},"body":"<envelope text>"}``, compact JSON with non-ASCII
    kept as UTF-8, which is what the ``babelqueue`` SDK writes for the same input. The envelope
    rides as a JSON string, so it must be UTF-8 text (ValueError otherwise).
    """
    clean = clean_headers(headers)
    if not clean:
        return bytes(body)
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("headers: a body that is not UTF-8 text cannot ride in a header frame") from exc
    doc = {FRAME_KEY: FRAME_VERSION, "headers": clean, "body": text}
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def unframe(value: bytes) -> tuple[bytes, dict[str, str]]:
    """``(envelope bytes, headers)`` of a stored list element.

    A JSON object with a truthy ``__bq_frame`` and a string ``body`` is a frame: its body (UTF-8)
    and its cleaned headers. Anything else is returned unchanged with no headers, so a bare
    envelope (or a poison body) is exactly what was stored. A cheap byte check skips the JSON
    parse for every element that cannot be a frame.
    """
    if not value.startswith(b"{") or _FRAME_MARK not in value:
        return value, {}
    try:
        doc = json.loads(value)
    except ValueError:
        return value, {}
    if not isinstance(doc, dict) or not doc.get(FRAME_KEY) or not isinstance(doc.get("body"), str):
        return value, {}
    headers = doc.get("headers")
    return doc["body"].encode("utf-8", "surrogatepass"), clean_headers(
        headers if isinstance(headers, dict) else None
    )


# -- the Laravel-compatible layout (the babelqueue SDK's ``laravel_compat`` / ``?laravel=1``) ----
#
# ==================================  ===================================================
# ``<prefix><queue>``                 list: ready jobs (prefix defaults to ``queues:``)
# ``<prefix><queue>:reserved``        sorted set: member = the job with ``attempts`` + 1
#                                     (as reserved), score = reservation deadline (s)
# ``<prefix><queue>:delayed``         sorted set: member = the job, score = due time (s)
# ``<prefix><queue>:notify``          list: one token per job made ready (a wake-up hint)
# ==================================  ===================================================
#
# Members are the bare jobs (no token), as in Laravel: two identical jobs delayed or in flight
# at once are one member. Envelopes carry a unique ``meta.id``, so real messages never collide.

#: the babelqueue SDK's (and Laravel's) default key prefix of this layout
LARAVEL_PREFIX: Final = "queues:"


@dataclass(frozen=True, slots=True)
class LaravelKeys:
    """Every key of one queue in the Laravel-compatible layout."""

    ready: str
    reserved: str
    delayed: str
    notify: str

    def all(self) -> tuple[str, ...]:
        return (self.ready, self.reserved, self.delayed, self.notify)


def laravel_keys(queue: str, prefix: str = LARAVEL_PREFIX) -> LaravelKeys:
    """The Laravel-layout keys of ``queue`` (same queue-name rule as the default layout)."""
    base = f"{prefix}{check_queue(queue)}"
    return LaravelKeys(
        ready=base, reserved=base + ":reserved", delayed=base + DELAYED_SUFFIX, notify=base + ":notify"
    )
