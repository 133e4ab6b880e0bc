"""Your own pipeline on Spark: `urn:babel:orders:created` messages into an `orders` table, each once,
and `urn:babel:orders:paid` into `payments` with a batch handler (a partition's messages at once).

Run: python examples/orders_pipeline.py   (publishes a few orders to an SQLite broker in a scratch
directory, runs the pipeline into an SQLite sink, prints the table and the dead letters)

Or run the pipeline itself over any broker and sink:
    babelq consume --app examples/orders_pipeline.py:pipeline --broker sqlite:///tmp/q.db \\
        --sink postgresql://postgres@127.0.0.1:5432/test --checkpoint /tmp/orders-ck --until-drained
"""

from __future__ import annotations

import json
from typing import Any

from babelq.pipelines.consume import DONE, Message, Pipeline, Verdict, dead_letter, marks

pipeline = Pipeline(queue="orders")
ORDER = {"type": "object", "required": ["order_id", "amount_cents", "currency"],
         "properties": {"order_id": {"type": "integer"}, "amount_cents": {"type": "integer"},
                        "currency": {"type": "string"}}}
PAYMENT = {"type": "object", "required": ["order_id", "amount_cents"],
           "properties": {"order_id": {"type": "integer"}, "amount_cents": {"type": "integer"}}}


@pipeline.setup
def create_orders(tx: Any) -> None:
    tx.execute("CREATE TABLE IF NOT EXISTS orders (order_id BIGINT PRIMARY KEY, amount_cents BIGINT, "
               "currency TEXT, meta_id TEXT)")
    tx.execute("CREATE TABLE IF NOT EXISTS payments (order_id BIGINT PRIMARY KEY, amount_cents BIGINT, "
               "meta_id TEXT)")


@pipeline.handler("urn:babel:orders:created", schema=ORDER)
def created(message: Message, tx: Any) -> None:
    order = message.data  # the same order under another meta.id is the same row: kept once
    tx.execute(f"INSERT INTO orders VALUES ({marks(tx, 4)}) ON CONFLICT (order_id) DO NOTHING",
               (order["order_id"], order["amount_cents"], order["currency"], message.id))


@pipeline.batch_handler("urn:babel:orders:paid", schema=PAYMENT)
def paid(batch: Any, tx: Any) -> list[Verdict]:
    """A pyarrow.RecordBatch of the partition's payments (meta_id, attempts, ..., data as JSON
    text), a verdict per row in order; only the rows called DONE are written."""
    payments = [json.loads(text) for text in batch.column("data").to_pylist()]
    verdicts = [DONE if p["amount_cents"] > 0 else dead_letter("a payment must be positive", cause="amount")
                for p in payments]
    ids = batch.column("meta_id").to_pylist()
    rows = [(p["order_id"], p["amount_cents"], meta_id)
            for p, meta_id, verdict in zip(payments, ids, verdicts, strict=True) if verdict is DONE]
    tx.executemany(f"INSERT INTO payments VALUES ({marks(tx, 3)}) ON CONFLICT (order_id) DO NOTHING", rows)
    return verdicts


def main() -> None:
    import sqlite3
    import tempfile
    from pathlib import Path

    from babelq.envelope import make
    from babelq.pipelines.consume import consume
    from babelq.spark.session import get_session
    from babelq.transports import Outgoing, open_transport

    work = Path(tempfile.mkdtemp(prefix="orders-example-"))
    broker, sink = f"sqlite://{work}/queue.db", f"sqlite://{work}/shop.db"
    orders = [make("urn:babel:orders:created", {"order_id": n, "amount_cents": 100 * n, "currency": "AUD"},
                   queue="orders") for n in range(1, 6)]
    bad = make("urn:babel:orders:created", {"order_id": "seven", "currency": "AUD"}, queue="orders")
    payments = [make("urn:babel:orders:paid", {"order_id": n, "amount_cents": 100 * n}, queue="orders")
                for n in (1, 2, 0)]  # the last one's amount is refused: a dead letter
    transport = open_transport(broker)
    transport.publish_many("orders", [Outgoing(e.encode()) for e in [*orders, bad, *payments]])
    spark = get_session("babelq-orders-example")
    run = consume(spark, pipeline, url=broker, sink=sink, checkpoint=work / "checkpoint", timeout=120)
    spark.stop()
    shop = sqlite3.connect(work / "shop.db")
    rows = shop.execute("SELECT * FROM orders ORDER BY order_id").fetchall()
    paid_rows = shop.execute("SELECT order_id, amount_cents FROM payments ORDER BY order_id").fetchall()
    dead = transport.reserve("orders.dlq", max_messages=10)
    transport.close()
    print(f"drained: {run.drained}; outcomes: {dict(run.stats.by_urn)}")
    print(f"orders table: {rows}")
    print(f"payments table: {paid_rows}")
    print(f"dead letters: {len(dead)}")
    assert run.drained and len(rows) == 5 and paid_rows == [(1, 100), (2, 200)] and len(dead) == 2, \
        "the example did not reconcile"


if __name__ == "__main__":
    main()
