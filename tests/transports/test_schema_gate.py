"""The schema-version gate on a broker's native property: judged before the body is decoded.

A foreign producer that stamps ``bq-schema-version: 2`` on a body a version-1 consumer could
still parse must not be handled: the message is poison (cause ``unsupported``), dead-lettered
with its bytes. An absent or blank property leaves the judgement to the body."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from babelq.envelope import decode, make, original_bytes
from babelq.runtime import App, Message
from babelq.transports import Delivery
from conftest import SQS_REGION

URN = "urn:babel:orders:created"


def test_a_refused_delivery_is_poison_and_never_decoded() -> None:
    app = App("memory://", queue="orders")
    ran: list[str] = []
    app.register(URN, lambda message: ran.append(message.id))
    body = make(URN, {"order_id": 1}, queue="orders").encode()
    gated = Delivery(body=body, queue="orders", refusal="native bq-schema-version '2'")
    refused = app._pipeline.process(gated)
    assert refused.message is None and ran == []
    assert refused.outcome.cause == "unsupported" and "bq-schema-version" in str(refused.outcome.error)
    passed = app._pipeline.process(Delivery(body=body, queue="orders"))
    assert passed.message is not None and len(ran) == 1
    app.close()


def test_the_kafka_transport_reads_the_last_header_and_its_bytes() -> None:
    from babelq.transports.kafka import _gate

    assert _gate([]) is None
    assert _gate([("bq-schema-version", b"1")]) is None
    assert _gate([("bq-schema-version", b" \t")]) is None
    assert _gate([("bq-schema-version", None)]) is None
    assert _gate([("bq-schema-version", b"2")]) is not None
    assert _gate([("bq-schema-version", b"1"), ("bq-schema-version", b"2")]) is not None
    assert _gate([("bq-schema-version", b"\xff")]) is not None


# -- SQS, end to end on the (moto) broker --------------------------------------------------------

boto3 = pytest.importorskip("boto3")


@pytest.fixture
def sqs_queue(sqs_url: str, sqs_endpoint: str, unique_queue: str) -> Iterator[tuple[str, Any, str]]:
    from babelq.transports.sqs import SQSTransport

    transport = SQSTransport.from_url(sqs_url)
    client = boto3.client("sqs", endpoint_url=sqs_endpoint, region_name=SQS_REGION,
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    yield sqs_url, client, transport.queue_url(unique_queue)
    transport.delete_queues([unique_queue, f"{unique_queue}.dlq"])
    transport.close()


@pytest.mark.live
def test_sqs_messages_stamped_with_another_version_go_to_the_dlq_unread(
    sqs_queue: tuple[str, Any, str], unique_queue: str
) -> None:
    url, client, queue_url = sqs_queue
    sent: dict[str, bytes] = {}
    for label, value in (("two", "2"), ("padded", " 1"), ("one", "1"), ("blank", " \t"), ("absent", None)):
        body = make(URN, {"label": label}, queue=unique_queue).encode()
        sent[label] = body
        stamp = {"DataType": "String", "StringValue": value}
        attributes = {} if value is None else {"bq-schema-version": stamp}
        client.send_message(QueueUrl=queue_url, MessageBody=body.decode(), MessageAttributes=attributes)
    app = App(url, queue=unique_queue)
    handled: list[str] = []

    @app.handler(URN)
    def created(message: Message) -> None:
        handled.append(message.data["label"])

    app.run_until_empty()
    dead = app.transport.reserve(f"{unique_queue}.dlq", max_messages=10, timeout=2.0)
    app.transport.ack_many(dead)
    stats = app.stats()
    app.close()
    assert sorted(handled) == ["absent", "blank", "one"]
    records = [json.loads(d.body) for d in dead]
    assert sorted(original_bytes(d.body) for d in dead) == sorted([sent["two"], sent["padded"]])
    assert all(r["dead_letter"]["cause"] == "unsupported" for r in records)
    assert stats["dead_lettered.poison"] == 2
    assert decode(sent["two"]).accepts()  # the body alone would have passed


# -- the Spark read path: the source's rows carry the refusal, settle's rules act on it -----------


def test_the_sources_rows_carry_the_refusal_both_ways_they_are_built() -> None:
    pytest.importorskip("pyarrow")
    from babelq.spark.datasource.rows import deliveries_to_arrow, to_arrow, to_rows

    body = make(URN, {"order_id": 1}, queue="orders").encode()
    deliveries = [Delivery(body=body, queue="orders"), Delivery(body=body, queue="orders", refusal="no")]
    by_driver = to_arrow(to_rows(deliveries), 1, 0, "driver")
    by_executor = deliveries_to_arrow(deliveries, 1, 0, "executor")
    for batch in (by_driver, by_executor):
        assert batch.column(batch.schema.names.index("refusal")).to_pylist() == [None, "no"]


@pytest.mark.spark
def test_settle_judges_a_refused_row_by_the_property_alone(spark: Any) -> None:
    from babelq.envelope import now_ms
    from babelq.pipelines.consume.classify import classified, decoded
    from babelq.runtime.rules import UNSUPPORTED, RetryPolicy

    good = make(URN, {"order_id": 1}, queue="orders").encode()
    df = spark.createDataFrame([(good, None), (good, "native bq-schema-version '2' ...")],
                               "body binary, refusal string")
    rows = classified(decoded(df), now_ms=now_ms(), urns=[URN], policy=RetryPolicy(3)).collect()
    assert [r["rule"] for r in rows] == [None, UNSUPPORTED]
    assert rows[1]["reject_reason"].startswith("native bq-schema-version")
