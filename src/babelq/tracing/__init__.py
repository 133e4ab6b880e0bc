"""Trace context across brokers: OpenTelemetry spans and W3C ``traceparent`` (optional).

Two runtime middlewares, one per side, so a message's journey is one distributed trace:

* :class:`~babelq.tracing.publish.TracePublishMiddleware` (``App.use_publish``) starts a
  PRODUCER span per publication and writes the W3C ``traceparent`` (and ``tracestate``) into
  the publication's native headers, which each transport carries in its broker's own slot
  (AMQP headers, SQS message attributes, the Redis header frame, Kafka record headers...);
* :class:`~babelq.tracing.consume.TraceConsumeMiddleware` (``App.use``) reads them back from
  ``Delivery.carried_headers`` and runs the rest of the chain inside a CONSUMER span that
  continues the producer's trace as its child.

The envelope is never touched: its ``trace_id`` stays what docs/standard.md §2 says (minted by the
first producer, copied unchanged across hops) and both spans carry it as an attribute. A
message that arrives without a ``traceparent`` (a producer without tracing, an SDK or broker
that drops headers) still joins a trace: the envelope's ``trace_id`` maps to the OTel trace id
(:func:`~babelq.tracing.ids.otel_trace_id`), as the ``babelqueue`` package's consumers map it.

Where they go (the agreed feature order): consume ``tracing span -> GDPR unprotect -> schema
check -> handler`` (add the consume middleware first), publish ``schema check -> GDPR protect
-> trace headers -> transport`` (add the publish middleware last).

OpenTelemetry (``pip install babelq[otel]``, the ``opentelemetry-api`` package) is imported
when a middleware is built, never when this package is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from babelq.tracing.ids import otel_trace_id, trace_id_uuid
from babelq.tracing.names import TRACEPARENT, TRACESTATE

if TYPE_CHECKING:
    from babelq.tracing.consume import TraceConsumeMiddleware
    from babelq.tracing.publish import TracePublishMiddleware

__all__ = [
    "TRACEPARENT",
    "TRACESTATE",
    "TraceConsumeMiddleware",
    "TracePublishMiddleware",
    "otel_trace_id",
    "trace_id_uuid",
]


def __getattr__(name: str) -> Any:
    # The middleware modules are cheap to import (they load OpenTelemetry only when built), but
    # keeping them out of the package import keeps ``import babelq.tracing`` free of the runtime.
    if name == "TraceConsumeMiddleware":
        from babelq.tracing.consume import TraceConsumeMiddleware

        return TraceConsumeMiddleware
    if name == "TracePublishMiddleware":
        from babelq.tracing.publish import TracePublishMiddleware

        return TracePublishMiddleware
    raise AttributeError(f"module 'babelq.tracing' has no attribute {name!r}")
