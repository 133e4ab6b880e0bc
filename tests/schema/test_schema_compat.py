"""Breaking changes between two versions of a schema: each rule of the registry format, babelq's
extra rules, the modes, and (hypothesis) the promise behind them: a change called compatible
never makes the new schema refuse data the old one accepts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.errors import ConfigurationError
from babelq.schema import validate_data
from babelq.schema.compat import Change, breaking_changes


def obj(properties: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **more}


def texts(old: Any, new: Any, **kwargs: Any) -> list[str]:
    return [str(change) for change in breaking_changes(old, new, **kwargs)]


BASE = obj(
    {
        "id": {"type": "integer", "minimum": 1},
        "name": {"type": "string", "minLength": 1},
        "currency": {"enum": ["USD", "EUR"]},
        "lines": {"type": "array", "items": obj({"qty": {"type": "integer"}})},
    },
    required=["id"],
)


def changed(path: list[str], value: Any) -> dict[str, Any]:
    """BASE with the node at ``path`` (keys) replaced by ``value`` (or removed when None)."""
    import copy

    new = copy.deepcopy(BASE)
    node = new
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return new


# the registry format's rules: (rule, new schema, expected changes)
REGISTRY_RULES = [
    ("an optional property added is compatible", changed(["properties", "note"], {"type": "string"}), []),
    (
        "an optional property made required breaks",
        changed(["required"], ["id", "name"]),
        ['property "name" is now required'],
    ),
    (
        "a new required property breaks",
        changed(["properties", "note"], {"type": "string"}) | {"required": ["id", "note"]},
        ['property "note" is now required'],
    ),
    ("a removed property breaks", changed(["properties", "name"], None), ["name: property removed"]),
    (
        "a removed property breaks with extra keys allowed too",
        changed(["properties", "name"], None) | {"additionalProperties": True},
        ["name: property removed"],
    ),
    (
        "a renamed property breaks (removed and, harmlessly, added)",
        changed(["properties", "name"], None)
        | {"properties": {**BASE["properties"], "title": {"type": "string"}}}
        | {"properties": {k: v for k, v in BASE["properties"].items() if k != "name"} | {"title": {}}},
        ["name: property removed"],
    ),
    (
        "a retyped property breaks",
        changed(["properties", "id", "type"], "string"),
        ["id: type changed integer -> string"],
    ),
    (
        "additionalProperties to false breaks",
        BASE | {"additionalProperties": False},
        ["additionalProperties tightened to false"],
    ),
    (
        "an enum value dropped breaks",
        changed(["properties", "currency", "enum"], ["USD"]),
        ['currency: enum value "EUR" removed'],
    ),
    (
        "an enum added where any value was allowed breaks",
        changed(["properties", "name", "enum"], ["a", "b"]),
        ["name: enum added where any value was allowed"],
    ),
    ("an enum widened is compatible", changed(["properties", "currency", "enum"], ["USD", "EUR", "TRY"]), []),
    (
        "minLength raised breaks",
        changed(["properties", "name", "minLength"], 2),
        ["name: minLength tightened"],
    ),
    ("minimum raised breaks", changed(["properties", "id", "minimum"], 5), ["id: minimum tightened"]),
    ("a bound relaxed is compatible", changed(["properties", "id", "minimum"], 0), []),
    ("a bound dropped is compatible", changed(["properties", "name", "minLength"], None), []),
    ("a required name dropped is compatible", changed(["required"], []), []),
    (
        "array items are compared",
        changed(["properties", "lines", "items", "properties", "qty", "type"], "string"),
        ["lines[].qty: type changed integer -> string"],
    ),
    (
        "a property removed inside array items breaks",
        changed(["properties", "lines", "items", "properties"], {}),
        ["lines[].qty: property removed"],
    ),
    (
        "annotations and x-gdpr-sensitive never break",
        changed(
            ["properties", "name"],
            {"type": "string", "minLength": 1, "description": "who", "x-gdpr-sensitive": "name"},
        ),
        [],
    ),
]


@pytest.mark.parametrize(("rule", "new", "expected"), REGISTRY_RULES, ids=[r[0] for r in REGISTRY_RULES])
def test_registry_rule(rule: str, new: dict[str, Any], expected: list[str]) -> None:
    assert texts(BASE, new) == expected


EXTRA_RULES = [
    ("const added", {"const": "a"}, {}, ["const added"]),
    ("const changed", {"const": "b"}, {"const": "a"}, ["const changed"]),
    ("pattern added", {"pattern": "^a"}, {}, ["pattern added"]),
    ("pattern changed", {"pattern": "^b"}, {"pattern": "^a"}, ["pattern changed"]),
    ("maxLength lowered", {"maxLength": 3}, {"maxLength": 5}, ["maxLength tightened"]),
    ("maxLength added", {"maxLength": 3}, {}, ["maxLength added"]),
    ("maximum lowered", {"maximum": 3}, {"maximum": 5}, ["maximum tightened"]),
    ("maxItems lowered", {"maxItems": 1}, {"maxItems": 2}, ["maxItems tightened"]),
    ("minItems raised", {"minItems": 2}, {"minItems": 1}, ["minItems tightened"]),
    ("exclusiveMinimum added", {"exclusiveMinimum": 0}, {}, ["exclusiveMinimum added"]),
    (
        "exclusiveMaximum lowered",
        {"exclusiveMaximum": 1},
        {"exclusiveMaximum": 2},
        ["exclusiveMaximum tightened"],
    ),
    ("maximum raised is compatible", {"maximum": 9}, {"maximum": 5}, []),
    ("a type list widened is compatible", {"type": ["string", "null"]}, {"type": "string"}, []),
    (
        "a type list narrowed breaks",
        {"type": "string"},
        {"type": ["string", "null"]},
        ["type narrowed string/null -> string"],
    ),
    ("integer widened to number is compatible", {"type": "number"}, {"type": "integer"}, []),
    (
        "number narrowed to integer breaks",
        {"type": "integer"},
        {"type": "number"},
        ["type narrowed number -> integer"],
    ),
    (
        "a type added where any was allowed breaks",
        {"type": "string"},
        {},
        ["type string added where any type was allowed"],
    ),
    ("enum values compare as JSON: 1 equals 1.0", {"enum": [1.0, True]}, {"enum": [1, True]}, []),
    (
        "enum values compare as JSON: true is not 1",
        {"enum": [1]},
        {"enum": [True]},
        ["enum value true removed"],
    ),
    ("false where a schema was breaks", False, {"type": "string"}, ["now accepts no value (false)"]),
]


@pytest.mark.parametrize(("rule", "new", "old", "expected"), EXTRA_RULES, ids=[r[0] for r in EXTRA_RULES])
def test_babelq_rule(rule: str, new: Any, old: Any, expected: list[str]) -> None:
    assert texts(obj({"v": old}), obj({"v": new})) == [f"v: {text}" for text in expected]


def test_additional_properties_schemas() -> None:
    open_ = obj({})
    constrained = obj({}, additionalProperties={"type": "integer"})
    assert texts(open_, constrained) == [
        "additionalProperties constrained where any extra property was allowed"
    ]
    assert texts(constrained, obj({}, additionalProperties={"type": "string"})) == [
        "*: type changed integer -> string"
    ]
    assert texts(constrained, open_) == []


def test_boolean_schemas_and_items_added() -> None:
    assert texts(obj({"v": True}), obj({"v": {"type": "string"}})) == [
        "v: type string added where any type was allowed"
    ]
    assert texts(obj({"v": False}), obj({"v": {"type": "string"}})) == []
    assert texts(obj({"v": {"type": "string"}}), obj({"v": True})) == []
    assert texts(
        obj({"v": {"type": "array"}}), obj({"v": {"type": "array", "items": {"type": "integer"}}})
    ) == ["v[]: type integer added where any type was allowed"]
    assert (
        texts(obj({"v": {"type": "array", "items": {"type": "integer"}}}), obj({"v": {"type": "array"}}))
        == []
    )


def test_type_object_added_on_data_itself_is_not_a_break() -> None:
    assert texts({"properties": {}}, {"type": "object", "properties": {}}) == []
    assert texts({"properties": {"a": {}}}, {"properties": {"a": {"type": "object"}}}) == [
        "a: type object added where any type was allowed"
    ]


def test_modes() -> None:
    old = obj({"a": {"type": "integer", "minimum": 0}})
    new = obj({"a": {"type": "integer"}, "b": {"type": "string"}}, required=["b"])
    assert texts(old, new) == ['property "b" is now required']
    assert texts(old, new, mode="forward") == ["a: minimum added", "b: property removed"]
    assert texts(old, new, mode="full") == [
        'property "b" is now required',
        "a: minimum added",
        "b: property removed",
    ]
    with pytest.raises(ConfigurationError, match="mode: must be one of backward, forward, full"):
        breaking_changes(old, new, mode="sideways")  # type: ignore[arg-type]


def test_a_change_prints_with_its_path() -> None:
    assert (
        str(Change("", "additionalProperties tightened to false"))
        == "additionalProperties tightened to false"
    )
    assert str(Change("lines[].qty", "property removed")) == "lines[].qty: property removed"


# -- the promise, on generated schemas and data -----------------------------------------------------

SCALAR = st.fixed_dictionaries(
    {"type": st.sampled_from(["integer", "number", "string", "boolean"])},
    optional={
        "minimum": st.integers(-3, 3),
        "minLength": st.integers(0, 3),
        "enum": st.lists(st.sampled_from([0, 1, 2, "a", "bb", True]), min_size=1, max_size=3, unique=True),
    },
)
ARRAY = st.fixed_dictionaries({"type": st.just("array")}, optional={"items": st.booleans() | SCALAR})
LEAF = st.one_of(SCALAR, ARRAY, st.booleans())
NAMES = st.sampled_from(["a", "b", "c"])
SCHEMA = st.builds(
    lambda props, required, closed: {
        "type": "object",
        "properties": props,
        "required": sorted(set(required)),
        **({"additionalProperties": False} if closed else {}),
    },
    st.dictionaries(NAMES, LEAF, max_size=3),
    st.lists(NAMES, max_size=3),
    st.booleans(),
)
SCALAR_VALUE = st.one_of(st.integers(-4, 4), st.sampled_from([0.5, "a", "bb", "", True, False, None]))
VALUE = SCALAR_VALUE | st.lists(SCALAR_VALUE, max_size=3)
DATA = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), VALUE, max_size=4)


@settings(max_examples=400, deadline=None)
@given(old=SCHEMA, new=SCHEMA, data=DATA)
def test_compatible_never_refuses_what_the_old_schema_accepted(old: Any, new: Any, data: Any) -> None:
    """Of data holding only the fields the old schema declares (an optional field added to an open
    schema is compatible by the registry's rules, though an old producer could have sent that key
    with another type)."""
    if breaking_changes(old, new) or validate_data(old, data) or not set(data) <= set(old["properties"]):
        return
    assert validate_data(new, data) == [], (old, new, data)
