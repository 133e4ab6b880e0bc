"""The ``babelq`` Spark data source on every broker it serves: SQLite, Redis, RabbitMQ and SQS.

Each test runs once per broker (``broker`` is parametrized): batch write with the binding's
projection, batch read (a peek, and ``consume=true``), streaming write, streaming read with
acks after the micro-batch commits, and a query killed mid-batch (its planner process gets
SIGKILL, so it cannot give anything back) that restarts from its checkpoint and loses nothing.

Redis and RabbitMQ are the live servers on 127.0.0.1 (``require_service``: skipped locally when
down, a failure in CI); SQS is the session's moto server over HTTP (``sqs_url`` in conftest).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import Envelope, decode, make
from babelq.transports import Delivery, Outgoing, Transport, open_transport
from babelq.transports.amqp import AMQPTransport
from babelq.transports.sqs import SQSTransport, physical_name
from conftest import SQS_REGION, require_service

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.live]

BROKERS = ("sqlite", "redis", "amqp", "sqs")
#: the brokers whose streaming reads happen in executor tasks (tagged reservations)
EXECUTOR_READS = ("sqlite", "redis")
#: the streaming reservation lease of these tests: a killed run's messages come back this fast
LEASE = "2"
RUNNER_MODULE = b"pyspark.sql.streaming.python_streaming_source_runner"


@dataclass
class Broker:
    """One broker under test: its URL, how many messages a test uses, and a view of what it stores."""

    name: str
    url: str
    n: int  # messages per test: moto is slow (one HTTP request per 10 messages), so SQS tests stay small
    stored: Callable[[str], int]  # every message still held for a queue: ready, delayed or reserved
    queues: list[str] = field(default_factory=list)
    _transports: list[Transport] = field(default_factory=list)

    def transport(self) -> Transport:
        t = open_transport(self.url)
        self._transports.append(t)
        return t

    def queue(self, name: str) -> str:
        self.queues.append(name)
        return name

    def close(self) -> None:
        for t in self._transports:
            t.close()


def _sqlite_stored(db: Path) -> Callable[[str], int]:
    def stored(queue: str) -> int:
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT COUNT(*) FROM babelq_messages WHERE queue = ?", (queue,)).fetchone()
            return int(row[0])

    return stored


def _redis_stored(url: str) -> Callable[[str], int]:
    import redis

    from babelq.bindings.redis import keys_for

    def stored(queue: str) -> int:
        client = redis.Redis.from_url(url)
        try:
            keys = keys_for(queue)
            return (
                int(client.llen(keys.ready))
                + int(client.llen(keys.processing))
                + int(client.zcard(keys.delayed))
            )
        finally:
            client.close()

    return stored


def _amqp_stored(url: str) -> Callable[[str], int]:
    from babelq.transports.amqp_client import Connection, ConnectionParameters

    def stored(queue: str) -> int:
        """Ready messages once no consumer is left: a gone consumer's unacked messages are requeued."""
        connection = Connection(ConnectionParameters.from_url(url))
        try:
            channel = connection.channel()
            deadline = time.monotonic() + 15
            while True:
                _, ready, consumers = channel.queue_declare(queue, passive=True)
                if consumers == 0 or time.monotonic() > deadline:
                    assert consumers == 0, f"a consumer still holds {queue}"
                    return ready
                time.sleep(0.1)
        finally:
            connection.close()

    return stored


def _sqs_stored(endpoint: str) -> Callable[[str], int]:
    import boto3

    client = boto3.client(
        "sqs", endpoint_url=endpoint, region_name=SQS_REGION,
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
             "ApproximateNumberOfMessagesDelayed"]  # fmt: skip

    def stored(queue: str) -> int:
        url = client.get_queue_url(QueueName=physical_name(queue))["QueueUrl"]
        attrs = client.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        return sum(int(attrs[name]) for name in names)

    return stored


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    name: str = request.param
    if name == "sqlite":
        db = tmp_path / "q.db"
        b = Broker(name, f"sqlite://{db}", 300, _sqlite_stored(db))
    elif name == "redis":
        host, port = require_service("redis")
        url = f"redis://{host}:{port}/15"
        b = Broker(name, url, 300, _redis_stored(url))
    elif name == "amqp":
        host, port = require_service("rabbitmq")
        url = f"amqp://guest:guest@{host}:{port}/%2F"
        b = Broker(name, url, 300, _amqp_stored(url))
    else:
        url = request.getfixturevalue("sqs_url")
        b = Broker(name, url, 30, _sqs_stored(request.getfixturevalue("sqs_endpoint")))
    yield b
    b.close()
    cleanup = open_transport(b.url)
    try:
        if isinstance(cleanup, SQSTransport):
            cleanup.delete_queues(b.queues)
        for queue in b.queues:
            if isinstance(cleanup, AMQPTransport):
                cleanup.delete_queues(queue)
            elif not isinstance(cleanup, SQSTransport):
                cleanup.purge(queue)
    finally:
        cleanup.close()


def _envelopes(n: int, queue: str) -> list[Envelope]:
    # non-ASCII and "/" in the payload: the bytes must survive every broker unchanged
    return [make("urn:babel:tests:item", {"i": i, "note": f"Zoë/{i}"}, queue=queue) for i in range(n)]


def _bodies(envs: list[Envelope]) -> list[bytes]:
    return [e.encode() for e in envs]


def _drain(t: Transport, queue: str, expect: int, within: float = 10.0) -> list[Delivery]:
    """Reserve and ack until ``expect`` messages came (or time is up), then check nothing more is there."""
    got: list[Delivery] = []
    end = time.monotonic() + within
    while len(got) < expect and time.monotonic() < end:
        batch = t.reserve(queue, max_messages=min(expect - len(got), 100), timeout=0.5)
        t.ack_many(batch)
        got += batch
    assert t.reserve(queue, max_messages=10, timeout=0.2) == []
    return got


def _assert_projection(broker: str, got: list[Delivery], envs: list[Envelope]) -> None:
    """Each delivery carries its broker binding's projection of its own body (docs/standard.md §4)."""
    by_id = {e.meta["id"]: e for e in envs}
    assert len(got) == len(by_id)
    for d in got:
        env = by_id[decode(d.body).meta["id"]]
        if broker == "amqp":
            props = d.headers
            assert (props["type"], props["message_id"], props["correlation_id"]) == (
                env.urn,
                env.meta["id"],
                env.trace_id,
            )
            assert (props["app_id"], props["content_type"], props["delivery_mode"]) == (
                "babelqueue",
                "application/json",
                2,
            )
            assert props["headers"]["x-schema-version"] == 1
            assert props["headers"]["x-attempts"] == 0
        elif broker == "sqs":
            attrs = {name: value["StringValue"] for name, value in d.headers.items()}
            assert attrs["bq-job"] == env.urn
            assert attrs["bq-trace-id"] == env.trace_id
            assert attrs["bq-message-id"] == env.meta["id"]
            assert attrs["bq-created-at"] == str(env.meta["created_at"])
        else:  # SQLite and Redis have no native metadata: the stored element is the envelope
            assert not d.headers


def _source(spark: Any, b: Broker, queue: str, **options: str) -> Any:
    from babelq.spark.datasource import register

    register(spark)
    reader = spark.readStream.format("babelq").option("url", b.url).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


# -- batch ---------------------------------------------------------------------------------------


def test_batch_write_publishes_bodies_with_the_binding_projection(
    spark: Any, broker: Broker, unique_queue: str
) -> None:
    from babelq.spark.datasource import register

    register(spark)
    queue = broker.queue(unique_queue)
    envs = _envelopes(broker.n, queue)
    bodies = _bodies(envs)
    df = spark.createDataFrame([(b,) for b in bodies], "body BINARY")  # 2 partitions: local[2]
    df.write.format("babelq").option("url", broker.url).option("queue", queue).option(
        "publishBatch", "7"
    ).mode("append").save()

    t = broker.transport()
    got = _drain(t, queue, len(bodies))
    assert sorted(d.body for d in got) == sorted(bodies)  # byte for byte, each exactly once
    _assert_projection(broker.name, got, envs)
    t.close()
    assert broker.stored(queue) == 0


def test_batch_read_is_a_peek_unless_consume(spark: Any, broker: Broker, unique_queue: str) -> None:
    from babelq.spark.datasource import register

    register(spark)
    queue = broker.queue(unique_queue)
    bodies = _bodies(_envelopes(broker.n, queue))
    broker.transport().publish_many(queue, [Outgoing(b) for b in bodies])

    def read(**options: str) -> Any:
        reader = spark.read.format("babelq").option("url", broker.url).option("queue", queue)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    rows = read().select("body", "queue", "broker_attempts", "read_by").collect()
    assert sorted(bytes(r["body"]) for r in rows) == sorted(bodies)
    assert {r["queue"] for r in rows} == {queue}
    assert {r["broker_attempts"] for r in rows} == {0}
    assert {r["read_by"].split(" ")[0] for r in rows} == {"driver"}  # a peek is read on the driver
    assert broker.stored(queue) == len(bodies)  # put back: nothing consumed, nothing lost
    # SQS counts every receive and its binding reads attempts from that count (docs/standard.md §4): the
    # second look at the same messages says 1; the other brokers leave attempts to the body
    again = read().select("broker_attempts").collect()
    assert {r["broker_attempts"] for r in again} == ({1} if broker.name == "sqs" else {0})

    part = len(bodies) // 3
    taken = [bytes(r["body"]) for r in read(consume="true", maxMessagesPerBatch=str(part)).collect()]
    assert len(taken) == part and set(taken) <= set(bodies)
    assert broker.stored(queue) == len(bodies) - part
    rest = _drain(broker.transport(), queue, len(bodies) - part)
    assert sorted([*taken, *(d.body for d in rest)]) == sorted(bodies)


# -- streaming -----------------------------------------------------------------------------------


def test_stream_read_acks_each_batch_after_it_commits(
    spark: Any, broker: Broker, unique_queue: str, tmp_path: Path
) -> None:
    queue = broker.queue(unique_queue)
    bodies = _bodies(_envelopes(broker.n, queue))
    t = broker.transport()
    t.publish_many(queue, [Outgoing(b) for b in bodies])
    per_batch = -(-len(bodies) * 3 // 5)  # a full batch, then a partial one
    leased = broker.name != "amqp"  # AMQP deliveries are held by the reader's connection, not a lease
    batches: list[list[bytes]] = []
    stored_during: list[int] = []  # messages the broker still stores (ready or reserved) while a batch runs
    waiting_after_lease: list[int] = []
    readers: set[str] = set()

    def collect(df: Any, _batch_id: int) -> None:
        got = df.select("body", "read_by").collect()
        rows = [bytes(r["body"]) for r in got]
        readers.update(r["read_by"] for r in got)
        batches.append(rows)
        if leased and rows:
            stored_during.append(broker.stored(queue))
            if len(batches) == 1:
                time.sleep(1.5 * float(LEASE))  # a batch slower than the lease: the reader renews it
                waiting_after_lease.append(t.size(queue))

    query = (
        _source(spark, broker, queue, maxMessagesPerBatch=str(per_batch), visibilityTimeout=LEASE)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    seen = [b for batch in batches for b in batch]
    assert sorted(seen) == sorted(bodies)  # byte for byte, each exactly once
    # a full batch, the rest, then the empty flush batch whose planning acked the one before
    assert [len(b) for b in batches] == [per_batch, len(bodies) - per_batch, 0]
    if leased:
        # batch 1 is acked only once batch 2 is planned; batch 2 only by the flush batch
        assert stored_during == [len(bodies), len(bodies) - per_batch]
        assert waiting_after_lease == [len(bodies) - per_batch]  # renewed: none of batch 1 came back
    assert broker.stored(queue) == 0  # every batch acked
    # issue 11: executor tasks read the brokers with tagged reservations; the driver reads AMQP and SQS
    role = "executor" if broker.name in EXECUTOR_READS else "driver"
    assert {r.split(" ")[0] for r in readers} == {role}, readers


def test_stream_write_publishes_each_micro_batch(
    spark: Any, broker: Broker, unique_queue: str, tmp_path: Path
) -> None:
    src, dst = broker.queue(unique_queue + "-src"), broker.queue(unique_queue + "-dst")
    envs = _envelopes(broker.n, src)
    bodies = _bodies(envs)
    broker.transport().publish_many(src, [Outgoing(b) for b in bodies])
    query = (
        _source(spark, broker, src, maxMessagesPerBatch=str(-(-len(bodies) // 2)), visibilityTimeout=LEASE)
        .select("body")
        .writeStream.format("babelq")
        .option("url", broker.url)
        .option("queue", dst)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    got = _drain(broker.transport(), dst, len(bodies))
    assert sorted(d.body for d in got) == sorted(bodies)
    assert broker.stored(src) == 0
    _assert_projection(broker.name, got, envs)


# -- a killed query ------------------------------------------------------------------------------


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        parent = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry))
    out: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            out.append(child)
            todo.append(child)
    return out


def _stream_planners(spark: Any) -> set[int]:
    """PIDs of the Python processes that hold streaming readers for this SparkSession's JVM.

    Spark starts one ``python -m pyspark.sql.streaming.python_streaming_source_runner`` per
    streaming query (``_gateway.proc`` is the JVM that PySpark launched)."""
    jvm_pid = int(spark.sparkContext._gateway.proc.pid)
    found: set[int] = set()
    for pid in _descendants(jvm_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if RUNNER_MODULE in fh.read():
                    found.add(pid)
        except OSError:
            continue
    return found


def test_killed_query_restarts_from_checkpoint_and_loses_nothing(
    spark: Any, broker: Broker, unique_queue: str, tmp_path: Path
) -> None:
    queue = broker.queue(unique_queue)
    bodies = _bodies(_envelopes(broker.n, queue))
    broker.transport().publish_many(queue, [Outgoing(b) for b in bodies])
    per_batch = -(-len(bodies) // 3)
    checkpoint = str(tmp_path / "ck")
    before = _stream_planners(spark)
    first: list[list[bytes]] = []
    killed: list[int] = []

    def die_in_second_batch(df: Any, _batch_id: int) -> None:
        rows = [bytes(r["body"]) for r in df.select("body").collect()]
        if not rows:
            return
        first.append(rows)  # the sink applied this batch...
        if len(first) == 2:  # ...and the driver dies before Spark commits it
            for pid in _stream_planners(spark) - before:
                os.kill(pid, signal.SIGKILL)  # the reader holding batch 2: no release, no ack
                killed.append(pid)
            raise RuntimeError("killed mid-batch")

    query = (
        _source(spark, broker, queue, maxMessagesPerBatch=str(per_batch), visibilityTimeout=LEASE)
        .writeStream.foreachBatch(die_in_second_batch)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    with pytest.raises(Exception, match="killed mid-batch"):
        query.awaitTermination(120)
    assert [len(b) for b in first] == [per_batch, per_batch]
    assert len(killed) == 1  # this query's reader process, and only it
    # The dead reader could not release or ack batch 2: it comes back by itself (lease lapse,
    # or the broker requeues a dropped AMQP connection's unacked deliveries).
    t = broker.transport()
    end = time.monotonic() + 30
    while t.size(queue) < len(bodies) - per_batch and time.monotonic() < end:
        time.sleep(0.2)
    assert t.size(queue) == len(bodies) - per_batch

    second: list[bytes] = []
    query = (
        _source(spark, broker, queue, maxMessagesPerBatch=str(per_batch), visibilityTimeout=LEASE)
        .writeStream.foreachBatch(lambda df, _: second.extend(bytes(r["body"]) for r in df.collect()))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    seen = Counter([b for batch in first for b in batch] + second)
    assert set(seen) == set(bodies)  # nothing lost
    # duplicates are exactly the documented redelivery: the batch that died before its commit
    assert {b for b, n in seen.items() if n > 1} == set(first[1])
    assert max(seen.values()) == 2
    assert broker.stored(queue) == 0


# -- executors read (issue 11) ---------------------------------------------------------------------


@pytest.mark.parametrize("broker", EXECUTOR_READS, indirect=True)
def test_two_actions_on_one_micro_batch_see_the_same_messages(
    spark: Any, broker: Broker, unique_queue: str, tmp_path: Path
) -> None:
    """Each action reads the broker again; a slot's reservation is taken once, so the second
    action gets the same messages (not new ones, which the first action would never have seen)
    and the commit acks each message once."""
    queue = broker.queue(unique_queue)
    bodies = _bodies(_envelopes(broker.n, queue))
    broker.transport().publish_many(queue, [Outgoing(b) for b in bodies])
    actions: list[tuple[list[bytes], list[bytes], int]] = []

    def two_actions(df: Any, _batch_id: int) -> None:
        first = sorted(bytes(r["body"]) for r in df.select("body").collect())
        second = sorted(bytes(r["body"]) for r in df.select("body").collect())
        actions.append((first, second, df.count()))

    query = (
        _source(spark, broker, queue, maxMessagesPerBatch=str(-(-len(bodies) // 2)), visibilityTimeout=LEASE)
        .writeStream.foreachBatch(two_actions)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert all(first == second and count == len(first) for first, second, count in actions)
    assert sorted(b for first, _, _ in actions for b in first) == sorted(bodies)
    assert broker.stored(queue) == 0


@pytest.mark.parametrize("broker", EXECUTOR_READS, indirect=True)
def test_a_restart_acks_the_batch_the_dead_run_committed_but_never_acked(
    spark: Any, broker: Broker, unique_queue: str, tmp_path: Path
) -> None:
    """Batch 0 reaches the sink and Spark's commit log; its ack would come with batch 1's
    planning, but the driver's reader is SIGKILLed first and its leases lapse. Before issue 11
    its messages were then delivered again; now the restarted query acks them from the tags its
    offset log names, and the sink sees every message exactly once."""
    queue = broker.queue(unique_queue)
    bodies = _bodies(_envelopes(broker.n, queue))
    broker.transport().publish_many(queue, [Outgoing(b) for b in bodies])
    per_batch = len(bodies) // 2
    checkpoint = str(tmp_path / "ck")
    before = _stream_planners(spark)
    first: list[bytes] = []
    query = (
        _source(spark, broker, queue, maxMessagesPerBatch=str(per_batch), visibilityTimeout=LEASE)
        .writeStream.foreachBatch(lambda df, _: first.extend(bytes(r["body"]) for r in df.collect()))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 hour")  # after batch 0, nothing happens until the kill
        .start()
    )
    end = time.monotonic() + 60
    while (query.lastProgress or {}).get("batchId") != 0 and time.monotonic() < end:
        time.sleep(0.1)  # lastProgress is reported once the batch is in the commit log
    assert (query.lastProgress or {}).get("batchId") == 0 and len(first) == per_batch
    killed = _stream_planners(spark) - before
    assert len(killed) == 1
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):  # stopping a query whose reader process is gone may complain
        query.stop()
    time.sleep(float(LEASE) + 1)  # batch 0's leases lapse: they would be ready for anyone now
    second: list[bytes] = []
    query = (
        _source(spark, broker, queue, maxMessagesPerBatch=str(per_batch), visibilityTimeout=LEASE)
        .writeStream.foreachBatch(lambda df, _: second.extend(bytes(r["body"]) for r in df.collect()))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(first + second) == sorted(bodies)  # each exactly once
    assert broker.stored(queue) == 0


def test_a_stream_from_a_missing_sqlite_database_fails_naming_it(spark: Any, tmp_path: Path) -> None:
    """Issue 11: ``settle`` given a relative ``sqlite://`` path on a cluster read a new, empty
    database and said "drained". A reader never creates the database."""
    from babelq.spark.datasource import register

    register(spark)
    missing = tmp_path / "missing.db"
    query = (
        spark.readStream.format("babelq").option("url", f"sqlite://{missing}").option("queue", "payments")
        .load()
        .writeStream.foreachBatch(lambda df, _: df.count())
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )  # fmt: skip
    with pytest.raises(Exception, match="no sqlite queue database") as caught:
        query.awaitTermination(120)
    assert str(missing) in str(caught.value)
    assert not missing.exists()
