"""An AsyncAPI 3.0 document describing a registry's URNs.

Each URN becomes a channel whose address is the URN and a message in ``components.messages``
whose payload is the URN's data schema, copied as it is (``x-gdpr-sensitive`` marks included,
so the catalogue says which fields are personal data). A manifest entry's ``owner`` and
``status`` travel as the message's ``x-owner`` and ``x-status``. Component and channel keys are
the URN with every character outside ``[A-Za-z0-9_]`` replaced by ``_``
(``urn_babel_orders_created``), the form AsyncAPI allows for component keys; two URNs that
would share a key get ``_2``, ``_3``... in registry order.

AsyncAPI's default schema format is a superset of JSON Schema Draft 7, so a schema whose
``$schema`` names another draft is embedded in the multi-format form, with its draft as the
``schemaFormat``; a boolean schema is written as its object form (``{}``, ``{"not": {}}``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from babelq.schema.registry import SchemaRegistry

ASYNCAPI_VERSION: Final = "3.0.0"
_DRAFT_7: Final = re.compile(r"https?://json-schema\.org/draft-07/schema#?\Z")


def component_key(urn: str) -> str:
    """The AsyncAPI component key of ``urn``: ``[A-Za-z0-9_]`` kept, anything else ``_``."""
    return re.sub(r"[^A-Za-z0-9_]", "_", urn, flags=re.ASCII) or "_"


def _payload(schema: Mapping[str, Any] | bool) -> Any:
    if isinstance(schema, bool):  # AsyncAPI's payload must be an object: the same two schemas as objects
        return {} if schema else {"not": {}}
    draft = schema.get("$schema") if isinstance(schema, Mapping) else None
    if isinstance(draft, str) and not _DRAFT_7.match(draft):
        return {"schemaFormat": f"application/schema+json;version={draft}", "schema": schema}
    return schema


def asyncapi_document(
    registry: SchemaRegistry, *, title: str = "BabelQueue messages", version: str = "1.0.0"
) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of every URN in ``registry``, sorted by URN."""
    channels: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for urn in sorted(registry):
        schema = registry.get(urn)
        if schema is None:
            continue
        key = base = component_key(urn)
        n = 1
        while key in messages:
            n += 1
            key = f"{base}_{n}"
        message: dict[str, Any] = {
            "name": urn,
            "title": urn,
            "contentType": "application/json",
            "payload": _payload(schema),
        }
        entry = registry.entry(urn)
        if entry is not None and entry.owner is not None:
            message["x-owner"] = entry.owner
        if entry is not None and entry.status is not None:
            message["x-status"] = entry.status
        messages[key] = message
        channels[key] = {
            "address": urn,
            "messages": {key: {"$ref": f"#/components/messages/{key}"}},
        }
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": title,
            "version": version,
            "description": "The data of each message URN; every message travels in the BabelQueue envelope.",
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "components": {"messages": messages},
    }
