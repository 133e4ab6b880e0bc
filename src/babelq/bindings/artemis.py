"""ActiveMQ Artemis (AMQP 1.0) binding.

Produce: the URN rides the ``x-opt-jms-type`` annotation (JMSType), the trace the
correlation-id, the message id the message-id and ``meta.created_at`` the creation-time,
so JMS peers see them in their native slots. The rest are string application properties
with underscores (``bq_schema_version``), because JMS property names must be Java
identifiers. Consume: the AMQP delivery-count is 0-based, so attempts =
max(body, delivery-count), never lowered.
"""

from __future__ import annotations

from typing import Any, Final

from babelq.bindings._fields import Doc, attempts, document, integer, meta_of, non_negative, put, text, urn

JMS_TYPE_ANNOTATION: Final = "x-opt-jms-type"
APP_ID: Final = "babelqueue"


def project(doc: Doc) -> dict[str, Any]:
    """The AMQP 1.0 message sections for sending ``doc``.

    Keys: ``message_annotations``, ``correlation_id``, ``message_id``, ``creation_time``
    and ``application_properties`` (every value a string).
    """
    body = document(doc)
    meta = meta_of(body)
    out: dict[str, Any] = {}
    annotations: dict[str, Any] = {}
    put(annotations, JMS_TYPE_ANNOTATION, urn(body))
    out["message_annotations"] = annotations
    put(out, "correlation_id", text(body, "trace_id"))
    put(out, "message_id", text(meta, "id"))
    put(out, "creation_time", integer(meta, "created_at"))
    props: dict[str, str] = {}
    for name, value in (
        ("bq_schema_version", integer(meta, "schema_version")),
        ("bq_source_lang", text(meta, "lang")),
        ("bq_attempts", attempts(body)),
    ):
        if value is not None:
            props[name] = str(value)
    props["bq_app_id"] = APP_ID
    out["application_properties"] = props
    return out


def reconcile_attempts(body_attempts: int, delivery_count: object) -> int:
    """max(body attempts, delivery-count) (0-based, no -1)."""
    count = non_negative(delivery_count)
    if count is None:
        return body_attempts
    return max(body_attempts, count)
