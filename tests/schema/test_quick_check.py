"""babelq.schema.quick: the compiled accept-only check never accepts what jsonschema rejects.

The property tests generate schemas of the supported subset (every keyword, wrong types, type
lists, nested objects and arrays, boolean schemas) and JSON values (floats, bools among ints,
near-miss strings); whenever the quick check says True, jsonschema must say valid. The transfer
schema gets its own tests: the check settle runs accepts generated valid transfers, and, on data
without floats (all the transfer schema has no exact form for), gives jsonschema's very verdict.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.pipelines.currencies import ISO_4217
from babelq.pipelines.transfer_schema import TRANSFER_SCHEMA, obviously_valid, schema_errors
from babelq.schema.quick import quick_check, quick_check_source
from babelq.schema.subset import UnsupportedSchemaError

KEYS = ["a", "b", "x y", "q'uote", "é"]
PATTERNS = ["^[A-Z]{3}$", "^[0-9]{3}-[0-9]{3}$", "a|b", r"\d", r"^\w+$", "^.{2}$", "x$", "[^a-c]", "^$", "é"]
STRINGS = ["", "a", "b", "ab", "abc", "ABC", "ABC\n", "123-456", "123-456\n", "x", "x\n", "é", "١٢٣", "AUD"]
NUMBERS = [0, 1, -1, 3, 2.5, -0.5, 1.0, 2**53, 2**53 + 1, 10**20, 1e20, float("inf"), float("nan"), True]
SCALARS = st.sampled_from([None, True, False, 0, 1, 1.0, 2.5, "a", "AUD", "", [1], {"a": 1}])

json_values = st.recursive(
    st.none() | st.booleans() | st.sampled_from(NUMBERS) | st.integers() | st.floats()
    | st.sampled_from(STRINGS) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    max_leaves=8,
)


@st.composite
def schemas(draw: st.DrawFn, depth: int = 0) -> Any:
    """A schema of the supported subset, keywords of every type mixed in."""
    if depth and draw(st.integers(0, 7)) == 0:
        return draw(st.booleans())
    schema: dict[str, Any] = {}
    types = ["null", "boolean", "object", "array", "number", "integer", "string"]
    if draw(st.integers(0, 3)):
        one_or_more = st.lists(st.sampled_from(types), min_size=1, max_size=3, unique=True)
        schema["type"] = draw(st.sampled_from(types) | one_or_more)
    if draw(st.integers(0, 4)) == 0:
        schema["enum"] = draw(st.lists(SCALARS, min_size=1, max_size=4))
    if draw(st.integers(0, 6)) == 0:
        schema["const"] = draw(SCALARS)
    for keyword in ("minLength", "maxLength", "minItems", "maxItems"):
        if draw(st.integers(0, 3)) == 0:
            schema[keyword] = draw(st.integers(0, 4))
    if draw(st.integers(0, 2)) == 0:
        schema["pattern"] = draw(st.sampled_from(PATTERNS))
    for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if draw(st.integers(0, 3)) == 0:
            schema[keyword] = draw(st.sampled_from([n for n in NUMBERS if n is not True]))
    if depth < 3:
        if draw(st.integers(0, 2)) == 0:
            schema["items"] = draw(schemas(depth + 1))
        if draw(st.booleans()):
            names = draw(st.lists(st.sampled_from(KEYS), max_size=3, unique=True))
            schema["properties"] = {name: draw(schemas(depth + 1)) for name in names}
        if draw(st.integers(0, 2)) == 0:
            schema["required"] = draw(st.lists(st.sampled_from(KEYS), max_size=3, unique=True))
        extra = draw(st.integers(0, 4))
        if extra == 1:
            schema["additionalProperties"] = False
        elif extra == 2:
            schema["additionalProperties"] = draw(schemas(depth + 1))
    return schema


@settings(max_examples=400)
@given(schemas(), st.lists(json_values, min_size=1, max_size=8))
def test_never_accepts_what_jsonschema_rejects(schema: Any, values: list[Any]) -> None:
    check = quick_check(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for value in values:
        if check(value):
            assert validator.is_valid(value), (quick_check_source(schema)[0], value)


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({}, {"anything": [1, 2.5, None]}),
        (True, 3),
        ({"type": ["string", "null"], "minLength": 2}, None),
        ({"type": ["string", "null"], "minLength": 2}, "ab"),
        ({"type": "number", "minimum": 0, "exclusiveMaximum": 2.5}, 2.25),
        ({"type": "integer", "maximum": 2**53 + 1}, 2**53 + 1),
        ({"enum": ["AUD", 7, None, True]}, 7),
        ({"enum": ["AUD", 7, None, True]}, True),
        ({"const": "x"}, "x"),
        ({"type": "string", "pattern": "^[0-9]{3}$"}, "123\n"),  # re.search: $ before a final newline
        ({"type": "array", "minItems": 1, "items": {"type": "string"}}, ["a", "b"]),
        ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
         {"a": 1}),
        ({"type": "object", "additionalProperties": {"type": "string"}, "properties": {"n": {}}},
         {"n": 1, "s": "x"}),
        ({"type": "object", "required": ["a"], "properties": {"a": {"type": ["null", "string"]}}},
         {"a": None}),
        ({"minLength": 2, "minimum": 1}, [1]),  # keywords of other types do not apply
    ],
)
def test_accepts_valid_values(schema: Any, value: Any) -> None:
    assert jsonschema.Draft202012Validator(schema).is_valid(value)
    assert quick_check(schema)(value) is True


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "object", "required": ["a"], "properties": {"a": {"type": ["null", "string"]}}}, {}),
        ({"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}}, {}),
        ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
         {"a": 1, "b": 2}),
        ({"enum": [1, "a"]}, True),  # true is no 1 to jsonschema
        ({"type": "integer"}, False),
        ({"type": "string", "maxLength": 2}, "abc"),
        ({"type": "array", "items": False}, [None]),
    ],
)
def test_refuses_invalid_values(schema: Any, value: Any) -> None:
    assert not jsonschema.Draft202012Validator(schema).is_valid(value)
    assert quick_check(schema)(value) is False


@pytest.mark.parametrize(
    ("schema", "keyword", "location"),
    [
        ({"properties": {"id": {"type": "string", "format": "uuid"}}}, "format", "#/properties/id/format"),
        ({"items": {"$ref": "#/$defs/x"}}, "$ref", "#/items/$ref"),
        ({"properties": {"a": {"pattern": "("}}}, "pattern", "#/properties/a/pattern"),
        ({"minLength": -1}, "minLength", "#/minLength"),
    ],
)
def test_unsupported_keywords_are_refused_when_compiling(schema: Any, keyword: str, location: str) -> None:
    with pytest.raises(UnsupportedSchemaError) as caught:
        quick_check(schema)
    assert (caught.value.keyword, caught.value.location) == (keyword, location)


def test_a_schema_nested_beyond_one_python_function_is_refused_when_compiling() -> None:
    schema: Any = {"type": "string"}
    for _ in range(25):  # 25 nested item loops; Python allows 20 nested blocks
        schema = {"type": "array", "items": schema}
    with pytest.raises(UnsupportedSchemaError, match="nested too deeply"):
        quick_check(schema)


# -- the transfer schema, as settle runs it ------------------------------------------------------------

_bsb = st.builds(lambda a, b: f"{a}-{b}", st.text("0123456789", min_size=3, max_size=3),
                 st.text("0123456789", min_size=3, max_size=3))
_account = st.text("0123456789", min_size=6, max_size=10)
valid_transfers = st.fixed_dictionaries(
    {
        "payment_reference": st.text(min_size=1, max_size=64),
        "amount_cents": st.integers(1, 100_000_000),
        "currency": st.sampled_from(sorted(ISO_4217)),
        "debtor_bsb": _bsb,
        "debtor_account": _account,
        "creditor_bsb": _bsb,
        "creditor_account": _account,
        "validation_result": st.fixed_dictionaries(
            {"passed": st.booleans(), "checks": st.lists(st.text(max_size=8), max_size=8)},
            optional={"validated_at": st.integers(0, 2**53)},
        ),
    },
    optional={"narrative": st.text(max_size=20)},
)

#: near misses of every field: wrong types, lengths, digits of other scripts, trailing newlines
_field_misses: dict[str, st.SearchStrategy[Any]] = {
    "payment_reference": st.sampled_from(["", "P" * 65, None, 7]),
    "amount_cents": st.sampled_from([0, -1, True, None, "100", 2**63, 10**20]),
    "currency": st.sampled_from(["AUX", "aud", "AUD\n", "AU", "", None, 1]),
    "debtor_bsb": st.sampled_from(["012345", "12-345", "٠١٢-٣٤٥", "012-345\n", "012-345\r", None]),
    "debtor_account": st.sampled_from(["12345", "12345678901", "12A456", "123456\n", 123456]),
    "creditor_bsb": st.sampled_from(["012 345", "0123-45", ""]),
    "creditor_account": st.sampled_from(["", "١٢٣٤٥٦", None]),
    "validation_result": st.sampled_from([
        None, {}, {"passed": 1, "checks": []}, {"passed": True}, {"passed": True, "checks": [None]},
        {"passed": True, "checks": "x"},
    ]),
}


@st.composite
def near_transfers(draw: st.DrawFn) -> Any:
    data = dict(draw(valid_transfers))
    for name in draw(st.lists(st.sampled_from(sorted(_field_misses)), max_size=3, unique=True)):
        if draw(st.integers(0, 4)) == 0:
            data.pop(name)
        else:
            data[name] = draw(_field_misses[name])
    return data


@settings(max_examples=300)
@given(valid_transfers)
def test_the_transfer_check_accepts_valid_transfers(data: dict[str, Any]) -> None:
    assert schema_errors(data) == []
    assert obviously_valid(data) is True


@settings(max_examples=500)
@given(near_transfers())
def test_the_transfer_check_gives_jsonschemas_verdict_on_data_without_floats(data: dict[str, Any]) -> None:
    full = jsonschema.Draft202012Validator(TRANSFER_SCHEMA).is_valid(data)
    assert obviously_valid(data) is full
    assert (schema_errors(data) == []) is full


def test_the_transfer_check_leaves_an_integral_float_amount_to_the_full_validator() -> None:
    data = {"payment_reference": "PAY-1", "amount_cents": 1000.0, "currency": "AUD", "debtor_bsb": "012-345",
            "debtor_account": "123456", "creditor_bsb": "033-001", "creditor_account": "654321",
            "validation_result": {"passed": True, "checks": []}}
    assert obviously_valid(data) is False
    assert schema_errors(data) == []
