"""babelq consume: a user's pipeline over a queue into the user's SQL database, each message once.

Messages come from both SDKs (the ``babelqueue`` package's ``BabelQueue.publish`` and babelq's
``make``) on the SQLite broker; the sinks are SQLite and PostgreSQL. The counts reconcile: rows =
distinct order ids = handled messages, every bad message on the DLQ once, and a second run over
the same bodies writes and publishes nothing.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import decode, make
from babelq.errors import UnavailableError
from babelq.pipelines.consume import ConsumeStats, Message, Pipeline, consume, load_pipeline, marks
from babelq.pipelines.consume.metrics import serve_consume_metrics
from babelq.pipelines.consume.sinks import open_sink
from babelq.runtime.errors import PermanentError
from babelq.transports import Outgoing, open_transport

pytestmark = [pytest.mark.spark, pytest.mark.slow]

URN = "urn:babel:orders:created"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders_pipeline.py"
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


class _TheirTransport:
    """The babelqueue SDK's transport contract over babelq's SQLite broker, so the reference SDK's
    own ``BabelQueue.publish`` writes the bodies."""

    def __init__(self, url: str) -> None:
        self.ours = open_transport(url)

    def publish(self, queue: str, body: str) -> None:
        self.ours.publish(queue, body.encode("utf-8"))

    def pop(self, queue: str, timeout: float = 1.0) -> Any:
        raise NotImplementedError

    def ack(self, message: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.ours.close()


def _publish_orders(url: str, queue: str, first: int, count: int) -> list[bytes]:
    """``count`` orders from ``first``: half by the babelqueue package, half by babelq; returns
    babelq's bodies."""
    from babelqueue import BabelQueue

    theirs = _TheirTransport(url)
    app = BabelQueue(transport=theirs, queue=queue)  # type: ignore[arg-type]
    half = count // 2
    for n in range(first, first + half):
        app.publish(URN, {"order_id": n, "amount_cents": 100 + n, "currency": "AUD"}, queue=queue)
    theirs.close()
    ours = [make(URN, {"order_id": n, "amount_cents": 100 + n, "currency": "EUR"}, queue=queue).encode()
            for n in range(first + half, first + count)]
    transport = open_transport(url)
    transport.publish_many(queue, [Outgoing(b) for b in ours])
    transport.close()
    return ours


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "queue"))
            out[sample.name, labels] = sample.value
    return out


def _dead_letters(url: str, queue: str) -> list[dict[str, Any]]:
    transport = open_transport(url)
    try:
        got = transport.reserve(f"{queue}.dlq", max_messages=1000)
        return [decode(d.body).dead_letter or {} for d in got]
    finally:
        transport.close()


def test_the_orders_example_into_sqlite_each_order_once_and_a_rerun_adds_nothing(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    pipeline = load_pipeline(f"{EXAMPLE}:pipeline")  # as `babelq consume --app` loads it
    url, queue, sink = f"sqlite://{tmp_path}/q.db", unique_queue, f"sqlite://{tmp_path}/shop.db"
    ours = _publish_orders(url, queue, 1, 30)
    bad = [make(URN, {"order_id": "x", "currency": "AUD"}, queue=queue).encode(),  # breaks the schema
           make("urn:babel:orders:cancelled", {"order_id": 1}, queue=queue).encode(),  # no handler
           b"{not json"]
    transport = open_transport(url)
    transport.publish_many(queue, [Outgoing(b) for b in [*bad, ours[0]]])  # ours[0]: a redelivered copy
    run = consume(spark, pipeline, url=url, sink=sink, queue=queue, checkpoint=tmp_path / "ck", timeout=240)

    assert run.drained
    by = run.stats.by_urn
    assert by[URN, "handled", ""] == 30
    assert by[URN, "duplicate", "in_batch"] + by[URN, "duplicate", "already_processed"] == 1
    assert by[URN, "dead_lettered", "schema"] == 1
    assert by["urn:babel:orders:cancelled", "dead_lettered", "unknown_urn"] == 1
    assert by["-", "dead_lettered", "poison"] == 1
    db = sqlite3.connect(tmp_path / "shop.db")
    rows, distinct = db.execute("SELECT COUNT(*), COUNT(DISTINCT order_id) FROM orders").fetchone()
    assert rows == distinct == 30
    assert transport.size(f"{queue}.dlq") == 3

    # the same bodies published again (a producer's duplicate, a replay): no order is written
    # twice. The two that failed are stored anew, so they are judged anew and dead-lettered again
    # (a message redriven from the DLQ looks the same, and must never be taken for its first life)
    transport.publish_many(queue, [Outgoing(b) for b in [*ours, bad[0], bad[1]]])
    again = consume(spark, pipeline, url=url, sink=sink, queue=queue, checkpoint=tmp_path / "ck", timeout=240)
    assert again.drained and again.stats.count("handled") == 0
    assert again.stats.count("duplicate") == len(ours)
    assert again.stats.count("dead_lettered") == 2
    assert db.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 30
    assert transport.size(f"{queue}.dlq") == 5
    db.close()
    transport.close()
    dead = _dead_letters(url, queue)
    assert sorted(str(d.get("cause") or d["reason"]) for d in dead) == [
        "poison", "schema", "schema", "unknown_urn", "unknown_urn"]
    schema = next(d for d in dead if d.get("cause") == "schema")
    assert schema["reason"] == "failed" and schema["error"].startswith("schema: $")
    assert schema["exception"] == "babelq.errors.SchemaViolationError"  # as the runtime names it
    sink_tables = open_sink(sink)
    assert sink_tables.counts() == (30, 5, 0)  # the handled ids; the five dead letters, all published
    sink_tables.close()


# -- a pipeline whose handler fails on purpose ---------------------------------------------------
FLAKY = Pipeline(queue="orders", max_attempts=3, retry_delay_ms=10)


@FLAKY.setup
def _orders_table(tx: Any) -> None:
    tx.execute("CREATE TABLE IF NOT EXISTS orders (order_id BIGINT PRIMARY KEY, amount_cents BIGINT, "
               "currency TEXT, meta_id TEXT)")


@FLAKY.handler(URN, schema={"type": "object", "required": ["order_id"]})
def _order(message: Message, tx: Any) -> None:
    data = message.data
    tx.execute(f"INSERT INTO orders VALUES ({marks(tx, 4)})",
               (data["order_id"], data.get("amount_cents", 0), data.get("currency", "AUD"), message.id))
    # the insert above is rolled back with the failure: only a handled message leaves a row
    if data.get("behaviour") == "raise":
        raise ValueError(f"order {data['order_id']} always fails")
    if data.get("behaviour") == "refuse":
        raise PermanentError("this customer is blocked", cause="blocked")
    marker = data.get("unavailable_once")
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        raise UnavailableError("the order service is down (once)")


@pytest.fixture
def pg_schema() -> Iterator[str]:
    from conftest import require_service

    require_service("postgres")
    import psycopg

    schema = f"consume_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield schema
    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_failures_into_postgres_retry_then_dlq_permanent_at_once_outage_never_the_messages_fault(
    spark: Any, tmp_path: Path, unique_queue: str, pg_schema: str
) -> None:
    import psycopg

    url, queue = f"sqlite://{tmp_path}/q.db", unique_queue
    sink = f"{POSTGRES}?options=-csearch_path%3D{pg_schema}"
    _publish_orders(url, queue, 1, 20)
    special = [
        make(URN, {"order_id": 100, "behaviour": "raise"}, queue=queue),
        make(URN, {"order_id": 101, "behaviour": "refuse"}, queue=queue),
        make(URN, {"order_id": 102, "unavailable_once": str(tmp_path / "down-once")}, queue=queue),
        make(URN, {"amount_cents": 5}, queue=queue),  # breaks the schema: no order_id
    ]
    transport = open_transport(url)
    transport.publish_many(queue, [Outgoing(e.encode()) for e in special])
    stats = ConsumeStats()  # what `babelq consume --metrics-port` serves, updated per micro-batch
    exporter = serve_consume_metrics(stats, 0, url=url, queue=queue, addr="127.0.0.1")
    try:
        run = consume(spark, FLAKY, url=url, sink=sink, queue=queue, checkpoint=tmp_path / "ck", timeout=240,
                      stats=stats)
        scraped = _scrape(exporter.port)
    finally:
        exporter.close()

    assert run.drained
    by = run.stats.by_urn
    assert by[URN, "handled", ""] == 21  # 20 orders + the one whose service was down once
    assert by[URN, "retried", "handler"] == 2  # attempts 1 and 2 of the failing order ...
    assert by[URN, "dead_lettered", "max_attempts"] == 1  # ... then the DLQ after the third
    assert by[URN, "dead_lettered", "blocked"] == 1  # PermanentError: at once, never retried
    assert by[URN, "dead_lettered", "schema"] == 1
    assert (tmp_path / "down-once").exists()
    # the worker's metric names: a raising handler counts as failed (2 retries + the DLQ)
    assert scraped["babelq_messages_handled_total", ()] == 21
    assert scraped["babelq_messages_failed_total", ()] == 3
    assert scraped["babelq_messages_dead_lettered_total", (("reason", "failed"),)] == 3
    blocked = (("cause", "blocked"), ("outcome", "dead_lettered"), ("urn", URN))
    assert scraped["babelq_consume_outcomes_total", blocked] == 1
    with psycopg.connect(sink) as conn:
        rows, distinct = conn.execute("SELECT COUNT(*), COUNT(DISTINCT order_id) FROM orders").fetchone()
        ids = conn.execute("SELECT COUNT(*) FROM babelq_processed_ids").fetchone()[0]
        failed = conn.execute("SELECT COUNT(*) FROM orders WHERE order_id IN (100, 101)").fetchone()[0]
    assert rows == distinct == ids == 21 and failed == 0  # a failed handler's writes are rolled back
    assert transport.size(f"{queue}.dlq") == 3
    transport.close()
    dead = {d["cause"]: d for d in _dead_letters(url, queue)}
    assert set(dead) == {"max_attempts", "blocked", "schema"}
    assert dead["max_attempts"]["attempts"] == 3 and dead["max_attempts"]["exception"] == "ValueError"
    assert dead["blocked"]["attempts"] == 0 and dead["blocked"]["error"] == "this customer is blocked"


PARQUET_EXAMPLE = EXAMPLE.with_name("orders_parquet_pipeline.py")


@pytest.mark.parametrize("route", ["redis-postgres", "amqp-parquet"])
def test_the_orders_example_on_a_real_broker_reconciles_in_postgres_and_parquet(
    spark: Any, tmp_path: Path, unique_queue: str, pg_schema: str, route: str
) -> None:
    """The orders pipeline as a user runs it: orders from both SDKs on Redis or RabbitMQ, into
    PostgreSQL or Parquet. Rows = distinct order ids = handled messages; each bad one on the DLQ
    once; nothing left on the queue."""
    from conftest import require_service

    broker, sink_kind = route.split("-")
    host, port = require_service("redis" if broker == "redis" else "rabbitmq")
    url = f"redis://{host}:{port}/15" if broker == "redis" else f"amqp://guest:guest@{host}:{port}/%2F"
    queue = unique_queue
    if sink_kind == "postgres":
        app, sink = EXAMPLE, f"{POSTGRES}?options=-csearch_path%3D{pg_schema}"
    else:
        app, sink = PARQUET_EXAMPLE, f"parquet://{tmp_path}/shop"
    _publish_orders(url, queue, 1, 40)
    bad = [make(URN, {"order_id": "x", "currency": "AUD"}, queue=queue).encode(), b"{not json"]
    transport = open_transport(url)
    try:
        transport.publish_many(queue, [Outgoing(b) for b in bad])
        run = consume(spark, load_pipeline(f"{app}:pipeline"), url=url, sink=sink, queue=queue,
                      checkpoint=tmp_path / "ck", timeout=240)
        assert run.drained
        assert run.stats.by_urn[URN, "handled", ""] == 40
        assert run.stats.count("dead_lettered") == 2
        if sink_kind == "postgres":
            import psycopg

            with psycopg.connect(sink) as conn:
                rows, distinct = conn.execute(
                    "SELECT COUNT(*), COUNT(DISTINCT order_id) FROM orders").fetchone()
        else:
            orders = spark.read.parquet(f"{tmp_path}/shop/orders")
            rows, distinct = orders.count(), orders.select("order_id").distinct().count()
        assert rows == distinct == 40
        dead = transport.reserve(f"{queue}.dlq", max_messages=10, timeout=2.0)
        assert len(dead) == 2
        transport.ack_many(dead)
        assert transport.size(queue) == 0
    finally:
        for name in (queue, f"{queue}.dlq"):
            transport.purge(name)
        transport.close()
