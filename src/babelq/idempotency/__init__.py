"""Consumer idempotency (docs/standard.md §7): at-least-once delivery, exactly-once effect.

Deduplicate on ``meta.id`` (never trace_id): :func:`wrap` runs a handler only for an id it
has not seen, remembers the id only after the handler succeeded, and fails open for a
message without a usable id. Stores: :class:`MemoryStore` here; a fleet shares
``babelq.idempotency.redis_store.RedisStore`` or
``babelq.idempotency.postgres_store.PostgresStore`` (imported on demand, they need a
client library), which claim ids atomically.

>>> from babelq.idempotency import MemoryStore, wrap
>>> handle = wrap(MemoryStore(), lambda msg: "charged")
>>> msg = {"meta": {"id": "f1e2d3c4-b5a6-4789-90ab-cdef01234567"}}
>>> handle(msg).ran, handle(msg).ran
(True, False)
"""

from babelq.idempotency.memory import MemoryStore
from babelq.idempotency.store import ClaimingStore, IdempotencyStore
from babelq.idempotency.wrap import ClaimedElsewhereError, HandlerRun, message_id, wrap

__all__ = [
    "ClaimedElsewhereError",
    "ClaimingStore",
    "HandlerRun",
    "IdempotencyStore",
    "MemoryStore",
    "message_id",
    "wrap",
]
