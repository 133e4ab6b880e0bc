"""Settle settles each read slot's rows in the task that read them: no shuffle, copies across slots.

A micro-batch's rows stay in the partitions the source's read slots made: the bodies are decoded,
classified and settled where they were read, and never move through a shuffle. Copies of one
message that two slots read are therefore settled by two tasks; the ledger keeps one of each
decision (a processed id is claimed once, an outbox key once). Byte-identical bodies without an id
that two slots read are two messages: both are dead-lettered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import decode, dlq_name, now_ms
from babelq.pipelines.ledger import open_ledger
from babelq.pipelines.settle import HANDLED_URNS, SettleConfig
from babelq.transports import open_transport
from payment_fixtures import transfer

pytestmark = [pytest.mark.spark]


def _frame(spark: Any, halves: tuple[list[bytes], list[bytes]]) -> Any:
    """A DataFrame of two partitions holding exactly ``halves`` (like two read slots)."""
    rdd = spark.sparkContext.parallelize([(b, 0) for b in halves[0] + halves[1]], 2)
    df = spark.createDataFrame(rdd, "body binary, broker_attempts int")
    placed = [[bytes(r[0]) for r in part] for part in df.rdd.glom().collect()]
    assert placed == [halves[0], halves[1]], "the test needs one half per partition"
    return df


def test_the_settle_plan_has_no_shuffle(spark: Any, tmp_path: Path, unique_queue: str) -> None:
    from babelq.pipelines.consume.classify import classified, decoded
    from babelq.runtime.rules import RetryPolicy

    df = spark.createDataFrame([(transfer("PAY-S1", unique_queue).encode(), 0)],
                               "body binary, broker_attempts int")
    rows = classified(decoded(df), now_ms=now_ms(), urns=HANDLED_URNS, policy=RetryPolicy(3))
    plan = rows._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" not in plan, plan


def test_copies_read_by_two_slots_are_settled_once(spark: Any, tmp_path: Path, unique_queue: str) -> None:
    from babelq.pipelines.consume.classify import decoded
    from babelq.pipelines.settle import settle_frame

    posted = transfer("PAY-P1", unique_queue)
    retried = transfer("PAY-R1", unique_queue, creditor_account="12340000")  # transient: retried once
    expired = transfer("PAY-E1", unique_queue, expire_at=now_ms() - 1)
    garbage = b"{not json at all"
    first = [posted.encode(), retried.encode(), expired.encode(), garbage]
    second = [garbage, expired.encode(), retried.encode(), posted.encode(), posted.encode()]
    ledger_path = tmp_path / "ledger.db"
    config = SettleConfig(url=f"sqlite://{tmp_path}/q.db", queue=unique_queue, ledger=str(ledger_path))

    counts = settle_frame(decoded(_frame(spark, (first, second))), config)

    assert counts[("posted", "")] == 1
    assert counts[("retried", "core_banking")] == 1
    assert counts[("dead_lettered", "expired")] == 1
    assert counts[("dead_lettered", "poison")] == 2  # two messages with the same bytes
    # the copy the second slot met twice is dropped there; the others by the ledger
    assert sum(n for (outcome, _), n in counts.items() if outcome == "duplicate") == 4
    ledger = open_ledger(str(ledger_path))
    try:
        assert ledger.references() == ["PAY-P1"]
    finally:
        ledger.close()
    transport = open_transport(config.url)
    try:
        retries = [decode(d.body) for d in transport.reserve(unique_queue, max_messages=10, timeout=3)]
        dead = [d.body for d in transport.reserve(dlq_name(unique_queue), max_messages=10, timeout=1)]
    finally:
        transport.close()
    assert [(r.id, r.attempts) for r in retries] == [(retried.id, 1)]
    assert len(dead) == 3
    assert sum(1 for body in dead if garbage in body or b"not json" in body) == 2


def test_the_default_micro_batch_is_big_where_the_executors_read(tmp_path: Path) -> None:
    from babelq.pipelines.consume.query import DRIVER_READS_BATCH, EXECUTORS_READ_BATCH, default_batch

    assert (EXECUTORS_READ_BATCH, DRIVER_READS_BATCH) == (100_000, 20_000)
    assert default_batch(f"sqlite://{tmp_path}/q.db") == EXECUTORS_READ_BATCH
    assert default_batch("redis://127.0.0.1:6379/15") == EXECUTORS_READ_BATCH
    assert default_batch("amqp://guest:guest@127.0.0.1:5672/%2F") == DRIVER_READS_BATCH
    assert default_batch("sqs://127.0.0.1:4566/000000000000") == DRIVER_READS_BATCH


def test_settle_without_a_batch_size_takes_30k_messages_in_one_micro_batch(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    from babelq.pipelines.settle import settle
    from babelq.transports import Outgoing

    url = f"sqlite://{tmp_path}/q.db"
    transport = open_transport(url)
    try:
        transport.publish_many(unique_queue, [Outgoing(transfer(f"PAY-B{i}", unique_queue).encode())
                                              for i in range(30_000)])
    finally:
        transport.close()
    run = settle(spark, url=url, queue=unique_queue, ledger=str(tmp_path / "ledger.db"),
                 checkpoint=str(tmp_path / "ck"), timeout=240)
    assert run.drained and run.stats.count("posted") == 30_000
    assert run.stats.batches == 1  # 20,000 per micro-batch made two


@pytest.mark.live
def test_settle_reads_a_laravel_layout_redis_queue_through_the_driver(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    """``?laravel=1`` opens a layout without tagged reservations although the scheme is redis:
    the source must read it on the driver (its executors cannot reserve by tag there)."""
    from babelq.pipelines.consume.query import DRIVER_READS_BATCH, default_batch
    from babelq.pipelines.settle import settle
    from babelq.spark.datasource.stream_reader import executors_read
    from babelq.transports import Outgoing
    from conftest import require_service

    require_service("redis")
    url = "redis://127.0.0.1:6379/15?laravel=1"
    assert not executors_read(url) and default_batch(url) == DRIVER_READS_BATCH
    transport = open_transport(url)
    try:
        transport.purge(unique_queue)
        transport.publish_many(unique_queue, [Outgoing(transfer(f"PAY-L{i}", unique_queue).encode())
                                              for i in range(5)])
        run = settle(spark, url=url, queue=unique_queue, ledger=str(tmp_path / "ledger.db"),
                     checkpoint=str(tmp_path / "ck"), timeout=120)
        assert run.drained and run.stats.count("posted") == 5
        assert transport.size(unique_queue) == 0
    finally:
        transport.purge(unique_queue)
        transport.close()
