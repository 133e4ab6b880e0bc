"""The rows the ``babelq`` source produces: the body plus the broker's facts about the reservation.

Reading happens in two halves: the driver reserves (so one process owns every receipt and
can ack it later, which AMQP channels and SQS receipt handles require) and ships the bodies
to executors inside the input partitions; executors only turn them into Arrow batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from babelq.transports import Delivery

#: DDL of the read schema. ``broker_attempts`` is what the broker's own delivery count says about
#: attempts under the binding's reconciliation (SQS: ``ApproximateReceiveCount - 1``; 0 where the
#: body's count is authoritative, as on Redis, RabbitMQ and SQLite). Every transport the source
#: serves reconciles as ``max(body attempts, broker count)``, so a message's attempts are
#: ``greatest(<body attempts>, broker_attempts)``.
READ_SCHEMA = (
    "body BINARY, queue STRING, delivery_count INT, stored_at BIGINT, store_host STRING, "
    "reserved_at BIGINT, batch_id BIGINT, broker_attempts INT"
)


_INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ReservedRow:
    """One reserved message as shipped to an executor (picklable, no receipt)."""

    body: bytes
    queue: str
    delivery_count: int | None
    stored_at: int | None
    store_host: str | None
    broker_attempts: int


def to_rows(deliveries: Sequence[Delivery]) -> list[ReservedRow]:
    return [
        ReservedRow(
            bytes(d.body), d.queue, d.delivery_count, d.stored_at, d.store_host, min(d.attempts(0), _INT_MAX)
        )
        for d in deliveries
    ]


def split(rows: Sequence[ReservedRow], parts: int) -> list[list[ReservedRow]]:
    """``rows`` cut into at most ``parts`` contiguous, non-empty chunks."""
    if not rows:
        return []
    parts = max(1, min(parts, len(rows)))
    size = -(-len(rows) // parts)
    return [list(rows[i : i + size]) for i in range(0, len(rows), size)]


def to_arrow(rows: Sequence[ReservedRow], reserved_at: int, batch_id: int | None) -> Any:
    """One Arrow record batch with :data:`READ_SCHEMA`'s columns."""
    import pyarrow as pa

    n = len(rows)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.body for r in rows], pa.binary()),
            pa.array([r.queue for r in rows], pa.string()),
            pa.array([r.delivery_count for r in rows], pa.int32()),
            pa.array([r.stored_at for r in rows], pa.int64()),
            pa.array([r.store_host for r in rows], pa.string()),
            pa.array([reserved_at] * n, pa.int64()),
            pa.array([batch_id] * n, pa.int64()),
            pa.array([r.broker_attempts for r in rows], pa.int32()),
        ],
        names=[
            "body", "queue", "delivery_count", "stored_at", "store_host", "reserved_at", "batch_id",
            "broker_attempts",
        ],
    )
