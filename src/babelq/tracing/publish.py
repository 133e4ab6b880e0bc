"""The publish side: a PRODUCER span per publication, its context sent as ``traceparent``.

>>> from babelq.runtime import App
>>> from babelq.tracing import TracePublishMiddleware
>>> app = App("memory://", publish_middleware=[TracePublishMiddleware()])

Each publication passing the chain gets a span ``publish <queue>`` (kind PRODUCER), a child
of whatever span is current (an HTTP request, the consumer span of the message being handled,
or none: a new trace). Its context is written into ``Publication.headers`` as W3C
``traceparent``/``tracestate``, which the transport carries natively; the envelope, and so its
``trace_id``, is passed on unchanged. The span ends when the transport has the message (the
rest of the chain ran), so its duration is the publish; a refusal is recorded on it and raised.

With ``root_from_trace_id=True`` a publication made outside any span (the first hop) starts in
the trace its envelope ``trace_id`` maps to, under a stand-in remote parent, instead of a new
random trace: then the OTel trace id *is* the envelope's ``trace_id`` (hex of the UUID), and a
consumer that never got the ``traceparent`` (a broker or SDK that drops headers) still falls
back into the same trace. The price: the first span has a parent no backend ever receives, and
the stand-in is sampled, so a ratio sampler at the root no longer decides (off by default).

App hands a publication that carries headers to the transport on its own (one ``publish``
call), so with this middleware a ``publish_many`` batch goes out as single publishes: the price
of a ``traceparent`` per message (``bench/bench_tracing.py`` measures it).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from babelq.runtime.middleware import Publication, PublishNext
from babelq.tracing import names
from babelq.tracing.otel import TraceIdParent, require, tracer_for, w3c_propagator

if TYPE_CHECKING:
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Tracer, TracerProvider


class TracePublishMiddleware:
    """``(publication, call_next)``: span, inject ``traceparent``, pass on (add it last)."""

    def __init__(
        self,
        tracer: Tracer | None = None,
        *,
        tracer_provider: TracerProvider | None = None,
        propagator: TextMapPropagator | None = None,
        system: str = "babelq",
        root_from_trace_id: bool = False,
    ) -> None:
        """``tracer`` (else one from ``tracer_provider`` or the global provider); ``propagator``
        writes the headers (default: W3C Trace Context); ``system`` is ``messaging.system``
        (:func:`babelq.tracing.names.system_of` gives the conventional value for a scheme)."""
        trace = require("opentelemetry.trace")
        self.tracer = tracer_for(tracer, tracer_provider)
        self.propagator = w3c_propagator(propagator)
        self.system = system
        self.root_from_trace_id = root_from_trace_id
        self._trace_id_parent = TraceIdParent()
        self._current = trace.get_current_span
        self._producer = trace.SpanKind.PRODUCER
        self._in_context = trace.set_span_in_context

    def __call__(self, publication: Publication, call_next: PublishNext) -> None:
        envelope = publication.envelope
        queue = publication.queue
        trace_id = envelope.trace_id
        attributes = {
            names.SYSTEM: self.system,
            names.OPERATION_TYPE: "send",
            names.OPERATION_NAME: "publish",
            names.DESTINATION: queue,
            names.MESSAGE_ID: envelope.id,
            names.CONVERSATION_ID: trace_id,
            names.TRACE_ID: trace_id,
            names.URN: envelope.urn,
        }
        context = None
        if self.root_from_trace_id and not self._current().get_span_context().is_valid:
            context = self._trace_id_parent(trace_id)
        with self.tracer.start_as_current_span(
            f"publish {queue}", context=context, kind=self._producer, attributes=attributes
        ) as span:
            carrier = dict(publication.headers)
            self.propagator.inject(carrier, context=self._in_context(span))
            if carrier == publication.headers:  # nothing written (a non-recording tracer)
                call_next(publication)
            else:
                call_next(dataclasses.replace(publication, headers=carrier))
