"""The streaming reader's life cycle without a Spark scheduler: the driver's calls (latestOffset,
partitions, commit, stop) and the executors' ``read`` made directly, on real brokers (an SQLite
file, the live Redis), so retries, replays, competing consumers and restarts happen exactly when
a test says. The reader and each partition are pickled on the way to a "task", as Spark ships
them. The same behaviour through Spark: ``test_datasource_brokers.py`` and
``test_datasource_executors.py``.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from babelq.errors import ConfigurationError
from babelq.spark.datasource import BabelqDataSource
from babelq.transports import Outgoing, Transport, open_transport
from conftest import require_service

LEASE = 1.0


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        db = tmp_path / "q.db"
        open_transport(f"sqlite://{db}").close()  # a publisher made the database
        return f"sqlite://{db}"
    host, port = require_service("redis")
    return f"redis://{host}:{port}/15"


@pytest.fixture
def broker(url: str, unique_queue: str) -> Iterator[Transport]:
    t = open_transport(url)
    yield t
    t.purge(unique_queue)
    t.close()


def _reader(url: str, queue: str, **options: str) -> Any:
    source = BabelqDataSource({"url": url, "queue": queue, "visibilityTimeout": str(LEASE), **options})
    return source.streamReader(None)  # type: ignore[arg-type]  # our source ignores the schema


def _task(reader: Any, partition: Any) -> list[bytes]:
    """One task attempt on an "executor": what Spark ships is pickled, the read runs there."""
    shipped, part = pickle.loads(pickle.dumps(reader)), pickle.loads(pickle.dumps(partition))
    rows: list[bytes] = []
    for batch in shipped.read(part):
        rows += batch.column("body").to_pylist()
        assert set(batch.column("read_by").to_pylist()) == {batch.column("read_by")[0].as_py()}
        assert batch.column("read_by")[0].as_py().startswith("executor ")
    return rows


def _bodies(n: int, tag: str = "m") -> list[bytes]:
    return [b'{"job":"urn:babel:test:slot","n":%d,"t":"%s"}' % (i, tag.encode()) for i in range(n)]


def _next(reader: Any, start: dict[str, Any]) -> dict[str, Any]:
    return dict(reader.latestOffset(start, reader.getDefaultReadLimit()))


def _dying_run(url: str, queue: str, options: dict[str, str], out: Any) -> None:
    """In a child process: plan batch 1, read every slot, send (end offset, rows per slot), then
    die without stop(): no release, no ack, no more renewals (a SIGKILLed driver)."""
    reader = _reader(url, queue, **options)
    start = {"batch": 0}
    end = _next(reader, start)
    out.send((end, [_task(reader, p) for p in reader.partitions(start, end)]))
    os._exit(0)


def _die_after_batch_one(url: str, queue: str, **options: str) -> tuple[dict[str, Any], list[list[bytes]]]:
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    process = context.Process(target=_dying_run, args=(url, queue, options, child))
    process.start()
    result: tuple[dict[str, Any], list[list[bytes]]] = parent.recv()
    process.join(30)
    return result


def test_partitions_carry_no_bodies_whatever_the_batch_size(
    url: str, broker: Transport, unique_queue: str
) -> None:
    """Issue 11: the driver plans read slots; what it ships does not grow with the batch."""
    sizes = []
    for n in (20, 4000):
        broker.publish_many(unique_queue, [Outgoing(b"x" * 800) for _ in range(n)])
        reader = _reader(url, unique_queue, maxMessagesPerBatch="10000", numPartitions="2")
        try:
            start = {"batch": 0}
            end = _next(reader, start)
            parts = reader.partitions(start, end)
            assert len(parts) == 2
            sizes.append(len(pickle.dumps(list(parts))))
            assert sum(len(_task(reader, p)) for p in parts) == n
            reader.commit(end)
        finally:
            reader.stop()
    assert max(sizes) < 1000 and abs(sizes[0] - sizes[1]) < 16, sizes  # only the shares' digits differ
    assert broker.size(unique_queue) == 0


def test_a_retried_task_reads_the_same_messages_and_commit_acks_exactly_those(
    url: str, broker: Transport, unique_queue: str
) -> None:
    bodies = _bodies(10)
    broker.publish_many(unique_queue, [Outgoing(b) for b in bodies])
    reader = _reader(url, unique_queue, maxMessagesPerBatch="6", numPartitions="2")
    try:
        start = {"batch": 0}
        end = _next(reader, start)
        slot0, slot1 = reader.partitions(start, end)
        first = _task(reader, slot0)  # attempt 0 read its slot, then the task failed
        again = _task(reader, slot0)  # attempt 1 (or a second action, or a speculative copy)
        assert again == first == bodies[:3]
        assert _task(reader, slot1) == bodies[3:6]
        # planned again (Spark may): the same slots, so the same messages
        assert [_task(reader, p) for p in reader.partitions(start, end)] == [bodies[:3], bodies[3:6]]
        assert broker.ready(unique_queue) == 4 and broker.reserved(unique_queue) == 6
        # the next batch's planning commits this one: exactly the six that were read are acked
        end2 = _next(reader, end)
        reader.commit(end)
        assert broker.reserved(unique_queue) == 0 and broker.ready(unique_queue) == 4
        rest = [b for p in reader.partitions(end, end2) for b in _task(reader, p)]
        assert rest == bodies[6:]
        reader.commit(end2)
        assert broker.size(unique_queue) == 0 and broker.reserved(unique_queue) == 0
    finally:
        reader.stop()


def test_idle_flush_and_available_now(url: str, broker: Transport, unique_queue: str) -> None:
    """No batch while nothing is ready (delayed messages are not ready); after a batch that read
    something, one empty flush batch (its planning commits the last real one); then idle."""
    reader = _reader(url, unique_queue, maxMessagesPerBatch="4")
    try:
        start = {"batch": 0}
        broker.publish(unique_queue, b"later", delay_ms=60_000)
        assert _next(reader, start) == start  # idle: no empty micro-batch
        broker.publish_many(unique_queue, [Outgoing(b) for b in _bodies(3)])
        end = _next(reader, start)
        assert end["batch"] == 1 and sum(end["slots"]) == 3
        assert _next(reader, start) == end  # asked again before Spark planned it: the same batch
        read = [b for p in reader.partitions(start, end) for b in _task(reader, p)]
        assert sorted(read) == sorted(_bodies(3))
        flush = _next(reader, end)
        assert flush["batch"] == 2 and flush["slots"] == []
        reader.commit(end)
        assert reader.partitions(end, flush) == []
        assert _next(reader, flush) == flush  # idle again: everything read is acked
        assert broker.reserved(unique_queue) == 0 and broker.size(unique_queue) == 1  # the delayed one
    finally:
        reader.stop()

    # AvailableNow: what waited at the start, in batches, then the flush batch, then the end
    broker.purge(unique_queue)
    broker.publish_many(unique_queue, [Outgoing(b) for b in _bodies(5)])
    reader = _reader(url, unique_queue, maxMessagesPerBatch="2")
    try:
        reader.prepareForTriggerAvailableNow()
        broker.publish_many(unique_queue, [Outgoing(b) for b in _bodies(3, "late")])  # not this run's
        offset, seen, batches = {"batch": 0}, [], []
        while (end := _next(reader, offset)) != offset:
            got = [b for p in reader.partitions(offset, end) for b in _task(reader, p)]
            batches.append(len(got))
            seen += got
            reader.commit(offset)
            offset = end
        reader.commit(offset)
        assert batches == [2, 2, 1, 0] and sorted(seen) == sorted(_bodies(5))
        assert broker.reserved(unique_queue) == 0 and broker.size(unique_queue) == 3
    finally:
        reader.stop()


def test_no_flush_batch_when_the_sink_acked_the_batch_or_its_slots_found_nothing(
    url: str, broker: Transport, unique_queue: str
) -> None:
    """A sink that acks a batch's tags itself (settle, once its outcomes are committed) leaves the
    tags holding nothing: the reader then plans no flush batch, and the source's own commit of that
    batch later acks nothing more. The same for a batch whose messages another consumer took."""
    from babelq.spark.datasource.slots import Plan

    reader = _reader(url, unique_queue, maxMessagesPerBatch="4")
    try:
        broker.publish_many(unique_queue, [Outgoing(b) for b in _bodies(3)])
        start = {"batch": 0}
        end = _next(reader, start)
        read = [b for p in reader.partitions(start, end) for b in _task(reader, p)]
        assert sorted(read) == sorted(_bodies(3))
        plan = Plan.from_offset(end)
        assert plan is not None
        assert broker.ack_tagged(unique_queue, plan.tags(unique_queue)) == 3  # the sink's own ack
        assert _next(reader, end) == end  # idle at once: no flush batch
        assert broker.size(unique_queue) == 0 and broker.reserved(unique_queue) == 0

        # later traffic: the next batch is planned as usual; committing it acks only its own reads
        broker.publish_many(unique_queue, [Outgoing(b) for b in _bodies(2, "next")])
        end2 = _next(reader, end)
        assert end2["batch"] == 2 and sum(end2["slots"]) == 2
        assert len([b for p in reader.partitions(end, end2) for b in _task(reader, p)]) == 2
        reader.commit(end)
        assert broker.reserved(unique_queue) == 2  # batch 1's commit left batch 2's reads alone
        flush = _next(reader, end2)  # batch 2 was not acked by a sink: it still needs a flush batch
        assert flush["batch"] == 3 and flush["slots"] == []
        reader.commit(end2)
        assert broker.reserved(unique_queue) == 0 and broker.size(unique_queue) == 0

        # a batch planned while 2 were ready whose slots found nothing (another consumer won)
        broker.publish_many(unique_queue, [Outgoing(b) for b in _bodies(2, "raced")])
        end4 = _next(reader, flush)
        other = broker.reserve(unique_queue, max_messages=10, timeout=1.0)
        assert len(other) == 2
        assert [b for p in reader.partitions(flush, end4) for b in _task(reader, p)] == []
        assert _next(reader, end4) == end4  # nothing held: no flush batch for it
        broker.ack_many(other)
    finally:
        reader.stop()


def test_a_replayed_batch_reads_what_the_dead_run_held_and_acks_only_that(
    url: str, broker: Transport, unique_queue: str
) -> None:
    """A batch Spark replays after a restart names the dead run's tags (its offset says which
    run planned it): each slot gets back what that run's task took, as long as nobody took it
    since; a message another consumer took meanwhile is not the new run's to ack."""
    bodies = _bodies(6)
    broker.publish_many(unique_queue, [Outgoing(b) for b in bodies])
    start = {"batch": 0}
    end, read = _die_after_batch_one(url, unique_queue, maxMessagesPerBatch="4", numPartitions="2")
    assert read == [bodies[:2], bodies[2:4]]
    # the run died: its leases lapse, and another consumer takes three messages
    time.sleep(LEASE + 0.3)
    other = open_transport(url)
    try:
        taken = other.reserve(unique_queue, max_messages=3)
        assert len(taken) == 3
        theirs = {d.body for d in taken}
        restarted = _reader(url, unique_queue, maxMessagesPerBatch="4", numPartitions="2")
        try:
            again = [_task(restarted, p) for p in restarted.partitions(start, end)]  # the replay
            if url.startswith("sqlite"):  # a lapsed row stays the tag's until someone claims it
                assert again == [[b for b in rows if b not in theirs] for rows in read]
            else:  # Redis: the other consumer's reserve swept every lapsed reservation back
                assert again == [[], []]
            following = _next(restarted, end)
            restarted.commit(end)  # acks what the replay read, nothing of the other consumer's
            assert broker.reserved(unique_queue) == 3
            other.ack_many(taken)
            rest = [b for p in restarted.partitions(end, following) for b in _task(restarted, p)]
            restarted.commit(following)
            got = [b for rows in again for b in rows] + sorted(theirs) + rest
            assert sorted(got) == sorted(bodies)  # each exactly once: nothing lost, nothing twice
            assert broker.size(unique_queue) == 0 and broker.reserved(unique_queue) == 0
        finally:
            restarted.stop()
    finally:
        other.close()


def test_a_batch_the_dead_run_finished_is_acked_by_the_next_runs_commit(
    url: str, broker: Transport, unique_queue: str
) -> None:
    """Spark's commit log has batch 1 but the run died before acking it: the restarted query's
    commit of that offset acks what the dead run's tasks read (nothing is delivered twice)."""
    bodies = _bodies(4)
    broker.publish_many(unique_queue, [Outgoing(b) for b in bodies])
    end, read = _die_after_batch_one(url, unique_queue, maxMessagesPerBatch="2")
    assert sorted(b for rows in read for b in rows) == bodies[:2]
    restarted = _reader(url, unique_queue, maxMessagesPerBatch="2")
    try:
        following = _next(restarted, end)
        restarted.commit(end)
        assert broker.reserved(unique_queue) == 0
        rest = [b for p in restarted.partitions(end, following) for b in _task(restarted, p)]
        assert sorted(rest) == bodies[2:]
        restarted.commit(following)
        assert broker.size(unique_queue) == 0
    finally:
        restarted.stop()


def test_stop_gives_back_what_the_open_batches_hold(url: str, broker: Transport, unique_queue: str) -> None:
    bodies = _bodies(3)
    broker.publish_many(unique_queue, [Outgoing(b) for b in bodies])
    reader = _reader(url, unique_queue)
    start = {"batch": 0}
    end = _next(reader, start)
    assert sorted(b for p in reader.partitions(start, end) for b in _task(reader, p)) == sorted(bodies)
    reader.stop()
    assert broker.reserved(unique_queue) == 0 and broker.ready(unique_queue) == 3


def test_the_driver_renews_what_executors_hold(url: str, broker: Transport, unique_queue: str) -> None:
    broker.publish_many(unique_queue, [Outgoing(b) for b in _bodies(2)])
    reader = _reader(url, unique_queue)
    try:
        start = {"batch": 0}
        end = _next(reader, start)
        for p in reader.partitions(start, end):
            _task(reader, p)
        time.sleep(2.5 * LEASE)  # the reader's renewal thread keeps the executors' reservations
        assert broker.ready(unique_queue) == 0 and broker.reserved(unique_queue) == 2
    finally:
        reader.stop()


def test_a_consumer_never_creates_an_sqlite_queue_database(tmp_path: Path) -> None:
    """Issue 11: a stream (or batch) reader given a path with no database fails, naming the path;
    before, it created an empty database and found nothing to read."""
    missing = tmp_path / "nothing-here.db"
    reader = _reader(f"sqlite://{missing}", "payments")
    with pytest.raises(ConfigurationError) as caught:
        reader.latestOffset({"batch": 0}, reader.getDefaultReadLimit())
    assert str(missing) in str(caught.value) and "\n" not in str(caught.value)
    source = BabelqDataSource({"url": f"sqlite://{missing}", "queue": "payments"})
    with pytest.raises(ConfigurationError, match="does not create"):
        source.reader(None).partitions()  # type: ignore[arg-type]
    assert not missing.exists()


def test_logged_plan_reads_the_end_offset_spark_wrote(tmp_path: Path) -> None:
    """Settle's own ack finds a batch's tags in Spark's offset log (``offsets/<batchId>``: a version
    line, the batch's metadata, then the source's end offset); nothing to ack without one."""
    from babelq.spark.datasource.slots import Plan, logged_plan

    (tmp_path / "offsets").mkdir()
    metadata = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
    (tmp_path / "offsets" / "0").write_text(f'v1\n{metadata}\n{{"batch": 1, "run": "r1", "slots": [3, 2]}}\n')
    (tmp_path / "offsets" / "1").write_text(f'v1\n{metadata}\n{{"batch": 2}}\n')  # a driver-read source
    assert logged_plan(tmp_path, 0) == Plan(1, "r1", (3, 2))
    assert logged_plan(f"file://{tmp_path}", 0) == Plan(1, "r1", (3, 2))  # Spark's spelling of a local path
    assert logged_plan(tmp_path, 1) is None
    assert logged_plan(tmp_path, 7) is None  # no such batch
    assert logged_plan(tmp_path / "missing", 0) is None
