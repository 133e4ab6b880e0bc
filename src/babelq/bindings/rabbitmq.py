"""RabbitMQ (AMQP 0-9-1) binding.

Produce: the URN, trace and message ids ride AMQP basic properties so a consumer can route
and trace without parsing the body, beside the body's content type and encoding; schema
version, language and attempts ride headers as native AMQP integers/strings (never
stringified numbers). Consume: the body's attempts is authoritative; the ``x-attempts``
header only mirrors it (a worker that retries writes a new body with attempts+1, and the
header is projected again from that body).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from babelq.bindings._fields import Doc, attempts, document, integer, meta_of, put, text, urn

APP_ID: Final = "babelqueue"
CONTENT_TYPE: Final = "application/json"
#: the envelope is UTF-8 JSON; the babelqueue package and the Node SDK say so too
CONTENT_ENCODING: Final = "utf-8"
#: AMQP delivery_mode 2 = persistent.
PERSISTENT: Final = 2


def project(doc: Doc) -> dict[str, Any]:
    """The basic properties for publishing ``doc`` (keys as pika's ``BasicProperties`` names).

    ``priority`` is present only when ``meta.priority`` is set.
    """
    body = document(doc)
    meta = meta_of(body)
    props: dict[str, Any] = {}
    put(props, "type", urn(body))
    put(props, "correlation_id", text(body, "trace_id"))
    put(props, "message_id", text(meta, "id"))
    props["app_id"] = APP_ID
    props["content_type"] = CONTENT_TYPE
    props["content_encoding"] = CONTENT_ENCODING
    props["delivery_mode"] = PERSISTENT
    headers: dict[str, Any] = {}
    put(headers, "x-schema-version", integer(meta, "schema_version"))
    put(headers, "x-source-lang", text(meta, "lang"))
    put(headers, "x-attempts", attempts(body))
    props["headers"] = headers
    priority = integer(meta, "priority")
    if priority is not None:
        props["priority"] = priority
    return props


def reconcile_attempts(body_attempts: int, headers: Mapping[str, Any] | None = None) -> int:
    """The attempts of a received message: the body's count (the header only mirrors it)."""
    del headers  # accepted for symmetry with the other bindings; never consulted
    return body_attempts
