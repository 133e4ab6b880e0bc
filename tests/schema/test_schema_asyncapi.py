"""The AsyncAPI document of a registry, validated by jsonschema against the official AsyncAPI 3.0.0
JSON Schema (vendored in tests/schema/asyncapi/, see its README), with every $ref resolved."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from babelq.schema import SchemaRegistry
from babelq.schema.asyncapi import asyncapi_document, component_key

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "registry" / "registry.json"


@cache
def asyncapi_validator() -> Any:
    schema = json.loads((HERE / "asyncapi" / "asyncapi-3.0.0.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def problems(document: Any) -> list[str]:
    found = [f"{e.json_path}: {e.message}" for e in asyncapi_validator().iter_errors(document)]
    found += [f"unresolved $ref {ref}" for ref in refs(document) if resolve(document, ref) is None]
    return found


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) and "payload" not in node else []
        return own + [r for key, v in node.items() if key != "payload" for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def resolve(document: Any, ref: str) -> Any:
    node = document
    for part in ref.removeprefix("#/").split("/"):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def test_the_validator_is_real() -> None:
    # the vendored schema refuses what AsyncAPI 3 refuses
    assert problems({"asyncapi": "3.0.0", "info": {"title": "t", "version": "1"}}) == []
    assert problems({"asyncapi": "2.6.0", "info": {"title": "t", "version": "1"}})
    assert problems({"asyncapi": "3.0.0", "info": {"title": "t"}})
    assert problems(
        {
            "asyncapi": "3.0.0",
            "info": {"title": "t", "version": "1"},
            "channels": {"c": {"adress": "urn:babel:a:b"}},
        }
    )
    assert problems(
        {
            "asyncapi": "3.0.0",
            "info": {"title": "t", "version": "1"},
            "components": {"messages": {"m": {"payload": True}}},
        }
    )
    assert problems(
        {
            "asyncapi": "3.0.0",
            "info": {"title": "t", "version": "1"},
            "channels": {"c": {"messages": {"m": {"$ref": "#/components/messages/m"}}}},
        }
    ) == ["unresolved $ref #/components/messages/m"]


def test_the_example_registry_is_a_valid_asyncapi_3_document() -> None:
    registry = SchemaRegistry.from_manifest(EXAMPLE)
    document = asyncapi_document(registry, title="Shop", version="2.1.0")
    assert problems(document) == []
    assert document["asyncapi"] == "3.0.0" and document["info"]["title"] == "Shop"
    message = document["components"]["messages"]["urn_babel_users_registered"]
    assert message["name"] == "urn:babel:users:registered"
    assert message["payload"] == registry.get("urn:babel:users:registered")  # marks included
    assert message["x-owner"] == "identity" and message["x-status"] == "active"
    channel = document["channels"]["urn_babel_orders_created"]
    assert channel["address"] == "urn:babel:orders:created"


def test_other_drafts_use_the_multi_format_form_and_keys_never_collide() -> None:
    registry = SchemaRegistry()
    registry.register(
        "urn:babel:a:b",
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "prefixItems": [{}]},
    )
    registry.register("urn:babel:a.b", {"$schema": "http://json-schema.org/draft-07/schema#"})
    registry.register("urn:babel:a-b", True)
    document = asyncapi_document(registry)
    assert problems(document) == []
    messages = document["components"]["messages"]
    assert sorted(messages) == ["urn_babel_a_b", "urn_babel_a_b_2", "urn_babel_a_b_3"]
    payloads = {m["name"]: m["payload"] for m in messages.values()}
    assert payloads["urn:babel:a:b"]["schemaFormat"] == (
        "application/schema+json;version=https://json-schema.org/draft/2020-12/schema"
    )
    assert payloads["urn:babel:a.b"] == {"$schema": "http://json-schema.org/draft-07/schema#"}
    assert payloads["urn:babel:a-b"] == {}


@pytest.mark.parametrize(
    ("urn", "key"),
    [
        ("urn:babel:orders:created", "urn_babel_orders_created"),
        ("urn:babel:orders:created.v2", "urn_babel_orders_created_v2"),
        ("urn:babel:ödeme:alındı", "urn_babel__deme_al_nd_"),
    ],
)
def test_component_keys(urn: str, key: str) -> None:
    assert component_key(urn) == key
