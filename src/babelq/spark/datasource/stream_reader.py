"""Streaming reads: reserve per micro-batch on the driver, ack only after Spark commits the batch.

Offsets are micro-batch numbers (``{"batch": n}``), not positions in the queue: a broker
queue cannot be re-read, so what a batch holds is whatever this reader reserved for it.

Where the reservations live. Spark keeps one reader object per query in one long-lived
Python process on the driver (``python_streaming_source_runner``) and sends it every
``latestOffset``, ``partitions`` and ``commit`` call. The reader reserves there, ships only
the bodies to executors inside the input partitions, and settles there, through the same
transport object. That is the only design that works for every broker: an AMQP delivery tag
can only be acked on the channel that received it (so the reader keeps its connection open
for the life of the query), and a lease (SQLite, Redis, SQS receipt handles) must be renewed
by whoever holds it.

The life of a batch:

- ``latestOffset(start)`` reserves up to ``maxMessagesPerBatch`` messages for batch
  ``start + 1``; when it got some, the batch exists, otherwise the offset does not move (no
  empty micro-batches while the queue is idle, whatever ``size`` says about delayed messages).
  It never waits for messages to arrive: an idle query asks the broker once per trigger, so
  give queues that are often empty a ``processingTime`` trigger.
- ``partitions`` hands the reserved bodies out; a batch Spark replays from its offset log after
  a restart has nothing reserved in this process, so it reserves fresh messages then.
- ``commit(end)`` acks every batch up to ``end``. Spark calls it for batch N only while
  planning batch N+1 (after N+1's ``latestOffset``): so when the queue runs dry with a batch
  still unacked, ``latestOffset`` advances anyway to an empty *flush* batch (it reserves
  nothing) whose planning commits the last real one.
- While a batch is held, a background thread renews its leases (once they are a third of the
  visibility timeout old, so a renewal is due at least half a lease before the deadline),
  so a slow micro-batch never loses its messages to another consumer; ``visibilityTimeout`` only
  bounds how long a *killed* query's messages stay invisible. AMQP needs no renewal.
- ``stop()`` releases whatever is still held, so it is redelivered at once to the next run
  (when Spark lets it run: it may end the planner process first). A killed process cannot:
  its leases lapse after ``visibilityTimeout``; a dead AMQP connection's deliveries are
  requeued by the broker at once. Either way the sink may already have applied them:
  at-least-once, consumers dedupe on ``meta.id``.

``Trigger.AvailableNow``: the run takes at most the messages that were waiting when it started
(``size`` at ``prepareForTriggerAvailableNow``), in as many batches as that needs, then one flush
batch, so it ends with everything acked.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from babelq.envelope import now_ms
from babelq.spark.datasource.batch_reader import ReservedPartition, reserve_up_to
from babelq.spark.datasource.connect import open_reserving
from babelq.spark.datasource.options import SourceOptions
from babelq.spark.datasource.rows import split, to_arrow, to_rows
from babelq.transports import Delivery, Transport

log = logging.getLogger(__name__)


def _batch(offset: dict[str, Any]) -> int:
    return int(offset.get("batch", 0))


@dataclass
class _Held:
    """The reservations of one planned batch (none for a flush batch) and when they were last leased."""

    deliveries: list[Delivery]
    leased_at: float  # time.monotonic() of the reservation or of the last renewal


class BabelqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver-side state: one transport and the reservations of every batch not yet committed."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._transport: Transport | None = None
        self._held: dict[int, _Held] = {}  # batch id -> its reservations, until commit
        self._planned: dict[str, list[ReservedPartition]] = {}
        self._state = threading.Lock()  # guards the dicts and the quota
        self._settling = threading.Lock()  # one ack / renew / release at a time on the transport
        self._quota: int | None = None  # AvailableNow: messages this run may still take
        self._stopping = threading.Event()
        self._renewer: threading.Thread | None = None

    # Spark pickles the reader to ship ``read`` to executors: only the options travel.
    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # -- the transport and its leases ------------------------------------------------------------
    @property
    def transport(self) -> Transport:
        if self._transport is None:
            # batch N is still held while batch N+1 is reserved in latestOffset
            held = 2 * self.options.max_messages_per_batch
            self._transport = open_reserving(self.options, max_held=held)
            if self._transport.leased_reservations:
                self._renewer = threading.Thread(
                    target=self._renew_loop, name=f"babelq-renew-{self.options.queue}", daemon=True
                )
                self._renewer.start()
        return self._transport

    def _renew_loop(self) -> None:
        # the lease the transport grants: a URL option may have overridden ours
        lease = self.transport.lease_seconds(self.options.queue) or self.options.visibility_timeout
        while not self._stopping.wait(max(lease / 6, 0.05)):
            try:
                self._renew_due(lease)
            except Exception:  # keep renewing the other batches; a lapse only means redelivery
                log.exception("babelq stream %s: renewing reservations failed", self.options.queue)

    def _renew_due(self, lease: float) -> None:
        transport = self._transport
        if transport is None:
            return
        with self._settling:
            now = time.monotonic()
            with self._state:
                due = [
                    (b, h) for b, h in self._held.items() if h.deliveries and now - h.leased_at >= lease / 3
                ]
            for batch_id, held in due:
                kept = transport.renew_many(held.deliveries)
                held.leased_at = now
                if kept < len(held.deliveries):
                    log.warning(
                        "babelq stream %s batch %d: %d of %d reservations had lapsed before renewal; "
                        "they will be delivered again (raise visibilityTimeout)",
                        self.options.queue, batch_id, len(held.deliveries) - kept, len(held.deliveries),
                    )  # fmt: skip

    def _reserve(self) -> list[Delivery]:
        limit = self.options.max_messages_per_batch
        with self._state:
            if self._quota is not None:
                limit = min(limit, self._quota)
        if limit <= 0:
            return []
        opts = self.options
        held = reserve_up_to(self.transport, opts.queue, limit, opts.reserve_batch)
        with self._state:
            if self._quota is not None:
                self._quota = max(self._quota - len(held), 0)
        return held

    # -- offsets ---------------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:  # noqa: N802
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadMaxRows(self.options.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        ready = self.transport.size(self.options.queue)
        with self._state:
            self._quota = ready
        log.info("babelq availableNow on %s: %d messages waiting", self.options.queue, ready)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        following = _batch(start) + 1
        with self._state:
            if following in self._held:  # asked again before Spark planned it
                return {"batch": following}
            unacked = any(h.deliveries for h in self._held.values())
        held = self._reserve()
        with self._state:
            if held:
                self._held[following] = _Held(held, time.monotonic())
                return {"batch": following}
            if unacked:  # a flush batch: planning it commits (acks) the last real one
                self._held[following] = _Held([], time.monotonic())
                return {"batch": following}
            if self._quota is not None:
                self._quota = 0  # AvailableNow: nothing ready any more, the run is over
        return start

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802
        return None

    # -- planning, reading, committing -------------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        key = json.dumps([start, end], sort_keys=True)
        first, last = _batch(start), _batch(end)
        with self._state:
            if key in self._planned:  # planned twice: hand out the same reservation, never reserve again
                return list(self._planned[key])
            known = [self._held[b] for b in range(first + 1, last + 1) if b in self._held]
        if last <= first:
            return []
        if not known:
            # a batch Spark replays from its offset log after a restart: nothing of it is held in
            # this process (the dead run's reservations come back on their own), so reserve now
            replay = _Held(self._reserve(), time.monotonic())
            with self._state:
                self._held[last] = replay
            known = [replay]
        deliveries = [d for held in known for d in held.deliveries]
        at = now_ms()
        parts = [
            ReservedPartition(chunk, at, last)
            for chunk in split(to_rows(deliveries), self.options.num_partitions)
        ]
        with self._state:
            self._planned[key] = parts
        log.info("babelq stream %s batch %d: %d messages", self.options.queue, last, len(deliveries))
        return list(parts)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ReservedPartition)
        if partition.rows:
            yield to_arrow(partition.rows, partition.reserved_at, partition.batch_id)

    def commit(self, end: dict[str, Any]) -> None:
        upto = _batch(end)
        with self._settling:
            with self._state:
                done = [b for b in self._held if b <= upto]
                deliveries = [d for b in done for d in self._held.pop(b).deliveries]
                self._planned = {k: v for k, v in self._planned.items() if _batch(json.loads(k)[1]) > upto}
            if deliveries:
                self.transport.ack_many(deliveries)
        log.info(
            "babelq stream %s: committed up to batch %d, acked %d", self.options.queue, upto, len(deliveries)
        )

    def stop(self) -> None:
        self._stopping.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        with self._settling, self._state:
            leftover = [d for held in self._held.values() for d in held.deliveries]
            self._held.clear()
            self._planned.clear()
        transport, self._transport = self._transport, None
        if transport is None:
            return
        try:
            if leftover:
                log.info(
                    "babelq stream %s: releasing %d unacked messages on stop",
                    self.options.queue,
                    len(leftover),
                )
                transport.release_many(leftover)
        finally:
            transport.close()
