"""Any rows to envelopes: a CSV file of orders checked against a JSON Schema and published once.

Run: python examples/publish_orders.py   (writes into a scratch directory and prints what was
published, what was rejected and why, and that a second run publishes nothing)

The same from a shell:
    babelq publish orders.csv --urn urn:babel:orders:created --broker sqlite:///tmp/q.db \\
        --queue orders --schema orders.schema.json --id-column order_id --rejects /tmp/rejects
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from babelq.envelope import decode
from babelq.pipelines.publish import PublishSpec, publish
from babelq.pipelines.publish_schema import load_schema
from babelq.spark.session import get_session
from babelq.transports import open_transport

URN = "urn:babel:orders:created"
SCHEMA = {
    "type": "object",
    "required": ["order_id", "qty", "currency"],
    "properties": {
        "order_id": {"type": "string"},
        "qty": {"type": "integer", "minimum": 1},
        "price": {"type": "number"},
        "gift": {"type": "boolean"},
        "currency": {"type": "string", "enum": ["AUD", "NZD"]},
        "note": {"type": "string"},
    },
}
ORDERS = """order_id,qty,price,gift,currency,note
O-1,2,9.95,false,AUD,"Leave at the door, please"
O-2,1,120,TRUE,NZD,"Gift wrap; the card reads ""Happy birthday""
and is signed Sam"
O-3,two,5,false,AUD,qty is no integer
O-4,1,5,false,EUR,a currency the schema does not list
O-5,1,5,false
O-1,3,9.95,false,AUD,the id of the first order again
"""


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="publish-example-"))
    (work / "orders.csv").write_text(ORDERS, encoding="utf-8")
    (work / "orders.schema.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    url = f"sqlite://{work}/queue.db"
    spec = PublishSpec(URN, load_schema(work / "orders.schema.json", URN), id_column="order_id")
    spark = get_session("babelq-publish-example")
    run = {"url": url, "queue": "orders", "rejects_path": work / "rejects"}
    first = publish(spark, work / "orders.csv", spec, **run)
    print(f"batch {first.batch_id}: {first.rows_in} rows, {first.published} published, "
          f"{first.rejected} rejected {first.rejected_by_reason}")
    for row in spark.read.parquet(str(work / "rejects")).orderBy("row_no").collect():
        print(f"  rejected {row['order_id']}: {row['reject_reason']}: {row['reject_error']}")
    second = publish(spark, work / "orders.csv", spec, **run)
    spark.stop()
    print(f"run again: {second.status}, {second.published} published")

    transport = open_transport(url)
    for delivery in transport.reserve("orders", max_messages=10):
        envelope = decode(delivery.body)
        print(f"  {envelope.id} {json.dumps(envelope.data)}")
    transport.close()
    assert (first.published, first.rejected, second.published) == (2, 4, 0)


if __name__ == "__main__":
    main()
