"""Trace context between babelq and the ``babelqueue`` package over real brokers, both ways.

For each broker (live Redis with the package's header frame, live RabbitMQ with AMQP headers,
SQS on a moto server with message attributes):

* the package publishes (``otel.publish``, and a bare ``publish_with_headers`` with a given
  ``traceparent``) and babelq's consumer span continues it: same trace id, parent span id =
  the package's producer span;
* babelq publishes through :class:`TracePublishMiddleware` and the package's consumer sees the
  same ``traceparent`` in ``headers_from_context()`` and its ``otel.wrap_handler`` span is a
  child of babelq's producer span.

Spans go to opentelemetry-sdk's InMemorySpanExporter (one provider per test, shared by both
SDKs, so a parent/child link between them is visible in one list).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.trace import SpanKind

from babelq.envelope import decode
from babelq.runtime import App
from babelq.runtime.message import Message
from babelq.tracing import TRACEPARENT, TraceConsumeMiddleware, TracePublishMiddleware
from conftest import SQS_REGION, require_service

from .conftest import Spans, traceparent_of

pytest.importorskip("babelqueue")
from babelqueue import BabelQueue, otel
from babelqueue.headers import headers_from_context

pytestmark = pytest.mark.live

URN = "urn:babel:orders:created"
GIVEN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


@dataclass
class Broker:
    """One broker as both SDKs open it."""

    name: str
    ours: str  # babelq transport URL
    theirs: Callable[[], Any]  # a new babelqueue transport
    cleanup: Callable[[str], None]


def _redis(request: pytest.FixtureRequest) -> Broker:
    host, port = require_service("redis")
    import redis
    from babelqueue.redis_transport import RedisTransport

    url = f"redis://{host}:{port}/15"
    client = redis.Redis(host=host, port=port, db=15)
    request.addfinalizer(client.close)

    def cleanup(queue: str) -> None:
        for key in client.scan_iter(match=f"{queue}*"):
            client.delete(key)

    return Broker("redis", url, lambda: RedisTransport(url), cleanup)


def _rabbitmq(request: pytest.FixtureRequest) -> Broker:
    require_service("rabbitmq")
    pytest.importorskip("pika")
    from babelqueue.pika_transport import PikaTransport

    from babelq.transports.amqp import AMQPTransport

    def cleanup(queue: str) -> None:
        cleaner = AMQPTransport(AMQP_URL)
        try:
            cleaner.delete_queues(queue)  # with its .dlq
        finally:
            cleaner.close()

    return Broker("rabbitmq", AMQP_URL, lambda: PikaTransport(AMQP_URL), cleanup)


def _sqs(request: pytest.FixtureRequest) -> Broker:
    endpoint: str = request.getfixturevalue("sqs_endpoint")
    url: str = request.getfixturevalue("sqs_url")
    import boto3
    from babelqueue.sqs_transport import SqsTransport

    def client() -> Any:
        return boto3.client(
            "sqs", endpoint_url=endpoint, region_name=SQS_REGION,
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )

    def cleanup(queue: str) -> None:
        sqs = client()
        for name in (queue, f"{queue}-dlq", f"{queue}.dlq"):
            with contextlib.suppress(Exception):  # never created
                sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=name)["QueueUrl"])

    return Broker("sqs", url, lambda: SqsTransport(client=client()), cleanup)


@pytest.fixture(params=["redis", "rabbitmq", "sqs"])
def broker(request: pytest.FixtureRequest, unique_queue: str) -> Iterator[Broker]:
    made = {"redis": _redis, "rabbitmq": _rabbitmq, "sqs": _sqs}[request.param](request)
    yield made
    made.cleanup(unique_queue)


def _ensure_queue(broker: Broker, queue: str) -> None:
    """SQS: the package looks queue URLs up, so babelq creates the queue first."""
    if broker.name == "sqs":
        from babelq.transports import open_transport

        transport = open_transport(broker.ours)
        try:
            transport.size(queue)
        finally:
            transport.close()


def _babelq_consumes(broker: Broker, spans: Spans, queue: str) -> list[Message]:
    seen: list[Message] = []
    app = App(broker.ours, queue=queue, middleware=[TraceConsumeMiddleware(spans.tracer, system=broker.name)])
    app.register(URN, seen.append)
    try:
        app.drain(timeout=20)
    finally:
        app.close()
    return seen


def test_the_package_otel_publish_is_continued_by_babelqs_consumer_span(
    broker: Broker, spans: Spans, unique_queue: str
) -> None:
    _ensure_queue(broker, unique_queue)
    theirs = broker.theirs()
    try:
        bq = BabelQueue(transport=theirs, queue=unique_queue)
        otel.publish(spans.tracer, bq, URN, {"order_id": 1042}, queue=unique_queue)
    finally:
        theirs.close()
    producer = spans.one(SpanKind.PRODUCER)  # the package's span

    [message] = _babelq_consumes(broker, spans, unique_queue)
    assert message.delivery.carried_headers[TRACEPARENT] == traceparent_of(producer)
    consumer = spans.one(SpanKind.CONSUMER)
    assert consumer.context.trace_id == producer.context.trace_id
    assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
    assert (consumer.attributes or {})["babelq.trace_source"] == "traceparent"
    assert (consumer.attributes or {})["babelq.trace_id"] == message.trace_id


def test_a_traceparent_from_publish_with_headers_is_continued(
    broker: Broker, spans: Spans, unique_queue: str
) -> None:
    _ensure_queue(broker, unique_queue)
    theirs = broker.theirs()
    try:
        bq = BabelQueue(transport=theirs, queue=unique_queue)
        bq.publish_with_headers(URN, {"order_id": 7}, {TRACEPARENT: GIVEN}, queue=unique_queue)
    finally:
        theirs.close()

    [message] = _babelq_consumes(broker, spans, unique_queue)
    consumer = spans.one(SpanKind.CONSUMER)
    assert f"{consumer.context.trace_id:032x}" == GIVEN.split("-")[1]
    assert consumer.parent is not None and f"{consumer.parent.span_id:016x}" == GIVEN.split("-")[2]
    assert message.delivery.carried_headers[TRACEPARENT] == GIVEN


def test_babelq_publishes_and_the_package_consumer_continues(
    broker: Broker, spans: Spans, unique_queue: str
) -> None:
    app = App(broker.ours, queue=unique_queue, publish_middleware=[TracePublishMiddleware(spans.tracer)])
    try:
        message_id = app.publish(URN, {"order_id": 99})
    finally:
        app.close()
    producer = spans.one(SpanKind.PRODUCER)  # babelq's span

    seen: list[tuple[dict[str, str], dict[str, Any]]] = []

    def handle(data: dict[str, Any], meta: dict[str, Any], envelope: dict[str, Any]) -> None:
        seen.append((dict(headers_from_context()), envelope))

    theirs = broker.theirs()
    bq = BabelQueue(transport=theirs, queue=unique_queue)
    bq.register(URN, otel.wrap_handler(spans.tracer, handle))
    try:
        bq.consume(max_messages=1, timeout=5, handle_signals=False)
    finally:
        theirs.close()

    [(headers, envelope)] = seen
    assert headers[TRACEPARENT] == traceparent_of(producer)
    assert envelope["meta"]["id"] == message_id
    consumer = spans.one(SpanKind.CONSUMER)  # the package's span
    assert consumer.context.trace_id == producer.context.trace_id
    assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id


def test_babelq_to_babelq_over_the_broker(broker: Broker, spans: Spans, unique_queue: str) -> None:
    app = App(broker.ours, queue=unique_queue, publish_middleware=[TracePublishMiddleware(spans.tracer)])
    try:
        app.publish(URN, {"order_id": 5})
    finally:
        app.close()
    [message] = _babelq_consumes(broker, spans, unique_queue)
    producer, consumer = spans.one(SpanKind.PRODUCER), spans.one(SpanKind.CONSUMER)
    assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
    assert decode(message.body).trace_id == (producer.attributes or {})["babelq.trace_id"]
