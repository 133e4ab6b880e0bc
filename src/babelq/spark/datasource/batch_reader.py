"""Batch reads (``spark.read.format("babelq")``): a snapshot of a queue, by default non-destructive.

The driver reads here, on every transport (unlike streaming reads, where executors read SQLite
and Redis): a peek must put back exactly what it took, and slots reading in parallel could take
the same released message twice. So a batch read is bounded by ``maxMessagesPerBatch`` and its
bodies pass through the driver: size it for the driver's memory.

A broker queue has no offsets to re-read, so a batch read reserves up to
``maxMessagesPerBatch`` messages on the driver while planning, copies their bodies into the
input partitions, and then either puts them all back (default: a peek, e.g. for DLQ
triage) or acks them (``consume=true``: the caller now owns them; at-most-once). Each
action on the DataFrame plans again, so cache it when you reuse it.

The transport is opened for a *snapshot* (on AMQP: ``basic.get``, so an empty answer means the
queue has nothing ready, not that a consumer's prefetch has not arrived yet), and the same
transport that reserved puts back or acks, before it is closed: that is what connection-bound
reservations (AMQP delivery tags) need, and what leases allow.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from babelq.envelope import now_ms
from babelq.spark.datasource.connect import open_reserving
from babelq.spark.datasource.options import SourceOptions
from babelq.spark.datasource.rows import ReservedRow, reader_identity, split, to_arrow, to_rows
from babelq.spark.datasource.slots import shares
from babelq.transports import Delivery, Transport

log = logging.getLogger(__name__)

#: how long a reserve that came back empty is retried while the broker still counts ready messages
PATIENCE = 0.25


class ReservedPartition(InputPartition):
    """A chunk of reserved bodies, planned on the driver and read on an executor."""

    def __init__(self, rows: list[ReservedRow], reserved_at: int, batch_id: int | None, read_by: str) -> None:
        super().__init__(len(rows))
        self.rows = rows
        self.reserved_at = reserved_at
        self.batch_id = batch_id
        self.read_by = read_by


def reserve_up_to(
    transport: Transport, queue: str, limit: int, chunk: int, *, patience: float = PATIENCE
) -> list[Delivery]:
    """Reserve until ``limit`` messages are held or the queue has no ready message left.

    An empty answer while the broker still counts waiting messages gets one more reserve that
    waits up to ``patience`` seconds: deliveries may still be on their way to an AMQP consumer,
    an SQS short poll may have sampled empty servers. ``size`` counts delayed messages too, so a
    queue holding only those costs one ``patience`` wait per call.
    """
    held: list[Delivery] = []
    while len(held) < limit:
        want = min(chunk, limit - len(held))
        got = transport.reserve(queue, max_messages=want, timeout=0.0)
        if not got and patience > 0 and transport.size(queue) > 0:
            got = transport.reserve(queue, max_messages=want, timeout=patience)
        if not got:
            break
        held.extend(got)
    return held


class BabelqBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.options
        transport = open_reserving(opts, max_held=opts.max_messages_per_batch, snapshot=True)
        try:
            held = reserve_up_to(transport, opts.queue, opts.max_messages_per_batch, opts.reserve_batch)
            rows = to_rows(held)
            if opts.consume:
                transport.ack_many(held)
            else:
                transport.release_many(held)
        finally:
            transport.close()
        log.info(
            "babelq batch read of %s: %d messages (%s)",
            opts.queue,
            len(rows),
            "consumed" if opts.consume else "put back",
        )
        at = now_ms()
        by = reader_identity("driver")
        count = len(shares(len(rows), opts.num_partitions, opts.max_messages_per_partition))
        return [ReservedPartition(chunk, at, None, by) for chunk in split(rows, count)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ReservedPartition)
        if partition.rows:
            yield to_arrow(partition.rows, partition.reserved_at, partition.batch_id, partition.read_by)
