"""The ``babelq`` data source against the SQLite broker, across Spark's Python worker processes."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import make
from babelq.transports import Outgoing, open_transport

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _bodies(n: int, queue: str) -> list[bytes]:
    return [make("urn:babel:tests:item", {"i": i}, queue=queue).encode() for i in range(n)]


def _rows_left(db: Path) -> int:
    """Every message row still stored (ready, delayed or reserved), whatever the queue."""
    with sqlite3.connect(db) as conn:
        (table,) = conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE '%messages'"
        ).fetchone()
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


@pytest.fixture
def broker(tmp_path: Path) -> tuple[str, Path]:
    return f"sqlite://{tmp_path}/q.db", tmp_path / "q.db"


def test_batch_read_is_a_peek_and_write_publishes(
    spark: Any, broker: tuple[str, Path], unique_queue: str
) -> None:
    from babelq.spark.datasource import register

    register(spark)
    url, _ = broker
    bodies = _bodies(300, unique_queue)
    transport = open_transport(url)
    transport.publish_many(unique_queue, [Outgoing(b) for b in bodies])

    df = spark.read.format("babelq").option("url", url).option("queue", unique_queue).load().cache()
    got = [bytes(r["body"]) for r in df.select("body").collect()]
    assert sorted(got) == sorted(bodies)  # byte for byte
    assert {r["queue"] for r in df.select("queue").distinct().collect()} == {unique_queue}
    assert transport.size(unique_queue) == 300  # put back: a batch read does not consume

    target = unique_queue + "-copy"
    df.select("body").write.format("babelq").option("url", url).option("queue", target).option(
        "publishBatch", "64"
    ).mode("append").save()
    assert transport.size(target) == 300
    copied = transport.reserve(target, max_messages=1000)
    assert sorted(d.body for d in copied) == sorted(bodies)


def test_batch_read_consume_acks(spark: Any, broker: tuple[str, Path], unique_queue: str) -> None:
    from babelq.spark.datasource import register

    register(spark)
    url, db = broker
    transport = open_transport(url)
    transport.publish_many(unique_queue, [Outgoing(b) for b in _bodies(50, unique_queue)])
    n = (
        spark.read.format("babelq")
        .option("url", url)
        .option("queue", unique_queue)
        .option("consume", "true")
        .option("maxMessagesPerBatch", "30")
        .load()
        .count()
    )
    assert n == 30
    assert transport.size(unique_queue) == 20
    assert _rows_left(db) == 20


def test_stream_available_now_reads_everything_and_acks_it(
    spark: Any, broker: tuple[str, Path], unique_queue: str, tmp_path: Path
) -> None:
    from babelq.spark.datasource import register

    register(spark)
    url, db = broker
    bodies = _bodies(500, unique_queue)
    open_transport(url).publish_many(unique_queue, [Outgoing(b) for b in bodies])
    seen: list[bytes] = []
    sizes: list[int] = []

    def collect(df: Any, _batch: int) -> None:
        rows = df.select("body").collect()
        sizes.append(len(rows))
        seen.extend(bytes(r["body"]) for r in rows)

    query = (
        spark.readStream.format("babelq")
        .option("url", url)
        .option("queue", unique_queue)
        .option("maxMessagesPerBatch", "200")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert sorted(seen) == sorted(bodies)
    assert sizes[:3] == [200, 200, 100] and sum(sizes) == 500  # then an empty flush batch
    assert _rows_left(db) == 0  # every batch acked, the last one by the flush batch


def test_stream_write_publishes_each_micro_batch(
    spark: Any, broker: tuple[str, Path], unique_queue: str, tmp_path: Path
) -> None:
    from babelq.spark.datasource import register

    register(spark)
    url, _ = broker
    src = unique_queue + "-src"
    bodies = _bodies(120, unique_queue)
    open_transport(url).publish_many(src, [Outgoing(b) for b in bodies])
    query = (
        spark.readStream.format("babelq")
        .option("url", url)
        .option("queue", src)
        .load()
        .select("body")
        .writeStream.format("babelq")
        .option("url", url)
        .option("queue", unique_queue)
        .option("checkpointLocation", str(tmp_path / "ck2"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    transport = open_transport(url)
    assert sorted(d.body for d in transport.reserve(unique_queue, max_messages=500)) == sorted(bodies)
    assert transport.size(src) == 0


def test_missing_options_fail_clearly(spark: Any) -> None:
    from babelq.errors import ConfigurationError
    from babelq.spark.datasource import SourceOptions

    with pytest.raises(ConfigurationError, match="url"):
        SourceOptions.parse({"queue": "q"})
    with pytest.raises(ConfigurationError, match="maxMessagesPerBatch"):
        SourceOptions.parse({"url": "sqlite:///x.db", "queue": "q", "maxMessagesPerBatch": "0"})
