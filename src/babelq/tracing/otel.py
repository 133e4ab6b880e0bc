"""The one place that imports OpenTelemetry, on first use, with a one-line error without it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from babelq.extras import optional_import
from babelq.tracing import ids

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Tracer, TracerProvider

#: instrumentation scope of babelq's spans
SCOPE = "babelq.tracing"


def require(module: str) -> Any:
    """Import ``module`` of opentelemetry-api, or a ConfigurationError saying how to get it."""
    return optional_import(module, needed_for="tracing: the OpenTelemetry API", extra="otel")


def tracer_for(tracer: Tracer | None, provider: TracerProvider | None) -> Tracer:
    """``tracer``, else one of ``provider`` (else the global provider) for babelq's scope."""
    if tracer is not None:
        return tracer
    trace = require("opentelemetry.trace")
    from babelq import __version__

    got: Tracer = trace.get_tracer(SCOPE, __version__, tracer_provider=provider)
    return got


class TraceIdParent:
    """Makes the context whose (remote, non-recording, sampled) span stands for the producer of a
    message with envelope ``trace_id``: a span started in it belongs to the trace ``trace_id``
    maps to (:func:`babelq.tracing.ids.otel_trace_id`). Sampled, so a parent-based sampler keeps
    it, as the babelqueue package's consumers do. Built once per middleware: this runs per
    message."""

    __slots__ = ("_flags", "_in_context", "_span", "_span_context")

    def __init__(self) -> None:
        trace = require("opentelemetry.trace")
        self._span_context = trace.SpanContext
        self._span = trace.NonRecordingSpan
        self._in_context = trace.set_span_in_context
        self._flags = trace.TraceFlags(trace.TraceFlags.SAMPLED)

    def __call__(self, trace_id: str) -> Context:
        remote = self._span_context(
            trace_id=ids.otel_trace_id(trace_id),
            span_id=ids.parent_span_id(trace_id),
            is_remote=True,
            trace_flags=self._flags,
        )
        context: Context = self._in_context(self._span(remote))
        return context


def w3c_propagator(propagator: TextMapPropagator | None) -> TextMapPropagator:
    """``propagator``, else W3C Trace Context (``traceparent``/``tracestate``): the format every
    SDK of the standard reads, whatever the process's global propagator is set to."""
    if propagator is not None:
        return propagator
    module = require("opentelemetry.trace.propagation.tracecontext")
    made: TextMapPropagator = module.TraceContextTextMapPropagator()
    return made
