"""Error texts never quote a value the schema marks x-gdpr-sensitive (nor one containing it)."""

from __future__ import annotations

from typing import Any

from babelq.schema import SchemaRegistry, validate_data
from babelq.schema.sensitive import ANY_KEY, ITEMS, KEY, Step
from babelq.schema.validation import hidden_patterns

URN = "urn:babel:people:registered"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 2, "x-gdpr-sensitive": True},
        "age": {"type": "integer", "minimum": 0},
        "addresses": {
            "type": "array",
            "items": {"type": "object", "properties": {"line": {"type": "string", "x-gdpr-sensitive": True}}},
        },
        "labels": {"type": "object", "additionalProperties": {"type": "string", "x-gdpr-sensitive": True}},
        "profile": {"type": "object", "properties": {"bio": {"type": "string", "x-gdpr-sensitive": True}}},
    },
}


def _errors(data: Any) -> list[str]:
    reg = SchemaRegistry()
    reg.register(URN, SCHEMA)
    return reg.validate(URN, data)


def test_patterns_of_marked_paths() -> None:
    key, items, any_key = (lambda n: Step(KEY, n)), Step(ITEMS), Step(ANY_KEY)
    assert hidden_patterns(SCHEMA) == (
        (key("name"),),
        (key("addresses"), items, key("line")),
        (key("labels"), any_key),
        (key("profile"), key("bio")),
    )


def test_a_property_named_star_or_with_a_dot_hides_only_itself() -> None:
    schema = {"properties": {"*": {"x-gdpr-sensitive": True, "minLength": 3},
                             "a.b": {"x-gdpr-sensitive": True, "minLength": 3},
                             "n": {"maximum": 3}, "a": {"properties": {"b": {"maximum": 3}}}}}  # fmt: skip
    assert validate_data(schema, {"*": "xy", "a.b": "pq", "n": 5, "a": {"b": 7}}) == [
        "$.a.b: 7 is greater than the maximum of 3",
        "$.n: 5 is greater than the maximum of 3",
        """$['*']: value not shown (x-gdpr-sensitive), fails "minLength": 3""",
        """$['a.b']: value not shown (x-gdpr-sensitive), fails "minLength": 3""",
    ]


def test_marked_values_are_not_quoted_others_are() -> None:
    data = {
        "name": "Q",
        "age": -1,
        "addresses": [{"line": 12345}],
        "labels": {"home": 99},
        "profile": "Ann Example, born 1970",
    }
    errors = _errors(data)
    assert errors == [
        '$.addresses[0].line: value not shown (x-gdpr-sensitive), fails "type": "string"',
        "$.age: -1 is less than the minimum of 0",
        '$.labels.home: value not shown (x-gdpr-sensitive), fails "type": "string"',
        '$.name: value not shown (x-gdpr-sensitive), fails "minLength": 2',
        '$.profile: value not shown (x-gdpr-sensitive), fails "type": "object"',  # it contains bio
    ]
    text = "\n".join(errors)
    for secret in ("12345", "99", "Ann Example", "'Q'"):
        assert secret not in text


def test_messages_that_name_only_keys_stay_as_jsonschema_writes_them() -> None:
    assert _errors({}) == ["$: 'name' is a required property"]


def test_root_errors_quote_nothing_when_the_schema_marks_fields() -> None:
    schema = {"anyOf": [{"type": "string"}, SCHEMA]}
    [error] = validate_data(schema, {"name": "Ann Secret", "age": "x"})
    assert "Ann Secret" not in error
    assert error.startswith('$: value not shown (x-gdpr-sensitive), fails "anyOf"')


def test_unmarked_schema_keeps_jsonschema_messages() -> None:
    assert validate_data({"type": "object", "properties": {"n": {"maximum": 3}}}, {"n": 5}) == [
        "$.n: 5 is greater than the maximum of 3"
    ]


def test_one_line_and_bounded() -> None:
    [error] = validate_data({"type": "string"}, {"k": "x" * 1000, "l": "line\nbreak"})
    assert "\n" not in error and len(error) <= 300 and error.endswith("…")
