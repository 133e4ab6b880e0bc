"""Header and attribute names: the W3C Trace Context headers and the OpenTelemetry messaging
semantic conventions (names only, so nothing here needs OpenTelemetry installed)."""

from __future__ import annotations

#: W3C Trace Context header naming the parent span (``00-<trace id>-<span id>-<flags>``)
TRACEPARENT = "traceparent"
#: W3C Trace Context vendor state, carried beside ``traceparent`` when present
TRACESTATE = "tracestate"

# OpenTelemetry semantic conventions for messaging spans
SYSTEM = "messaging.system"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
DESTINATION = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
CONVERSATION_ID = "messaging.message.conversation_id"
BODY_SIZE = "messaging.message.body.size"
DELIVERY_COUNT = "messaging.message.delivery_count"

# babelq's own attributes (namespaced as the conventions ask for product-specific ones)
TRACE_ID = "babelq.trace_id"
URN = "babelq.urn"
ATTEMPTS = "babelq.attempts"
OUTCOME = "babelq.outcome"
TRACE_SOURCE = "babelq.trace_source"

#: ``messaging.system`` per transport scheme: the conventions' well-known values where one
#: exists, the scheme itself otherwise
SYSTEMS: dict[str, str] = {
    "amqp": "rabbitmq",
    "amqps": "rabbitmq",
    "sqs": "aws_sqs",
    "kafka": "kafka",
    "pulsar": "pulsar",
    "servicebus": "servicebus",
    "sb": "servicebus",
    "artemis": "activemq",
}


def system_of(scheme: str) -> str:
    """The ``messaging.system`` value for a transport ``scheme`` (``redis`` -> ``redis``)."""
    return SYSTEMS.get(scheme, scheme or "babelq")
