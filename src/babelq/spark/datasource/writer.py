"""Writes (``df.write.format("babelq")`` and ``df.writeStream.format("babelq")``): publish bodies.

Each Spark task publishes its partition in ``publishBatch``-sized ``publish_many`` calls, so
a broker round trip carries many messages. The DataFrame needs a binary ``body`` column
(canonical envelope bytes, e.g. from ``babelq.spark.encode``); an optional string ``queue``
column routes a row to another queue than the ``queue`` option, and an optional integer
``delay_ms`` column delays it. Publishing is at-least-once: a retried task publishes its
rows again, which consumers absorb by deduplicating on ``meta.id``. Nothing published can
be taken back, so ``abort`` only reports.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from babelq.errors import ConfigurationError
from babelq.spark.datasource.connect import open_publishing
from babelq.spark.datasource.options import SourceOptions
from babelq.transports import Outgoing, Transport

log = logging.getLogger(__name__)


@dataclass
class PublishedCount(WriterCommitMessage):
    """What one task published."""

    messages: int


def check_write_schema(field_names: list[str], options: SourceOptions) -> None:
    if "body" not in field_names:
        raise ConfigurationError("babelq data source: writing needs a binary 'body' column")
    if not options.queue and "queue" not in field_names:
        raise ConfigurationError("babelq data source: set option 'queue' or provide a 'queue' column")


class _Flusher:
    """Buffers bodies per target queue and publishes them in batches."""

    def __init__(self, transport: Transport, default_queue: str, batch: int) -> None:
        self.transport = transport
        self.default_queue = default_queue
        self.batch = batch
        self.buffers: dict[str, list[Outgoing]] = {}
        self.count = 0

    def add(self, queue: str | None, body: bytes, delay_ms: int) -> None:
        target = queue or self.default_queue
        buf = self.buffers.setdefault(target, [])
        buf.append(Outgoing(body, delay_ms=max(0, delay_ms)))
        if len(buf) >= self.batch:
            self.flush(target)

    def flush(self, queue: str) -> None:
        buf = self.buffers.get(queue)
        if buf:
            self.transport.publish_many(queue, buf)
            self.count += len(buf)
            self.buffers[queue] = []

    def flush_all(self) -> None:
        for queue in list(self.buffers):
            self.flush(queue)


def publish_batches(options: SourceOptions, batches: Iterator[Any]) -> int:
    """Publish every row of the Arrow ``batches``; returns how many messages were published."""
    transport = open_publishing(options)
    try:
        flusher = _Flusher(transport, options.queue, options.publish_batch)
        for batch in batches:
            names = batch.schema.names
            bodies = batch.column(names.index("body")).to_pylist()
            queues = batch.column(names.index("queue")).to_pylist() if "queue" in names else None
            delays = batch.column(names.index("delay_ms")).to_pylist() if "delay_ms" in names else None
            for i, body in enumerate(bodies):
                if body is None:
                    continue
                flusher.add(queues[i] if queues else None, body, int(delays[i] or 0) if delays else 0)
        flusher.flush_all()
        return flusher.count
    finally:
        transport.close()


class BabelqWriter(DataSourceArrowWriter):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> PublishedCount:
        return PublishedCount(publish_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.messages for m in messages if isinstance(m, PublishedCount))
        log.info("babelq write to %s: %d messages published", self.options.queue, total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.messages for m in messages if isinstance(m, PublishedCount))
        log.warning("babelq write to %s failed; %d messages were already published (at-least-once)",
                    self.options.queue, total)


class BabelqStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> PublishedCount:
        return PublishedCount(publish_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        total = sum(m.messages for m in messages if isinstance(m, PublishedCount))
        log.info("babelq stream write to %s, batch %d: %d published", self.options.queue, batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.warning("babelq stream write to %s, batch %d aborted (published rows stay published)",
                    self.options.queue, batchId)
