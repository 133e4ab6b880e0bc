"""Property tests: protect/unprotect round-trips any JSON; unmarked fields are byte-identical."""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from babelq.gdpr import protected, unprotected

from .support import ReferenceAesGcm, cipher_for, key_b64

KEY = key_b64()
CIPHER = cipher_for(("k1", KEY))
REFERENCE = ReferenceAesGcm(base64.b64decode(KEY))

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
names = st.text(alphabet="abcdefghij_", min_size=1, max_size=6)


@st.composite
def schema_and_data(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], set[str]]:
    """A flat-or-nested object schema with some fields marked, data matching its shape, the marked names."""
    fields = draw(st.lists(names, min_size=1, max_size=6, unique=True))
    marked = set(draw(st.lists(st.sampled_from(fields), unique=True)))
    properties: dict[str, Any] = {}
    data: dict[str, Any] = {}
    for name in fields:
        shape = draw(st.sampled_from(["leaf", "array", "object"]))
        mark = {"x-gdpr-sensitive": True} if name in marked else {}
        if shape == "leaf":
            properties[name] = dict(mark)
            if draw(st.booleans()) or name in marked:
                data[name] = draw(json_values)
        elif shape == "array":
            properties[name] = {"type": "array", "items": dict(mark)}
            data[name] = draw(st.lists(json_values, max_size=3))
        else:
            properties[name] = {"type": "object", "properties": {"inner": dict(mark), "plain": {}}}
            data[name] = {"inner": draw(json_values), "plain": draw(json_values)}
    return {"type": "object", "properties": properties}, data, marked


def canon(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(schema_and_data())
def test_round_trip_restores_every_value_byte_for_byte(
    case: tuple[dict[str, Any], dict[str, Any], set[str]],
) -> None:
    schema, data, _ = case
    before = canon(data)
    sealed = protected(data, schema, CIPHER)
    assert canon(data) == before  # the argument is untouched
    assert canon(unprotected(sealed, schema, CIPHER)) == before
    # and the package's reference cipher opens every value babelq sealed
    from babelqueue import gdpr as bq_gdpr

    theirs = json.loads(canon(sealed))
    bq_gdpr.unprotect(theirs, schema, REFERENCE)
    assert canon(theirs) == before


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(schema_and_data())
def test_unmarked_fields_are_byte_identical_and_marked_ones_are_strings(
    case: tuple[dict[str, Any], dict[str, Any], set[str]],
) -> None:
    schema, data, marked = case
    sealed = protected(data, schema, CIPHER)
    assert sealed.keys() == data.keys()
    for name, value in data.items():
        shape = schema["properties"][name]
        if name not in marked:
            assert canon(sealed[name]) == canon(value)
        elif shape.get("type") == "array":
            assert len(sealed[name]) == len(value) and all(isinstance(v, str) for v in sealed[name])
        elif shape.get("type") == "object":
            assert isinstance(sealed[name]["inner"], str)
            assert canon(sealed[name]["plain"]) == canon(value["plain"])
        else:
            assert isinstance(sealed[name], str)
