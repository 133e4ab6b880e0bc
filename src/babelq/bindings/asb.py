"""Azure Service Bus binding.

Produce: Service Bus has native slots for the URN (Subject), trace (CorrelationId) and
message id (MessageId, which also enables its duplicate detection); three ``bq-*``
ApplicationProperties carry the rest as native AMQP-typed values (numbers stay numbers).
A SessionId is opt-in (``session_by="sharding_key"``: ``meta.sharding_key``), as the standard
makes it: no contract field, and no other SDK sets one. Consume: DeliveryCount is 1-based, so
attempts = max(body, DeliveryCount - 1), never lowered.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from babelq.bindings._fields import Doc, document, integer, meta_of, non_negative, put, text, urn

CONTENT_TYPE: Final = "application/json"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: where a message's SessionId comes from: nowhere (the standard's default) or its sharding key
SessionBy = Literal["none", "sharding_key"]


def project(doc: Doc, *, session_by: SessionBy = "none") -> dict[str, Any]:
    """Message fields for sending ``doc`` (snake_case, as ``ServiceBusMessage`` keywords); with
    ``session_by="sharding_key"``, ``session_id`` is ``meta.sharding_key`` when the body has one."""
    body = document(doc)
    meta = meta_of(body)
    message: dict[str, Any] = {}
    put(message, "subject", urn(body))
    put(message, "correlation_id", text(body, "trace_id"))
    put(message, "message_id", text(meta, "id"))
    message["content_type"] = CONTENT_TYPE
    props: dict[str, Any] = {}
    put(props, "bq-schema-version", integer(meta, "schema_version"))
    put(props, "bq-source-lang", text(meta, "lang"))
    put(props, "bq-created-at", integer(meta, "created_at"))
    message["application_properties"] = props
    if session_by == "sharding_key":
        put(message, "session_id", text(meta, "sharding_key"))
    return message


def reconcile_attempts(body_attempts: int, delivery_count: object) -> int:
    """max(body attempts, DeliveryCount - 1); a missing count leaves the body's count."""
    count = non_negative(delivery_count)
    if count is None:
        return body_attempts
    return max(body_attempts, count - 1)


def scheduled_enqueue_time(deliver_at_ms: int) -> datetime:
    """The timezone-aware UTC ``ScheduledEnqueueTime`` for an epoch-ms delivery time."""
    return _EPOCH + timedelta(milliseconds=deliver_at_ms)
