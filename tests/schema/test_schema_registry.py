"""SchemaRegistry: registering, loading files and directories, validating with JSON paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from babelq.errors import ConfigurationError
from babelq.schema import SchemaRegistry, default_registry, validate, validate_data

ORDER: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["order_id"],
    "properties": {
        "order_id": {"type": "integer", "minimum": 1},
        "items": {"type": "array", "items": {"type": "object", "properties": {"cents": {"minimum": 0}}}},
    },
    "additionalProperties": False,
}


def test_valid_data_has_no_errors() -> None:
    reg = SchemaRegistry()
    reg.register("urn:babel:orders:created", ORDER)
    assert reg.validate("urn:babel:orders:created", {"order_id": 5, "items": [{"cents": 1}]}) == []
    assert reg.is_valid("urn:babel:orders:created", {"order_id": 5})


def test_errors_name_json_paths_sorted() -> None:
    reg = SchemaRegistry()
    reg.register("urn:babel:orders:created", ORDER)
    data = {"order_id": "x", "items": [{"cents": 1}, {"cents": -1}]}
    errors = reg.validate("urn:babel:orders:created", data)
    assert errors == [
        "$.items[1].cents: -1 is less than the minimum of 0",
        "$.order_id: 'x' is not of type 'integer'",
    ]


def test_unknown_urn_is_opt_in() -> None:
    reg = SchemaRegistry()
    assert reg.validate("urn:babel:none:here", {"anything": 1}) == []
    assert reg.validate("urn:babel:none:here", {}, required=True) == [
        "$: no schema is registered for 'urn:babel:none:here'"
    ]


def test_draft_2020_12_and_default_draft() -> None:
    tuple_2020 = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "array",
        "prefixItems": [{"type": "string"}],
        "items": False,
    }
    assert validate_data(tuple_2020, ["a"]) == []
    assert validate_data(tuple_2020, ["a", 1]) != []
    # no $schema: read as 2020-12, so prefixItems applies
    assert validate_data({"prefixItems": [{"type": "string"}]}, [1]) != []


def test_format_is_asserted() -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}}}
    assert validate_data(schema, {"id": "f1e2d3c4-b5a6-4789-90ab-cdef01234567"}) == []
    assert validate_data(schema, {"id": "not-a-uuid"}) == ["$.id: 'not-a-uuid' is not a 'uuid'"]


def test_invalid_schema_is_refused_at_registration() -> None:
    reg = SchemaRegistry()
    with pytest.raises(ConfigurationError, match="invalid JSON Schema"):
        reg.register("urn:babel:a:b", {"type": "no-such-type"})
    assert "urn:babel:a:b" not in reg


def test_load_single_schema_file_by_keyword_and_by_name(tmp_path: Path) -> None:
    (tmp_path / "order.json").write_text(json.dumps({**ORDER, "x-babel-urn": "urn:babel:orders:created"}))
    (tmp_path / "urn:babel:orders:shipped.schema.json").write_text(json.dumps({"type": "object"}))
    reg = SchemaRegistry()
    assert reg.load(tmp_path) == ["urn:babel:orders:created", "urn:babel:orders:shipped"]
    assert reg.validate("urn:babel:orders:created", {}) == ["$: 'order_id' is a required property"]
    assert len(reg) == 2 and sorted(reg) == ["urn:babel:orders:created", "urn:babel:orders:shipped"]


def test_load_mapping_file(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    path.write_text(json.dumps({"urn:babel:a:one": {"type": "object"}, "urn:babel:a:two": ORDER}))
    reg = SchemaRegistry()
    assert reg.load(path) == ["urn:babel:a:one", "urn:babel:a:two"]
    assert reg.get("urn:babel:a:two") == ORDER


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("nameless.json", {"type": "object"}, "no URN"),
        ("broken.json", "{not json", "cannot read"),
        ("list.json", [1], "JSON object"),
        ("bad.json", {"urn:babel:a:b": {"type": 5}}, "urn:babel:a:b"),
    ],
)
def test_load_errors_name_the_file(tmp_path: Path, name: str, content: object, message: str) -> None:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(ConfigurationError, match=message):
        SchemaRegistry().load(path)


def test_module_level_validate_uses_the_default_registry() -> None:
    urn = "urn:babel:tests:default.registry"
    default_registry.register(urn, {"type": "object", "required": ["k"]})
    assert validate(urn, {"k": 1}) == []
    assert validate(urn, {}) == ["$: 'k' is a required property"]
    other = SchemaRegistry()
    assert validate(urn, {}, registry=other) == []
