"""Streaming reads: reserve per micro-batch on the driver, ack only after Spark commits the batch.

Offsets are micro-batch numbers (``{"batch": n}``), not positions in the queue: a broker
queue cannot be re-read, so what a batch holds is whatever the driver reserved while
planning it. The reader keeps every batch's deliveries until Spark calls ``commit(end)``,
and acks them then. Spark calls ``commit`` for batch N only while planning batch N+1, so:

- when the queue runs dry with a batch still unacked, ``latestOffset`` advances anyway and
  produces an empty *flush* batch whose planning commits (acks) the last real one;
- ``stop()`` releases whatever is still unacked, so it is redelivered at once to the next
  run (the sink may already have applied it: consumers dedupe on ``meta.id``);
- a killed process cannot release: its reservations come back after ``visibilityTimeout``,
  which must outlive one micro-batch plus the planning of the next.

A planned batch may be re-planned after a restart (Spark replays the offset log); that simply
reserves fresh messages, and the abandoned reservations of the dead run come back on their own.
``Trigger.AvailableNow`` is supported: the target is the batches needed to drain what is
ready when the query starts, plus the flush batch, so the run ends with everything acked.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from babelq.envelope import now_ms
from babelq.spark.datasource.batch_reader import ReservedPartition, release_all, reserve_up_to
from babelq.spark.datasource.connect import open_reserving
from babelq.spark.datasource.options import SourceOptions
from babelq.spark.datasource.rows import split, to_arrow, to_rows
from babelq.transports import Delivery, Transport

log = logging.getLogger(__name__)


def _batch(offset: dict[str, Any]) -> int:
    return int(offset.get("batch", 0))


class BabelqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver-side state: one transport, the unacked deliveries of each planned batch."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._transport: Transport | None = None
        self._pending: dict[int, list[Delivery]] = {}
        self._planned: dict[str, list[ReservedPartition]] = {}
        self._lock = threading.Lock()
        self._drain_batches: int | None = None  # AvailableNow: batches still allowed
        self._target: int | None = None

    # Spark pickles the reader to ship ``read`` to executors: only the options travel.
    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # -- helpers -------------------------------------------------------------------------------
    @property
    def transport(self) -> Transport:
        if self._transport is None:
            self._transport = open_reserving(self.options)
        return self._transport

    def _unacked(self) -> int:
        return sum(len(v) for v in self._pending.values())

    # -- offsets ---------------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:  # noqa: N802
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadMaxRows(self.options.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        ready = self.transport.size(self.options.queue)
        per_batch = self.options.max_messages_per_batch
        # the batches that drain what is there now, then one flush batch that acks the last
        self._drain_batches = -(-ready // per_batch) + 1 if ready else 0
        log.info("babelq availableNow on %s: %d ready, up to %d batches", self.options.queue, ready,
                 self._drain_batches)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        current = _batch(start)
        if self._drain_batches is not None:
            if self._target is None:
                self._target = current + self._drain_batches
            return {"batch": min(current + 1, self._target)}
        with self._lock:
            needs_flush = self._unacked() > 0
        if needs_flush or self.transport.size(self.options.queue) > 0:
            return {"batch": current + 1}
        return start

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802
        return None

    # -- planning, reading, committing -------------------------------------------------------------
    def _limit(self) -> int:
        return self.options.max_messages_per_batch

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        key = json.dumps([start, end], sort_keys=True)
        with self._lock:
            if key in self._planned:  # planned twice: hand out the same reservation, never reserve again
                return list(self._planned[key])
            batch_id = _batch(end)
            if batch_id <= _batch(start):
                return []
            opts = self.options
            held = reserve_up_to(self.transport, opts.queue, self._limit(), opts.reserve_batch)
            if held:
                self._pending.setdefault(batch_id, []).extend(held)
            at = now_ms()
            parts = [ReservedPartition(chunk, at, batch_id)
                     for chunk in split(to_rows(held), self.options.num_partitions)]
            self._planned[key] = parts
            log.info("babelq stream %s batch %d: reserved %d", self.options.queue, batch_id, len(held))
            return list(parts)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ReservedPartition)
        if partition.rows:
            yield to_arrow(partition.rows, partition.reserved_at, partition.batch_id)

    def commit(self, end: dict[str, Any]) -> None:
        upto = _batch(end)
        with self._lock:
            done = [b for b in self._pending if b <= upto]
            deliveries = [d for b in done for d in self._pending.pop(b)]
            self._planned = {k: v for k, v in self._planned.items() if _batch(json.loads(k)[1]) > upto}
        if deliveries:
            self.transport.ack_many(deliveries)
        log.info("babelq stream %s: committed up to batch %d, acked %d", self.options.queue, upto,
                 len(deliveries))

    def stop(self) -> None:
        with self._lock:
            leftover = [d for batch in self._pending.values() for d in batch]
            self._pending.clear()
            self._planned.clear()
        if self._transport is None:
            return
        try:
            if leftover:
                log.info("babelq stream %s: releasing %d unacked messages on stop", self.options.queue,
                         len(leftover))
                release_all(self._transport, leftover)
        finally:
            self._transport.close()
            self._transport = None

