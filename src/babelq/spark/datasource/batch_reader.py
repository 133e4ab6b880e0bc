"""Batch reads (``spark.read.format("babelq")``): a snapshot of a queue, by default non-destructive.

A broker queue has no offsets to re-read, so a batch read reserves up to
``maxMessagesPerBatch`` messages on the driver while planning, copies their bodies into the
input partitions, and then either puts them all back (default: a peek, e.g. for DLQ
triage) or acks them (``consume=true``: the caller now owns them; at-most-once). Each
action on the DataFrame plans again, so cache it when you reuse it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from babelq.envelope import now_ms
from babelq.spark.datasource.connect import open_reserving
from babelq.spark.datasource.options import SourceOptions
from babelq.spark.datasource.rows import ReservedRow, split, to_arrow, to_rows
from babelq.transports import Delivery, Transport

log = logging.getLogger(__name__)


class ReservedPartition(InputPartition):
    """A chunk of reserved bodies, planned on the driver and read on an executor."""

    def __init__(self, rows: list[ReservedRow], reserved_at: int, batch_id: int | None) -> None:
        super().__init__(len(rows))
        self.rows = rows
        self.reserved_at = reserved_at
        self.batch_id = batch_id


def reserve_up_to(transport: Transport, queue: str, limit: int, chunk: int) -> list[Delivery]:
    """Reserve until ``limit`` messages are held or the queue has no ready message left."""
    held: list[Delivery] = []
    while len(held) < limit:
        got = transport.reserve(queue, max_messages=min(chunk, limit - len(held)), timeout=0.0)
        if not got:
            break
        held.extend(got)
    return held


def release_all(transport: Transport, deliveries: Sequence[Delivery]) -> None:
    for delivery in deliveries:
        transport.release(delivery)


class BabelqBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.options
        transport = open_reserving(opts)
        try:
            held = reserve_up_to(transport, opts.queue, opts.max_messages_per_batch, opts.reserve_batch)
            rows = to_rows(held)
            if opts.consume:
                transport.ack_many(held)
            else:
                release_all(transport, held)
        finally:
            transport.close()
        log.info("babelq batch read of %s: %d messages (%s)", opts.queue, len(rows),
                 "consumed" if opts.consume else "put back")
        at = now_ms()
        return [ReservedPartition(chunk, at, None) for chunk in split(rows, opts.num_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ReservedPartition)
        if partition.rows:
            yield to_arrow(partition.rows, partition.reserved_at, partition.batch_id)
