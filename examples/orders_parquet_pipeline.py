"""The orders pipeline into Parquet files: `urn:babel:orders:created` rows appended to the table
`orders`, `urn:babel:orders:paid` to `payments` with a batch handler, each message's rows once.

Run: python examples/orders_parquet_pipeline.py   (publishes a few orders to an SQLite broker in a
scratch directory, runs the pipeline into a Parquet sink there, reads the tables back with Spark)

Or run the pipeline itself over any broker:
    babelq consume --app examples/orders_parquet_pipeline.py:pipeline --broker sqlite:///tmp/q.db \\
        --sink parquet:///tmp/shop --checkpoint /tmp/orders-parquet-ck --until-drained
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from babelq.pipelines.consume import DONE, Message, Pipeline, Verdict, dead_letter

pipeline = Pipeline(queue="orders")
ORDER = {"type": "object", "required": ["order_id", "amount_cents", "currency"],
         "properties": {"order_id": {"type": "integer"}, "amount_cents": {"type": "integer"},
                        "currency": {"type": "string"}}}
PAYMENT = {"type": "object", "required": ["order_id", "amount_cents"],
           "properties": {"order_id": {"type": "integer"}, "amount_cents": {"type": "integer"}}}
# every file of a table has these columns, then babelq's meta_id and batch_id
pipeline.table("orders", pa.schema([("order_id", pa.int64()), ("amount_cents", pa.int64()),
                                    ("currency", pa.string())]))
pipeline.table("payments", pa.schema([("order_id", pa.int64()), ("amount_cents", pa.int64())]))


@pipeline.handler("urn:babel:orders:created", schema=ORDER)
def created(message: Message, tx: Any) -> None:
    order = message.data  # the row gets the message's meta_id
    tx.append("orders", {"order_id": order["order_id"], "amount_cents": order["amount_cents"],
                         "currency": order["currency"]})


@pipeline.batch_handler("urn:babel:orders:paid", schema=PAYMENT)
def paid(batch: Any, tx: Any) -> list[Verdict]:
    """The partition's payments at once: a row per payment, each naming its message's meta_id;
    babelq appends only the rows of the messages called DONE."""
    payments = [json.loads(text) for text in batch.column("data").to_pylist()]
    tx.append("payments", pa.table({"order_id": [p["order_id"] for p in payments],
                                    "amount_cents": [p["amount_cents"] for p in payments],
                                    "meta_id": batch.column("meta_id")}))
    return [DONE if p["amount_cents"] > 0 else dead_letter("a payment must be positive", cause="amount")
            for p in payments]


def main() -> None:
    import tempfile
    from pathlib import Path

    from babelq.envelope import make
    from babelq.pipelines.consume import consume
    from babelq.spark.session import get_session
    from babelq.transports import Outgoing, open_transport

    work = Path(tempfile.mkdtemp(prefix="orders-parquet-example-"))
    broker, shop = f"sqlite://{work}/queue.db", work / "shop"
    orders = [make("urn:babel:orders:created", {"order_id": n, "amount_cents": 100 * n, "currency": "AUD"},
                   queue="orders") for n in range(1, 6)]
    bad = make("urn:babel:orders:created", {"order_id": "seven", "currency": "AUD"}, queue="orders")
    payments = [make("urn:babel:orders:paid", {"order_id": n, "amount_cents": 100 * n}, queue="orders")
                for n in (1, 2, 0)]  # the last one's amount is refused: a dead letter
    transport = open_transport(broker)
    transport.publish_many("orders", [Outgoing(e.encode()) for e in [*orders, bad, *payments]])
    spark = get_session("babelq-orders-parquet-example")
    run = consume(spark, pipeline, url=broker, sink=f"parquet://{shop}", checkpoint=work / "checkpoint",
                  timeout=120)
    rows = [tuple(r) for r in spark.read.parquet(str(shop / "orders"))
            .select("order_id", "amount_cents", "meta_id").orderBy("order_id").collect()]
    paid_rows = [tuple(r) for r in spark.read.parquet(str(shop / "payments"))
                 .select("order_id", "amount_cents").orderBy("order_id").collect()]
    spark.stop()
    dead = transport.reserve("orders.dlq", max_messages=10)
    transport.close()
    print(f"drained: {run.drained}; outcomes: {dict(run.stats.by_urn)}")
    print(f"orders table: {rows}")
    print(f"payments table: {paid_rows}")
    print(f"dead letters: {len(dead)}")
    assert run.drained and [r[0] for r in rows] == [1, 2, 3, 4, 5], "the example did not reconcile"
    assert {r[2] for r in rows} == {e.id for e in orders}, "each order's row names its message"
    assert paid_rows == [(1, 100), (2, 200)] and len(dead) == 2, "the example did not reconcile"


if __name__ == "__main__":
    main()
