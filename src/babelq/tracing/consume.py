"""The consume side: the handler runs inside a CONSUMER span that continues the producer's trace.

>>> from babelq.runtime import App
>>> from babelq.tracing import TraceConsumeMiddleware
>>> app = App("memory://", middleware=[TraceConsumeMiddleware()])

The parent of span ``process <queue>`` (kind CONSUMER) is, in this order:

1. the producer span named by the delivery's ``traceparent`` (``Delivery.carried_headers``,
   whatever broker slot carried it): a true child, same trace id, parent span id = the
   producer's span;
2. without a usable ``traceparent``, a remote parent in the trace the envelope's ``trace_id``
   maps to (:mod:`babelq.tracing.ids`), so header-less hops of one ``trace_id`` still share a
   trace (``fallback_to_trace_id=False`` starts a new trace instead);

The span carries the envelope's ``trace_id``, ``meta.id``, URN, attempts and the outcome; a
failed attempt, a dead letter or an exception marks it as an error. It is current while the
handler runs, so a message published from the handler (``App.publish``) gets a PRODUCER span
under it and a ``traceparent`` pointing at it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from babelq.runtime.message import Message
from babelq.runtime.middleware import Next
from babelq.runtime.outcome import Action, Outcome
from babelq.tracing import names
from babelq.tracing.otel import TraceIdParent, require, tracer_for, w3c_propagator

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Tracer, TracerProvider

_ERRORS = (Action.FAIL, Action.DEAD_LETTER)


class TraceConsumeMiddleware:
    """``(message, call_next)``: extract ``traceparent``, run the chain in a CONSUMER span (add it first)."""

    def __init__(
        self,
        tracer: Tracer | None = None,
        *,
        tracer_provider: TracerProvider | None = None,
        propagator: TextMapPropagator | None = None,
        system: str = "babelq",
        fallback_to_trace_id: bool = True,
    ) -> None:
        trace = require("opentelemetry.trace")
        self.tracer = tracer_for(tracer, tracer_provider)
        self.propagator = w3c_propagator(propagator)
        self.system = system
        self.fallback_to_trace_id = fallback_to_trace_id
        self._trace = trace
        self._current = trace.get_current_span
        self._consumer = trace.SpanKind.CONSUMER
        self._trace_id_parent = TraceIdParent()

    def parent(self, message: Message) -> tuple[Context | None, str]:
        """The context to start the span in and where it came from (``traceparent``,
        ``trace_id`` or ``none``)."""
        carried = message.delivery.carried_headers
        if carried and carried.get(names.TRACEPARENT):
            extracted = self.propagator.extract(carried)
            if self._current(extracted).get_span_context().is_valid:
                return extracted, "traceparent"
        trace_id = message.trace_id
        if self.fallback_to_trace_id and trace_id:
            return self._trace_id_parent(trace_id), "trace_id"
        return None, "none"

    def __call__(self, message: Message, call_next: Next) -> Outcome:
        context, source = self.parent(message)
        delivery = message.delivery
        queue = delivery.queue
        envelope = message.envelope
        trace_id = envelope.trace_id
        attributes: dict[str, Any] = {
            names.SYSTEM: self.system,
            names.OPERATION_TYPE: "process",
            names.OPERATION_NAME: "process",
            names.DESTINATION: queue,
            names.MESSAGE_ID: envelope.id,
            names.CONVERSATION_ID: trace_id,
            names.BODY_SIZE: len(delivery.body),
            names.TRACE_ID: trace_id,
            names.URN: envelope.urn,
            names.ATTEMPTS: message.attempts,
            names.TRACE_SOURCE: source,
        }
        if delivery.delivery_count is not None:
            attributes[names.DELIVERY_COUNT] = delivery.delivery_count
        with self.tracer.start_as_current_span(
            f"process {queue}", context=context, kind=self._consumer, attributes=attributes
        ) as span:
            outcome = call_next(message)
            span.set_attribute(names.OUTCOME, outcome.label)
            if outcome.action in _ERRORS:
                error = outcome.error
                if isinstance(error, BaseException):
                    span.record_exception(error)
                detail = str(error) if error is not None else (outcome.reason or outcome.label)
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, detail))
            return outcome
