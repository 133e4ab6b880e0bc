"""The rows the ``babelq`` source produces: the body plus the broker's facts about the reservation.

Who reads the broker depends on the transport (:mod:`babelq.spark.datasource.stream_reader`):
executor tasks (SQLite, Redis: tagged reservations) turn their own deliveries into Arrow; the
driver (AMQP, SQS, and every batch read) reserves, ships the bodies to executors inside the
input partitions as :class:`ReservedRow` and they only turn them into Arrow. ``read_by`` tells
the two apart in the data, and which executor read what.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from babelq.transports import Delivery

#: DDL of the read schema. ``broker_attempts`` is what the broker's own delivery count says about
#: attempts under the binding's reconciliation (SQS: ``ApproximateReceiveCount - 1``; 0 where the
#: body's count is authoritative, as on Redis, RabbitMQ and SQLite). Every transport the source
#: serves reconciles as ``max(body attempts, broker count)``, so a message's attempts are
#: ``greatest(<body attempts>, broker_attempts)``. ``read_by`` is the process that took the row
#: from the broker (:func:`reader_identity`). ``refusal`` is why the broker's native schema-version
#: property refuses the body (:mod:`babelq.bindings.schema_gate`), null when it does not: such a
#: row is poison and its body is never decoded.
READ_SCHEMA = (
    "body BINARY, queue STRING, delivery_count INT, stored_at BIGINT, store_host STRING, "
    "reserved_at BIGINT, batch_id BIGINT, broker_attempts INT, read_by STRING, refusal STRING"
)

_NAMES = [
    "body", "queue", "delivery_count", "stored_at", "store_host", "reserved_at", "batch_id",
    "broker_attempts", "read_by", "refusal",
]  # fmt: skip

_INT_MAX = 2**31 - 1


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _is_jvm(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm", "rb") as fh:
            return fh.read().strip() == b"java"
    except OSError:
        return False


@lru_cache(maxsize=2)
def reader_identity(role: str) -> str:
    """``"<role> <host>:<pid>"``: who read from the broker, for the ``read_by`` column.

    ``role`` is ``executor`` (a Spark task) or ``driver`` (the query's reader on the driver).
    ``pid`` is the JVM the Python process serves: a task's Python worker is a child of its
    executor's ``pyspark.daemon``, itself a child of the executor JVM, so every task of one
    executor gives the same value and two values mean two executors (in local mode the one
    executor is the driver JVM). Found through ``/proc``; elsewhere the parent process id.
    """
    pid = os.getppid()
    probe: int | None = pid
    for _ in range(4):  # worker -> daemon -> JVM, with room for a wrapper process
        if probe is None or probe <= 1:
            break
        if _is_jvm(probe):
            pid = probe
            break
        probe = _parent(probe)
    return f"{role} {socket.gethostname()}:{pid}"


@dataclass(frozen=True, slots=True)
class ReservedRow:
    """One message the driver reserved, as shipped to an executor (picklable, no receipt)."""

    body: bytes
    queue: str
    delivery_count: int | None
    stored_at: int | None
    store_host: str | None
    broker_attempts: int
    refusal: str | None = None


def to_rows(deliveries: Sequence[Delivery]) -> list[ReservedRow]:
    return [
        ReservedRow(
            bytes(d.body), d.queue, d.delivery_count, d.stored_at, d.store_host, min(d.attempts(0), _INT_MAX),
            d.refusal,
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


def to_arrow(rows: Sequence[ReservedRow], reserved_at: int, batch_id: int | None, read_by: str) -> Any:
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
            pa.array([read_by] * n, pa.string()),
            pa.array([r.refusal for r in rows], pa.string()),
        ],
        names=_NAMES,
    )


def deliveries_to_arrow(deliveries: Sequence[Delivery], reserved_at: int, batch_id: int, read_by: str) -> Any:
    """The Arrow batch of an executor's own deliveries, column by column: the same values
    :func:`to_arrow` gives for :func:`to_rows` of them, without a row object per message (building
    those would be much of an executor's Python time in a read)."""
    import pyarrow as pa

    n = len(deliveries)
    if any(d.reconcile is not None for d in deliveries):
        attempts = [min(d.attempts(0), _INT_MAX) for d in deliveries]
    else:  # no broker count to reconcile: the body's own attempts rule (0 here)
        attempts = [0] * n
    return pa.RecordBatch.from_arrays(
        [
            pa.array([d.body for d in deliveries], pa.binary()),
            pa.array([d.queue for d in deliveries], pa.string()),
            pa.array([d.delivery_count for d in deliveries], pa.int32()),
            pa.array([d.stored_at for d in deliveries], pa.int64()),
            pa.array([d.store_host for d in deliveries], pa.string()),
            pa.array([reserved_at] * n, pa.int64()),
            pa.array([batch_id] * n, pa.int64()),
            pa.array(attempts, pa.int32()),
            pa.array([read_by] * n, pa.string()),
            pa.array([d.refusal for d in deliveries], pa.string()),
        ],
        names=_NAMES,
    )
