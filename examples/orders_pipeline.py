"""Your own pipeline on Spark: `urn:babel:orders:created` messages into an `orders` table, each once.

Run: python examples/orders_pipeline.py   (publishes a few orders to an SQLite broker in a scratch
directory, runs the pipeline into an SQLite sink, prints the table and the dead letters)

Or run the pipeline itself over any broker and sink:
    babelq consume --app examples/orders_pipeline.py:pipeline --broker sqlite:///tmp/q.db \\
        --sink postgresql://postgres@127.0.0.1:5432/test --checkpoint /tmp/orders-ck --until-drained
"""

from __future__ import annotations

from typing import Any

from babelq.pipelines.consume import Message, Pipeline, marks

pipeline = Pipeline(queue="orders")
ORDER = {"type": "object", "required": ["order_id", "amount_cents", "currency"],
         "properties": {"order_id": {"type": "integer"}, "amount_cents": {"type": "integer"},
                        "currency": {"type": "string"}}}


@pipeline.setup
def create_orders(tx: Any) -> None:
    tx.execute("CREATE TABLE IF NOT EXISTS orders (order_id BIGINT PRIMARY KEY, amount_cents BIGINT, "
               "currency TEXT, meta_id TEXT)")


@pipeline.handler("urn:babel:orders:created", schema=ORDER)
def created(message: Message, tx: Any) -> None:
    order = message.data  # the same order under another meta.id is the same row: kept once
    tx.execute(f"INSERT INTO orders VALUES ({marks(tx, 4)}) ON CONFLICT (order_id) DO NOTHING",
               (order["order_id"], order["amount_cents"], order["currency"], message.id))


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
    transport = open_transport(broker)
    transport.publish_many("orders", [Outgoing(e.encode()) for e in [*orders, bad]])
    spark = get_session("babelq-orders-example")
    run = consume(spark, pipeline, url=broker, sink=sink, checkpoint=work / "checkpoint", timeout=120)
    spark.stop()
    rows = sqlite3.connect(work / "shop.db").execute("SELECT * FROM orders ORDER BY order_id").fetchall()
    dead = transport.reserve("orders.dlq", max_messages=10)
    transport.close()
    print(f"drained: {run.drained}; outcomes: {dict(run.stats.by_urn)}")
    print(f"orders table: {rows}")
    print(f"dead letters: {len(dead)}")
    assert run.drained and len(rows) == 5 and len(dead) == 1, "the example did not reconcile"


if __name__ == "__main__":
    main()
