"""The tracing middlewares on the in-process transport: spans, headers, parents, outcomes."""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from babelq.envelope import decode
from babelq.errors import ConfigurationError
from babelq.runtime import App
from babelq.runtime.backoff import Backoff
from babelq.runtime.message import Message
from babelq.tracing import TRACEPARENT, TraceConsumeMiddleware, TracePublishMiddleware
from babelq.tracing.otel import require
from babelq.transports.memory import MemoryTransport

from .conftest import Spans, traceparent_of

URN = "urn:babel:orders:created"


def make_app(spans: Spans, transport: MemoryTransport, **options: Any) -> App:
    return App(
        transport,
        queue="orders",
        middleware=[TraceConsumeMiddleware(spans.tracer, system="memory", **options)],
        publish_middleware=[TracePublishMiddleware(spans.tracer, system="memory")],
        backoff=Backoff(base_ms=0, cap_ms=0, jitter=False),
        max_attempts=2,
    )


def test_publish_starts_a_producer_span_and_sends_its_traceparent(spans: Spans) -> None:
    transport = MemoryTransport()
    app = make_app(spans, transport)
    trace_id = str(uuid.uuid4())
    message_id = app.publish(URN, {"order_id": 1}, trace_id=trace_id)

    producer = spans.one(SpanKind.PRODUCER)
    assert producer.name == "publish orders"
    assert producer.attributes is not None
    assert producer.attributes["messaging.system"] == "memory"
    assert producer.attributes["messaging.operation.type"] == "send"
    assert producer.attributes["messaging.destination.name"] == "orders"
    assert producer.attributes["messaging.message.id"] == message_id
    assert producer.attributes["messaging.message.conversation_id"] == trace_id
    assert producer.attributes["babelq.trace_id"] == trace_id
    assert producer.attributes["babelq.urn"] == URN

    [delivery] = transport.reserve("orders")
    assert dict(delivery.carried_headers) == {TRACEPARENT: traceparent_of(producer)}
    envelope = decode(delivery.body)  # the envelope itself is untouched
    assert envelope.trace_id == trace_id
    assert envelope.id == message_id
    assert TRACEPARENT not in delivery.body.decode()


def test_the_consumer_span_is_a_child_of_the_producer_span(spans: Spans) -> None:
    transport = MemoryTransport()
    app = make_app(spans, transport)
    seen: list[str] = []

    @app.handler(URN)
    def handle(message: Message) -> None:
        from opentelemetry import trace

        seen.append(f"{trace.get_current_span().get_span_context().span_id:016x}")

    trace_id = str(uuid.uuid4())
    message_id = app.publish(URN, {"order_id": 1}, trace_id=trace_id)
    assert app.drain() == 1

    producer = spans.one(SpanKind.PRODUCER)
    consumer = spans.one(SpanKind.CONSUMER)
    assert consumer.name == "process orders"
    assert consumer.context.trace_id == producer.context.trace_id
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
    assert consumer.parent.is_remote
    assert seen == [f"{consumer.context.span_id:016x}"]  # the handler ran inside it
    attrs = consumer.attributes or {}
    assert attrs["messaging.operation.type"] == "process"
    assert attrs["messaging.message.id"] == message_id
    assert attrs["babelq.trace_id"] == trace_id
    assert attrs["babelq.trace_source"] == "traceparent"
    assert attrs["babelq.outcome"] == "handled"
    assert attrs["babelq.attempts"] == 0
    assert consumer.status.status_code == StatusCode.UNSET


def test_a_message_published_by_a_handler_continues_the_trace(spans: Spans) -> None:
    transport = MemoryTransport()
    app = make_app(spans, transport)

    @app.handler(URN)
    def first(message: Message) -> None:
        app.publish("urn:babel:orders:shipped", {"order_id": 1}, queue="shipping")

    app.register("urn:babel:orders:shipped", lambda message: None)
    app.publish(URN, {"order_id": 1})
    app.drain()
    app.drain(queue="shipping")

    by_name = {s.name: s for s in spans.finished()}
    upstream, inner = by_name["process orders"], by_name["publish shipping"]
    downstream = by_name["process shipping"]
    assert inner.parent is not None and inner.parent.span_id == upstream.context.span_id
    assert downstream.parent is not None and downstream.parent.span_id == inner.context.span_id
    assert len({s.context.trace_id for s in spans.finished()}) == 1
    # and the envelope trace_id was copied unchanged across the hop (docs/standard.md §2)
    assert (upstream.attributes or {})["babelq.trace_id"] == (downstream.attributes or {})["babelq.trace_id"]


def test_a_failed_attempt_marks_the_span_as_an_error_and_is_retried(spans: Spans) -> None:
    transport = MemoryTransport()
    app = make_app(spans, transport)
    calls: list[int] = []

    @app.handler(URN)
    def boom(message: Message) -> None:
        calls.append(message.attempts)
        raise RuntimeError("card declined")

    app.publish(URN, {"order_id": 1})
    app.drain(wait_delayed=True, timeout=20)
    consumers = spans.of_kind(SpanKind.CONSUMER)
    assert calls == [0, 1]  # max_attempts=2: the retry went out too
    assert [s.status.status_code for s in consumers] == [StatusCode.ERROR, StatusCode.ERROR]
    assert "card declined" in (consumers[0].status.description or "")
    assert any(e.name == "exception" for e in consumers[0].events)
    # the retry keeps the traceparent: both attempts are children of the one producer span
    producer = spans.one(SpanKind.PRODUCER)
    assert {s.parent.span_id for s in consumers if s.parent} == {producer.context.span_id}
    assert [(s.attributes or {})["babelq.attempts"] for s in consumers] == [0, 1]
    [dead] = transport.reserve("orders.dlq")
    assert dict(dead.carried_headers) == {TRACEPARENT: traceparent_of(producer)}


def test_without_a_traceparent_the_trace_id_names_the_trace(spans: Spans) -> None:
    """A header-less message (a producer without tracing) joins the trace its envelope
    trace_id maps to, as the babelqueue package's consumers do."""
    transport = MemoryTransport()
    plain = App(transport, queue="orders")
    app = make_app(spans, transport)
    app.register(URN, lambda message: None)
    trace_id = str(uuid.uuid4())
    plain.publish(URN, {"order_id": 1}, trace_id=trace_id)
    app.drain()
    consumer = spans.one(SpanKind.CONSUMER)
    assert consumer.context.trace_id == uuid.UUID(trace_id).int
    assert (consumer.attributes or {})["babelq.trace_source"] == "trace_id"


@pytest.mark.parametrize("bad", ["", "garbage", "00-00000000000000000000000000000000-b7ad6b7169203331-01"])
def test_an_unusable_traceparent_falls_back_to_the_trace_id(spans: Spans, bad: str) -> None:
    transport = MemoryTransport()
    app = make_app(spans, transport)
    app.register(URN, lambda message: None)
    trace_id = str(uuid.uuid4())
    from babelq.envelope import make

    envelope = make(URN, {"order_id": 1}, queue="orders", trace_id=trace_id)
    transport.publish("orders", envelope.encode(), headers={TRACEPARENT: bad})
    app.drain()
    consumer = spans.one(SpanKind.CONSUMER)
    assert consumer.context.trace_id == uuid.UUID(trace_id).int


def test_the_fallback_can_be_turned_off(spans: Spans) -> None:
    transport = MemoryTransport()
    App(transport, queue="orders").publish(URN, {}, trace_id="4bf92f35-77b3-4da6-a3ce-929d0e0e4736")
    app = make_app(spans, transport, fallback_to_trace_id=False)
    app.register(URN, lambda message: None)
    app.drain()
    consumer = spans.one(SpanKind.CONSUMER)
    assert consumer.parent is None
    assert consumer.context.trace_id != uuid.UUID("4bf92f35-77b3-4da6-a3ce-929d0e0e4736").int
    assert (consumer.attributes or {})["babelq.trace_source"] == "none"


def test_a_refused_publish_is_recorded_on_the_producer_span(spans: Spans) -> None:
    def refuse(publication: Any, call_next: Any) -> None:
        raise ValueError("schema: data.order_id is required")

    refusing_first = [refuse, TracePublishMiddleware(spans.tracer)]
    app = App(MemoryTransport(), queue="orders", publish_middleware=refusing_first)
    with pytest.raises(ValueError):
        app.publish(URN, {})
    assert spans.of_kind(SpanKind.PRODUCER) == []  # refused before the span: nothing was sent

    tracing_first = [TracePublishMiddleware(spans.tracer), refuse]
    inner = App(MemoryTransport(), queue="orders", publish_middleware=tracing_first)
    with pytest.raises(ValueError):
        inner.publish(URN, {})
    producer = spans.one(SpanKind.PRODUCER)
    assert producer.status.status_code == StatusCode.ERROR


def test_importing_the_package_does_not_import_opentelemetry() -> None:
    code = (
        "import sys, babelq.tracing, babelq.tracing.publish, babelq.tracing.consume;"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_without_opentelemetry_the_error_says_how_to_get_it() -> None:
    expected = r"tracing: the OpenTelemetry API needs the optional dependency .*babelq\[otel\]"
    with pytest.raises(ConfigurationError, match=expected):
        require("opentelemetry_not_installed_here")


def test_root_from_trace_id_makes_the_envelope_trace_id_the_otel_trace(spans: Spans) -> None:
    transport = MemoryTransport()
    publisher = App(
        transport, queue="orders",
        publish_middleware=[TracePublishMiddleware(spans.tracer, root_from_trace_id=True)],
    )
    trace_id = str(uuid.uuid4())
    publisher.publish(URN, {}, trace_id=trace_id)
    producer = spans.one(SpanKind.PRODUCER)
    assert producer.context.trace_id == uuid.UUID(trace_id).int
    # a consumer that lost the header falls back into the very same trace
    [delivery] = transport.reserve("orders")
    transport.release(delivery)
    from babelq.envelope import decode as decode_body

    stripped = MemoryTransport()
    stripped.publish("orders", delivery.body)
    app = make_app(spans, stripped)
    app.register(URN, lambda message: None)
    app.drain()
    consumer = spans.one(SpanKind.CONSUMER)
    assert consumer.context.trace_id == producer.context.trace_id
    assert decode_body(delivery.body).trace_id == trace_id
    # inside an active span it continues that span instead
    with spans.tracer.start_as_current_span("request"):
        publisher.publish(URN, {}, trace_id=str(uuid.uuid4()))
    request = next(s for s in spans.finished() if s.name == "request")
    second = spans.of_kind(SpanKind.PRODUCER)[-1]
    assert second.parent is not None and second.parent.span_id == request.context.span_id
