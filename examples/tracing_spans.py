"""One trace across two hops: publish, consume, publish from the handler, consume again.

Run from the repository root (needs the ``otel`` extra and opentelemetry-sdk):

    .venv/bin/python examples/tracing_spans.py            # in-process (memory://)
    .venv/bin/python examples/tracing_spans.py redis://127.0.0.1:6379/0

Prints each span with its trace id, its parent and the envelope trace_id it carries, then the
``traceparent`` a consumer received next to the body.
"""

from __future__ import annotations

import sys
import uuid

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from babelq.runtime import App
from babelq.runtime.message import Message
from babelq.tracing import TRACEPARENT, TraceConsumeMiddleware, TracePublishMiddleware
from babelq.tracing.names import system_of

url = sys.argv[1] if len(sys.argv) > 1 else "memory://tracing-example"
suffix = uuid.uuid4().hex[:6]
orders, shipping = f"orders-{suffix}", f"shipping-{suffix}"

exporter = InMemorySpanExporter()  # a real service would use an OTLP exporter here
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
tracer = provider.get_tracer("example")
system = system_of(url.split(":", 1)[0])

app = App(
    url,
    queue=orders,
    middleware=[TraceConsumeMiddleware(tracer, system=system)],  # first: the span wraps the rest
    publish_middleware=[TracePublishMiddleware(tracer, system=system)],  # last: just before the broker
)
received: list[str] = []


@app.handler("urn:babel:orders:created")
def ship(message: Message) -> None:
    received.append(message.delivery.carried_headers.get(TRACEPARENT, "-"))
    app.publish("urn:babel:shipping:requested", {"order_id": message.data["order_id"]}, queue=shipping)


@app.handler("urn:babel:shipping:requested")
def done(message: Message) -> None:
    received.append(message.delivery.carried_headers.get(TRACEPARENT, "-"))


app.publish("urn:babel:orders:created", {"order_id": 1042})
app.drain()
app.drain(queue=shipping)
app.close()

spans = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)
for span in spans:
    parent = f"{span.parent.span_id:016x}" if span.parent else "-"
    attrs = span.attributes or {}
    print(
        f"{span.name:<26} {span.kind.name:<8} trace={span.context.trace_id:032x} "
        f"span={span.context.span_id:016x} parent={parent} trace_id={attrs['babelq.trace_id']}"
    )
print("traceparents received:", *received, sep="\n  ")
assert len({s.context.trace_id for s in spans}) == 1, "one trace"
