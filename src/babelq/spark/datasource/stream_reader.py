"""Streaming reads: executors (or, where the broker needs it, the driver) reserve per micro-batch;
the driver acks only after Spark commits the batch.

Offsets are micro-batch numbers (``{"batch": n, ...}``), not positions in the queue: a broker
queue cannot be re-read, so what a batch holds is whatever was reserved for it. Spark keeps one
reader object per query in one long-lived Python process on the driver
(``python_streaming_source_runner``) and sends it every ``latestOffset``, ``partitions`` and
``commit`` call; the ``read`` of each input partition runs in a task on an executor.

**Executors read** (:class:`SlotStreamReader`; transports with tagged reservations: SQLite,
Redis). The driver plans *read slots*, not bodies: ``latestOffset`` asks the broker how many
messages are ready (``Transport.ready``, no reservation) and writes the batch's plan into its end
offset (:mod:`~babelq.spark.datasource.slots`): a run id and each slot's share. Each executor
task reserves its slot's share under the slot's tag (``Transport.reserve_tagged``); the broker
records, in the same atomic step, which messages the tag took. The driver derives every tag of
every uncommitted batch from the offsets, renews their leases while the batch is open and acks
them in ``commit(end)`` (``renew_tagged``, ``ack_tagged``). Bodies never pass through the
driver. Why this is correct:

- *Task retries, speculation, several actions.* A tag is taken once: a slot's second read (a
  failed attempt's retry, a speculative copy, a recomputed shuffle input, a second action on the
  batch's DataFrame) gets the same messages back, not new ones. So the batch is a fixed set, as
  an offset range of a log would be, and whichever attempt's rows Spark used, every message under
  the tags was read by it. Nothing is added to a tag after its first read, so ``commit`` acks
  exactly what was read. (A message whose lease lapsed and that another consumer took is no
  longer the tag's: not returned to a later read, not acked by it.)
- *Restarts.* A batch Spark replays from its offset log has the dead run's run id in its
  offset, so its slots name the dead run's tags: each replayed slot gets back what the dead
  run's task took (the messages the tag still holds: a lapsed one is taken back while nobody
  else took it), or reserves afresh when the dead run never read that slot. The new run acks
  only what its own reads returned. A batch the dead run finished but never acked (Spark's
  commit log has it) is acked by the new run when Spark commits it, from the same offset.
- *Leases.* The driver renews every open batch's tags every third of the lease, from the moment
  the batch is planned (before its tasks even ran: renewing a tag that holds nothing is a no-op),
  so a slow micro-batch keeps its messages; ``visibilityTimeout`` bounds how long a killed
  query's messages stay invisible.

**The driver reads** (:class:`DriverStreamReader`; AMQP, SQS). An AMQP delivery tag can only be
acked on the channel that received it, and an SQS receipt handle has no durable place on the
queue to be recorded in, so the reader reserves in ``latestOffset`` on the driver, ships the
bodies to executors inside the input partitions, keeps every receipt and settles through the
same open transport. A batch it replays after a restart
reserves afresh (the dead run's reservations come back on their own).

The life of a batch, either way:

- ``latestOffset(start)``: when something is ready, batch ``start + 1`` exists; otherwise the
  offset does not move (no empty micro-batches while the queue is idle, whatever ``size`` says
  about delayed messages). It never waits: an idle query asks the broker once per trigger, so
  give queues that are often empty a ``processingTime`` trigger. Another consumer may take what
  was ready before the slots read it: that batch is then empty (or smaller).
- ``commit(end)`` acks every batch up to ``end``. Spark calls it for batch N only while
  planning batch N+1 (after N+1's ``latestOffset``): so when the queue runs dry with a batch
  whose tags still hold messages, ``latestOffset`` advances anyway to an empty *flush* batch
  (it reads nothing) whose planning commits the last real one. A sink may ack a batch's tags
  itself once its effects are durable (settle does, from the plan in the offset log:
  :func:`~babelq.spark.datasource.slots.logged_plan`); the broker then says the tags hold
  nothing and no flush batch runs.
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
from babelq.runtime.outage import is_unavailable
from babelq.spark.datasource.batch_reader import ReservedPartition, reserve_up_to
from babelq.spark.datasource.connect import open_reserving
from babelq.spark.datasource.options import SourceOptions
from babelq.spark.datasource.rows import deliveries_to_arrow, reader_identity, split, to_arrow, to_rows
from babelq.spark.datasource.slots import Plan, ReadSlot, new_run, shares
from babelq.transports import Delivery, Transport
from babelq.urls import one_line

log = logging.getLogger(__name__)


def _batch(offset: dict[str, Any]) -> int:
    return int(offset.get("batch", 0))


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """What both designs share: options, the driver's transport, the lease-renewal thread, quota."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._transport: Transport | None = None
        self._state = threading.Lock()  # guards the subclass's dicts and the quota
        self._settling = threading.Lock()  # one ack / renew / release at a time on the transport
        self._quota: int | None = None  # AvailableNow: messages this run may still take
        self._stopping = threading.Event()
        self._renewer: threading.Thread | None = None

    # Spark pickles the reader to ship ``read`` to executors: only the options travel.
    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    def _max_held(self) -> int:
        """Reservations the driver's transport may hold at once (AMQP sizes its prefetch by it)."""
        return self.options.max_messages_per_batch

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            self._transport = open_reserving(self.options, max_held=self._max_held())
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
            except Exception as exc:  # keep renewing the other batches; a lapse only means redelivery
                if not is_unavailable(exc):
                    log.exception("babelq stream %s: renewing reservations failed", self.options.queue)
                else:  # an outage the query waits out: one line, its traceback tells nothing more
                    log.warning("babelq stream %s: renewing reservations failed: %s", self.options.queue,
                                one_line(exc, typed=True))

    def _renew_due(self, lease: float) -> None:
        raise NotImplementedError

    def _limit(self) -> int:
        limit = self.options.max_messages_per_batch
        with self._state:
            if self._quota is not None:
                limit = min(limit, self._quota)
        return max(limit, 0)

    def _take_quota(self, n: int) -> None:
        with self._state:
            if self._quota is not None:
                self._quota = max(self._quota - n, 0)

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadMaxRows(self.options.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        waiting = self.transport.size(self.options.queue)
        with self._state:
            self._quota = waiting
        log.info("babelq availableNow on %s: %d messages waiting", self.options.queue, waiting)

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802
        return None

    def _stop_renewing(self) -> None:
        self._stopping.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None


# -- executors read (tagged reservations) ----------------------------------------------------------


@dataclass
class _Open:
    """A planned or replayed batch not yet committed."""

    plan: Plan
    held: int = 0  # what its tags held at the last renewal (to tell when some lapsed)
    renewed_at: float = 0.0  # time.monotonic() of the last renewal (0: never)


class SlotStreamReader(_StreamReader):
    """Driver side: plans read slots, renews and acks by tag; executors reserve (module docstring)."""

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._run = new_run()
        self._open: dict[int, _Open] = {}  # batch id -> its plan, until commit

    def _max_held(self) -> int:
        return 0  # the driver holds no delivery: only tags

    def _shares(self, total: int) -> tuple[int, ...]:
        return shares(total, self.options.num_partitions, self.options.max_messages_per_partition)

    def _renew_due(self, lease: float) -> None:
        transport = self._transport
        if transport is None:
            return
        with self._settling:
            now = time.monotonic()
            with self._state:
                due = [
                    (b, o) for b, o in self._open.items() if o.plan.shares and now - o.renewed_at >= lease / 3
                ]
            for batch_id, opened in due:
                held = transport.renew_tagged(self.options.queue, opened.plan.tags(self.options.queue))
                opened.renewed_at = now
                if held < opened.held:  # (a renewal while the batch's tasks still read only grows)
                    log.warning(
                        "babelq stream %s batch %d: %d of %d reservations had lapsed before renewal; "
                        "they will be delivered again (raise visibilityTimeout)",
                        self.options.queue, batch_id, opened.held - held, opened.held,
                    )  # fmt: skip
                opened.held = held

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        following = _batch(start) + 1
        with self._state:
            known = self._open.get(following)
        if known is not None:  # asked again before Spark planned it
            return known.plan.offset()
        want = self._limit()
        ready = self.transport.ready(self.options.queue) if want > 0 else 0
        with self._state:
            if ready > 0:
                want = min(want, ready)
                plan = Plan(following, self._run, self._shares(want))
                self._open[following] = _Open(plan)
                if self._quota is not None:
                    # what another consumer takes first is not read here, but it was not left
                    # waiting either: the run still covers what waited when it started
                    self._quota = max(self._quota - want, 0)
                return plan.offset()
            unacked = {b: o.plan for b, o in self._open.items() if o.plan.shares}
        if unacked and self._still_held(unacked):
            # an uncommitted batch holds messages: a flush batch's planning commits (acks) it
            with self._state:
                plan = Plan(following, self._run, ())
                self._open[following] = _Open(plan)
            return plan.offset()
        with self._state:
            if self._quota is not None:
                self._quota = 0  # AvailableNow: nothing ready any more, the run is over
        return start

    def _still_held(self, unacked: dict[int, Plan]) -> bool:
        """Whether the tags of the ``unacked`` batches hold any message (renewing them). Those that
        hold none are forgotten: their slots found nothing, or the sink acked what they read (settle
        does, once its ledger commit and outbox are done), so no flush batch is needed for them."""
        tags = [tag for plan in unacked.values() for tag in plan.tags(self.options.queue)]
        with self._settling:
            held = self.transport.renew_tagged(self.options.queue, tags)
        if held:
            return True
        with self._state:
            for batch in unacked:
                self._open.pop(batch, None)
        return False

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        last = _batch(end)
        if last <= _batch(start):
            return []
        plan = Plan.from_offset(end)
        with self._state:
            opened = self._open.get(last)
            if opened is None:
                if plan is None:
                    # replayed from an offset log written without slots (the driver-side design):
                    # nothing names what was reserved for it, so plan fresh slots now
                    plan = Plan(last, self._run, self._shares(self.options.max_messages_per_batch))
                # a batch replayed after a restart: its slots name the dead run's tags, so they
                # read back what that run's tasks took; from now on it is renewed and acked here
                opened = self._open[last] = _Open(plan)
                log.info("babelq stream %s: replaying batch %d (run %s)", self.options.queue, last, plan.run)
            plan = opened.plan
        log.info("babelq stream %s batch %d: %d read slots", self.options.queue, last, len(plan.shares))
        tags = plan.tags(self.options.queue)
        return [ReadSlot(tag, share, last) for tag, share in zip(tags, plan.shares, strict=True)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """On an executor: reserve the slot's share under its tag (or get back what the tag holds)."""
        assert isinstance(partition, ReadSlot)
        opts = self.options
        transport = open_reserving(opts, max_held=partition.share)
        try:
            held = transport.reserve_tagged(opts.queue, partition.tag, max_messages=partition.share)
        finally:
            transport.close()
        if held:
            yield deliveries_to_arrow(held, now_ms(), partition.batch_id, reader_identity("executor"))

    def commit(self, end: dict[str, Any]) -> None:
        upto = _batch(end)
        with self._settling:
            with self._state:
                done = [self._open.pop(b).plan for b in sorted(self._open) if b <= upto]
            finished = Plan.from_offset(end)
            if finished is not None and all(p.batch != finished.batch for p in done):
                # a batch a dead run read and Spark committed, but the run died before acking it
                done.append(finished)
            tags = [tag for plan in done for tag in plan.tags(self.options.queue)]
            acked = self.transport.ack_tagged(self.options.queue, tags) if tags else 0
        log.info("babelq stream %s: committed up to batch %d, acked %d", self.options.queue, upto, acked)

    def stop(self) -> None:
        self._stop_renewing()
        with self._settling, self._state:
            tags = [tag for o in self._open.values() for tag in o.plan.tags(self.options.queue)]
            self._open.clear()
        transport, self._transport = self._transport, None
        if transport is None:
            return
        try:
            if tags:
                released = transport.release_tagged(self.options.queue, tags)
                log.info("babelq stream %s: released %d unacked messages on stop", self.options.queue,
                         released)  # fmt: skip
        finally:
            transport.close()


# -- the driver reads (AMQP, SQS) -------------------------------------------------------------------


@dataclass
class _Held:
    """The reservations of one planned batch (none for a flush batch) and when they were last leased."""

    deliveries: list[Delivery]
    leased_at: float  # time.monotonic() of the reservation or of the last renewal


class DriverStreamReader(_StreamReader):
    """Driver-side state: one transport and the reservations of every batch not yet committed."""

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._held: dict[int, _Held] = {}  # batch id -> its reservations, until commit
        self._planned: dict[str, list[ReservedPartition]] = {}

    def _max_held(self) -> int:
        # batch N is still held while batch N+1 is reserved in latestOffset
        return 2 * self.options.max_messages_per_batch

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
        limit = self._limit()
        if limit <= 0:
            return []
        opts = self.options
        held = reserve_up_to(self.transport, opts.queue, limit, opts.reserve_batch)
        self._take_quota(len(held))
        return held

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
        opts = self.options
        count = len(shares(len(deliveries), opts.num_partitions, opts.max_messages_per_partition))
        by = reader_identity("driver")
        parts = [ReservedPartition(chunk, at, last, by) for chunk in split(to_rows(deliveries), count)]
        with self._state:
            self._planned[key] = parts
        log.info("babelq stream %s batch %d: %d messages", self.options.queue, last, len(deliveries))
        return list(parts)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ReservedPartition)
        if partition.rows:
            yield to_arrow(partition.rows, partition.reserved_at, partition.batch_id, partition.read_by)

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
        self._stop_renewing()
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


def executors_read(url: str) -> bool:
    """Whether the streaming source's tasks reserve ``url``'s messages on the executors (the
    transport ``url`` opens has tagged reservations) rather than the driver's planner."""
    from babelq.transports import transport_class

    return transport_class(url).tagged_for(url)


def stream_reader(options: SourceOptions) -> _StreamReader:
    """The reader for ``options.url``: executors read where the transport has tagged reservations."""
    if executors_read(options.url):
        return SlotStreamReader(options)
    return DriverStreamReader(options)
