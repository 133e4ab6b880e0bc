"""babelq consume into Parquet files: each message's rows appended once, only committed files seen.

One streaming ``consume()`` runs the orders example (``examples/orders_parquet_pipeline.py``) over
the SQLite broker into ``parquet://``: rows = distinct order ids = handled messages, the bad
ones on the DLQ once each. The other tests drive babelq's partition function (what a Spark task
runs) over rows the consume rules classified once on the JVM, to replay one micro-batch exactly,
and the files sink itself, to leave what a crash leaves (a committed file still in staging, a
failed attempt's file) and read the tables with Spark as any reader would.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import make
from babelq.errors import ConfigurationError, UnavailableError
from babelq.pipelines.consume import Pipeline, consume, load_pipeline
from babelq.pipelines.consume.files import STAGING, FilesSink, check_files_cluster, files_target
from babelq.pipelines.consume.partition import READ_BY, SECONDS, ConsumeConfig, consume_partition
from babelq.pipelines.consume.sinks import open_sink
from babelq.transports import Outgoing, open_transport

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CREATED = "urn:babel:orders:created"
PAID = "urn:babel:orders:paid"
QUEUE = "orders"
NOW = 1_900_000_000_000
Counts = dict[tuple[str, str, str], int]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders_parquet_pipeline.py"
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="module")
def pipeline() -> Pipeline:
    return load_pipeline(f"{EXAMPLE}:pipeline")


def _bodies(queue: str) -> tuple[list[bytes], set[str]]:
    """30 orders (one published twice), 3 that break the schema, 8 payments of which 2 are
    refused; the bodies and the meta ids that must be dead-lettered."""
    orders = [make(CREATED, {"order_id": n, "amount_cents": 10 * n, "currency": "AUD"}, queue=queue)
              for n in range(1, 31)]
    bad = [make(CREATED, {"order_id": f"bad-{n}", "currency": "AUD"}, queue=queue) for n in range(3)]
    payments = [make(PAID, {"order_id": n, "amount_cents": 10 * n}, queue=queue) for n in range(1, 7)]
    refused = [make(PAID, {"order_id": n, "amount_cents": -n}, queue=queue) for n in (7, 8)]
    envelopes = [*bad[:1], *orders[:15], *payments, orders[3], *bad[1:], *orders[15:], *refused]
    return [e.encode() for e in envelopes], {e.id for e in [*bad, *refused]}


def _dead_letter_ids(url: str, queue: str) -> list[str]:
    transport = open_transport(url)
    try:
        dead = transport.reserve(f"{queue}.dlq", max_messages=100)
    finally:
        transport.close()
    return [json.loads(m.body)["meta"]["id"] for m in dead]


def _table(spark: Any, path: Path) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.read.parquet(str(path)).collect())


def _staged(path: Path) -> list[Path]:
    return sorted((path / STAGING).glob("*")) if (path / STAGING).exists() else []


# -- a streaming run, end to end ------------------------------------------------------------------
def test_the_orders_example_into_parquet_each_order_once_each_bad_message_dead_lettered_once(
    spark: Any, pipeline: Pipeline, tmp_path: Path, unique_queue: str
) -> None:
    url, queue, shop = f"sqlite://{tmp_path}/q.db", unique_queue, tmp_path / "shop"
    bodies, bad_ids = _bodies(queue)
    transport = open_transport(url)
    transport.publish_many(queue, [Outgoing(b) for b in bodies])
    transport.close()

    run = consume(spark, pipeline, url=url, sink=f"parquet://{shop}", queue=queue, checkpoint=tmp_path / "ck",
                  max_messages_per_batch=20, timeout=240)

    assert run.drained and run.stats.batches > 1
    by = run.stats.by_urn
    orders = spark.read.parquet(str(shop / "orders"))
    assert orders.columns == ["order_id", "amount_cents", "currency", "meta_id", "batch_id"]
    rows = orders.count()
    assert rows == orders.select("order_id").distinct().count() == orders.select("meta_id").distinct().count()
    assert rows == by[CREATED, "handled", ""] == 30
    assert sum(n for (u, o, _), n in by.items() if (u, o) == (CREATED, "duplicate")) == 1
    batches = {r[0] for r in orders.select("batch_id").distinct().collect()}
    assert batches <= set(range(run.stats.batches + 1)) and None not in batches
    payments = _table(spark, shop / "payments")
    assert [r[:2] for r in payments] == [(n, 10 * n) for n in range(1, 7)]  # the refused ones' rows dropped
    assert by[PAID, "dead_lettered", "amount"] == 2 and by[CREATED, "dead_lettered", "schema"] == 3
    dead = _dead_letter_ids(url, queue)
    assert sorted(dead) == sorted(bad_ids)  # each bad message once
    assert _staged(shop / "orders") == _staged(shop / "payments") == []
    sink = open_sink(f"parquet://{shop}")
    assert isinstance(sink, FilesSink)
    try:
        assert sink.counts() == (36, 5, 0)  # processed ids, outbox rows, unpublished
        files, unpublished = sink.file_counts()
        assert unpublished == 0 and files == len(list((shop / "orders").glob("*.parquet"))) + len(
            list((shop / "payments").glob("*.parquet")))
    finally:
        sink.close()


# -- one micro-batch, replayed ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def classified(spark: Any, pipeline: Pipeline) -> Any:
    """The bodies of :func:`_bodies` as the consume rules classify them (a pyarrow Table)."""
    from babelq.pipelines.consume.classify import Classifier, decoded

    bodies, _ = _bodies(QUEUE)
    df = spark.createDataFrame([(b, 0) for b in bodies], "body binary, broker_attempts int")
    classifier = Classifier(urns=pipeline.urns, policy=ConsumeConfig("", QUEUE, "", pipeline).policy)
    return classifier(decoded(df), NOW).toArrow()


def _partition(table: Any, config: ConsumeConfig, batch_id: int, chunk: int) -> Counts:
    """``table`` through one partition of micro-batch ``batch_id``, in Arrow batches of ``chunk``
    rows; the outcome counts."""
    counts: Counts = {}
    for batch in consume_partition(iter(table.to_batches(max_chunksize=chunk)), config, batch_id):
        for r in batch.to_pylist():
            if r["outcome"] not in (SECONDS, READ_BY):
                counts[r["urn"], r["outcome"], r["cause"]] = r["n"]
    return counts


def test_a_micro_batch_replayed_after_its_commit_appends_nothing_twice(
    spark: Any, pipeline: Pipeline, classified: Any, tmp_path: Path
) -> None:
    shop = tmp_path / "shop"
    config = ConsumeConfig(url=f"sqlite://{tmp_path}/q.db", queue=QUEUE, sink=f"parquet://{shop}",
                           pipeline=pipeline)
    first = _partition(classified, config, 4, 7)
    assert first[CREATED, "handled", ""] == 30 and first[PAID, "handled", ""] == 6
    files = sorted(shop.rglob("*.parquet"))
    # Spark runs batch 4 again (the run died before its commit in the checkpoint): same id, same rows
    again = _partition(classified, config, 4, 100)
    assert {(u, o) for u, o, _ in again} == {(CREATED, "duplicate"), (PAID, "duplicate")}
    assert sum(again.values()) == sum(first.values())
    assert sorted(shop.rglob("*.parquet")) == files  # no file added
    orders = _table(spark, shop / "orders")
    assert len(orders) == len({r[0] for r in orders}) == 30 and {r[4] for r in orders} == {4}
    assert len(_dead_letter_ids(config.url, QUEUE)) == 5  # the dead letters of the first run only


def test_the_state_in_postgresql_and_the_orc_format(
    spark: Any, pipeline: Pipeline, classified: Any, tmp_path: Path
) -> None:
    from conftest import require_service

    require_service("postgres")
    prefix = f"pq{uuid.uuid4().hex[:10]}_"
    sink = f"orc://{tmp_path}/shop?state={POSTGRES}"
    config = ConsumeConfig(url=f"sqlite://{tmp_path}/q.db", queue=QUEUE, sink=sink, pipeline=pipeline,
                           prefix=prefix)
    try:
        assert _partition(classified, config, 0, 50)[CREATED, "handled", ""] == 30
        assert _partition(classified, config, 1, 50).get((CREATED, "handled", ""), 0) == 0
        orders = spark.read.orc(str(tmp_path / "shop" / "orders"))
        assert orders.count() == orders.select("order_id").distinct().count() == 30
        assert not (tmp_path / "shop" / "_babelq").exists()  # the state is in PostgreSQL
        opened = open_sink(sink, prefix=prefix)
        assert opened.counts()[0] == 36
        opened.close()
    finally:
        import psycopg

        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            for table in ("processed_ids", "outbox", "files"):
                conn.execute(f"DROP TABLE IF EXISTS {prefix}{table}")


# -- what a crash leaves -------------------------------------------------------------------------
def _commit(sink: FilesSink, mid: str, **appends: dict[str, Any]) -> None:
    with sink.transaction() as tx:
        assert sink.claim_ids(tx, [mid], NOW) == {mid}
        view = sink.view(tx, [mid], per_message=True)
        for table, row in appends.items():
            view.append(table, row)


def test_readers_see_committed_files_only_and_the_next_run_settles_what_a_crash_left(
    spark: Any, pipeline: Pipeline, tmp_path: Path
) -> None:
    shop = tmp_path / "shop"
    url = f"parquet://{shop}"
    sink = open_sink(url)
    assert isinstance(sink, FilesSink)
    sink.bind(pipeline.tables, 9)
    _commit(sink, "m1", orders={"order_id": 1, "amount_cents": 10, "currency": "AUD"})
    assert sink.publish_committed() == 1
    # committed, then the process died before the rename
    _commit(sink, "m2", orders={"order_id": 2, "amount_cents": 20, "currency": "AUD"})
    # an attempt that fails after staging its first file: payments' staging cannot be created
    (shop / "payments").mkdir()
    (shop / "payments" / STAGING).write_text("in the way")
    sink.outage_seconds = 0.0
    with pytest.raises(UnavailableError, match="cannot write payments"):
        _commit(sink, "m3", orders={"order_id": 3, "amount_cents": 30, "currency": "AUD"},
                payments={"order_id": 3, "amount_cents": 30})
    sink.close()  # the process is gone: what it held in memory with it

    staged = _staged(shop / "orders")
    assert len(staged) == 2  # the committed file and the failed attempt's
    assert _table(spark, shop / "orders") == [(1, 10, "AUD", "m1", 9)]

    later = open_sink(url)
    assert isinstance(later, FilesSink)
    try:
        assert later.flush_committed() == 1  # what the next run does before its query starts
        assert _table(spark, shop / "orders") == [(1, 10, "AUD", "m1", 9), (2, 20, "AUD", "m2", 9)]
        left = _staged(shop / "orders")
        assert len(left) == 1  # the failed attempt's file: young, kept, never read
        assert later.processed(["m1", "m2", "m3"]) == {"m1", "m2"}
        old = time.time() - 2 * 3_600
        os.utime(left[0], (old, old))
        assert later.flush_committed() == 0
        assert _staged(shop / "orders") == []
        assert later.file_counts() == (2, 0)
    finally:
        later.close()


# -- the API's edges -------------------------------------------------------------------------------
@pytest.fixture
def files(tmp_path: Path, pipeline: Pipeline) -> Iterator[FilesSink]:
    sink = open_sink(f"parquet://{tmp_path}/shop")
    assert isinstance(sink, FilesSink)
    sink.bind(pipeline.tables, 0)
    yield sink
    sink.close()


def test_what_an_append_refuses(files: FilesSink) -> None:
    import pyarrow as pa

    with files.transaction() as tx:
        batch = files.view(tx, ["a", "b"], per_message=False)
        with pytest.raises(ValueError, match="need a meta_id column"):
            batch.append("payments", [{"order_id": 1, "amount_cents": 1}])
        with pytest.raises(ValueError, match="meta_id 'c' names no message"):
            batch.append("payments", [{"order_id": 1, "amount_cents": 1, "meta_id": "c"}])
        one = files.view(tx, ["a"], per_message=True)
        with pytest.raises(ValueError, match="colour not in the table's declared schema"):
            one.append("orders", {"order_id": 1, "colour": "red"})
        with pytest.raises(ValueError, match="batch_id is babelq's column"):
            one.append("kept", {"batch_id": 1})
        with pytest.raises(ConfigurationError, match="must start with a letter"):
            one.append("_hidden", {"x": 1})
        with pytest.raises(TypeError, match="a pyarrow Table"):
            one.append("kept", "x=1")
        with pytest.raises(TypeError, match=r"tx.append\(table, rows\)"):
            one.execute("INSERT INTO orders VALUES (1)")
        one.append("kept", pa.table({"x": [1, 2]}))  # undeclared: its own columns
        batch.append("kept", [{"x": 3, "meta_id": "b"}, {"y": "z", "meta_id": "a"}])
        files.keep_rows(batch, {"a"})
    files.publish_committed()
    kept = sorted(files.root.joinpath("kept").glob("*.parquet"))
    import pyarrow.parquet as pq

    assert pq.read_table(kept[0]).to_pylist() == [  # the rows of "b", not done, dropped
        {"x": 1, "y": None, "meta_id": "a", "batch_id": 0},
        {"x": 2, "y": None, "meta_id": "a", "batch_id": 0},
        {"x": None, "y": "z", "meta_id": "a", "batch_id": 0}]


def test_files_sink_urls() -> None:
    target = files_target("parquet:///data/shop?state=postgresql://u:secret@db/x?sslmode=require")
    assert target is not None and target.directory == "/data/shop"
    assert target.state == "postgresql://u:secret@db/x?sslmode=require" and "secret" not in target.shown
    assert files_target("orc://relative/dir") is not None and files_target("sqlite:///x.db") is None
    for bad, why in (("parquet://", "names no directory"), ("parquet:///d?mode=x", "the one option"),
                     ("parquet:///d?state=orc:///e", "must be an SQL database")):
        with pytest.raises(ConfigurationError, match=why):
            files_target(bad)
    with pytest.raises(ConfigurationError, match="does not exist"):
        open_sink("parquet:///no/such/parent/shop")


def test_a_cluster_needs_a_shared_absolute_directory_and_the_state_in_postgresql() -> None:
    master = "spark://10.0.0.5:7077"
    with pytest.raises(ConfigurationError, match=r"local mode only.*\?state=postgresql"):
        check_files_cluster(master, "parquet:///shared/shop")
    with pytest.raises(ConfigurationError, match="relative directory"):
        check_files_cluster(master, f"parquet://shop?state={POSTGRES}")
    check_files_cluster(master, f"parquet:///shared/shop?state={POSTGRES}")
    check_files_cluster("local[2]", "parquet://shop")
    check_files_cluster(master, "sqlite:///x.db")  # not a files sink: the SQL sinks' own check

