"""Which positions are protected: the reference path grammar by default, the wider reach on request.

The judge is the ``babelqueue`` package itself (its ``gdpr.protect``/``unprotect`` with the
reference AES-GCM cipher), run on schemas hypothesis builds from nested objects, arrays, arrays of
arrays, properties literally named ``*``, names with a dot or ending in ``[]``, and the constructs
only ``paths="extended"`` follows (``$ref``, ``allOf``/``anyOf``/``oneOf``,
``additionalProperties``/``patternProperties``, tuple ``items``/``prefixItems``).

The generator knows, for every value it writes, whether the schema marks it and whether the
reference grammar reaches the mark, so each test compares what changed against that oracle and
against what the package changes.
"""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from babelqueue import gdpr as bq_gdpr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from babelq.gdpr import ProtectError, protected, unprotected

from .support import ReferenceAesGcm, cipher_for, key_b64

KEY = key_b64()
OURS = cipher_for(("k1", KEY))
THEIRS = ReferenceAesGcm(base64.b64decode(KEY))
MARK = {"x-gdpr-sensitive": True}

#: Plain names never collide with the parts of the dotted ones (the package reads ``x.y`` as
#: ``y`` inside ``x``), so a misread dotted name reaches nothing in the data. Names ending in
#: ``[]`` have example tests below: whether the reference grammar reads them depends on what
#: follows them.
PLAIN = ["a", "b", "c", "*"]
ODD = ["x.y", "u.v.w"]

Where = tuple[Any, ...]


@dataclass
class Case:
    schema: dict[str, Any]
    data: dict[str, Any]
    #: concrete positions ``paths="extended"`` protects (outermost marks)
    extended: set[Where] = field(default_factory=set)
    #: concrete positions the reference grammar (and so the package) protects
    reference: set[Where] = field(default_factory=set)
    #: a mark the reference grammar does not reach, outside every reachable mark
    beyond: bool = False


leaves = st.one_of(
    st.text(max_size=6), st.integers(-5, 5), st.booleans(), st.none(), st.lists(st.integers(0, 3), max_size=2)
)


@st.composite
def nodes(  # noqa: PLR0917 - hypothesis composites take their arguments positionally
    draw: st.DrawFn, depth: int, reach: bool, in_items: bool, inside: bool, defs: dict[str, Any]
) -> Any:
    """(schema, data, extended, reference, beyond) of one node.

    ``reach``: the reference grammar reaches this node; ``in_items``: it is an array's item (so
    an array here is an array of arrays, whose items the reference grammar cannot reach);
    ``inside``: an enclosing value is marked (only unreachable marks are added there: the package
    itself mishandles a mark inside a mark).
    """
    kinds = ["leaf"] if depth == 0 else ["leaf", "object", "array", "object", "wrap"]
    kind = draw(st.sampled_from(kinds))
    marked = draw(st.booleans()) and (not inside or not reach)
    counted = marked and not inside
    ext: set[Where] = {()} if counted else set()
    ref: set[Where] = {()} if counted and reach else set()
    beyond = counted and not reach
    below = inside or marked
    schema: dict[str, Any] = dict(MARK) if marked else {}

    def sub(ws: list[Where], child: tuple[Any, Any, set[Where], set[Where], bool]) -> None:
        """Take in a child's marks at each of ``ws``; its refusal counts even where no value is."""
        nonlocal beyond
        if not counted:
            ext.update(w + p for w in ws for p in child[2])
            ref.update(w + p for w in ws for p in child[3])
            beyond = beyond or child[4]

    if kind == "leaf":
        return schema, draw(leaves), ext, ref, beyond
    if kind == "object":
        names = draw(st.lists(st.sampled_from(PLAIN + ODD), min_size=1, max_size=3, unique=True))
        props, data = {}, {}
        for name in names:
            child = draw(nodes(depth - 1, reach and name not in ODD, False, below, defs))
            props[name], data[name] = child[0], child[1]
            sub([(name,)], child)
        schema.update(type="object", properties=props)
        return schema, data, ext, ref, beyond
    if kind == "array":
        child = draw(nodes(depth - 1, reach and not in_items, True, below, defs))
        schema.update(type="array", items=child[0])
        data = [copy.deepcopy(child[1]) for _ in range(draw(st.integers(0, 2)))]
        sub([(i,) for i in range(len(data))], child)
        return schema, data, ext, ref, beyond
    # the constructs only paths="extended" follows; the value has the wrapped node's shape
    how = draw(st.sampled_from(["$ref", "allOf", "anyOf", "oneOf", "additionalProperties",
                                "patternProperties", "prefixItems", "items-tuple"]))  # fmt: skip
    child = draw(nodes(depth - 1, False, how in ("prefixItems", "items-tuple"), below, defs))
    if how == "$ref":
        name = f"d{len(defs)}"
        defs[name] = child[0]
        schema["$ref"] = f"#/$defs/{name}"
    elif how in ("allOf", "oneOf"):
        schema[how] = [child[0]]
    elif how == "anyOf":
        schema[how] = [child[0], {"type": "null"}]
    elif how in ("additionalProperties", "patternProperties"):
        schema[how] = child[0] if how == "additionalProperties" else {"^k": child[0]}
        data = {"k1": child[1], "k2": copy.deepcopy(child[1])}
        sub([(key,) for key in data], child)
        return schema, data, ext, ref, beyond
    else:
        schema["prefixItems" if how == "prefixItems" else "items"] = [child[0]]
        sub([(0,)], child)
        return schema, [child[1]], ext, ref, beyond
    sub([()], child)
    return schema, child[1], ext, ref, beyond


@st.composite
def cases(draw: st.DrawFn) -> Case:
    defs: dict[str, Any] = {}
    names = draw(st.lists(st.sampled_from(PLAIN + ODD), min_size=1, max_size=4, unique=True))
    props, data, case = {}, {}, Case({}, {})
    for name in names:
        depth = draw(st.integers(0, 3))
        child = draw(nodes(depth, name not in ODD, False, False, defs))
        props[name], data[name] = child[0], child[1]
        case.extended.update((name, *p) for p in child[2])
        case.reference.update((name, *p) for p in child[3])
        case.beyond = case.beyond or child[4]
    case.schema = {"type": "object", "properties": props, **({"$defs": defs} if defs else {})}
    case.data = data
    return case


def changed(before: Any, after: Any, where: Where = ()) -> set[Where]:
    """The outermost positions whose value was replaced by a (ciphertext) string."""
    if isinstance(after, str) and (not isinstance(before, str) or before != after):
        return {where}
    if isinstance(before, dict) and isinstance(after, dict):
        return set().union(*(changed(before[k], after[k], (*where, k)) for k in before))
    if isinstance(before, list) and isinstance(after, list):
        pairs = enumerate(zip(before, after, strict=True))
        return set().union(*(changed(b, a, (*where, i)) for i, (b, a) in pairs))
    return set()


def package_protected(data: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    theirs = copy.deepcopy(data)
    bq_gdpr.protect(theirs, schema, THEIRS)
    return theirs


def package_unprotected(data: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    theirs = copy.deepcopy(data)
    bq_gdpr.unprotect(theirs, schema, THEIRS)
    return theirs


EXAMPLES = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@EXAMPLES
@given(cases())
def test_the_package_protects_exactly_what_the_oracle_calls_reference(case: Case) -> None:
    """The generator's idea of the reference grammar is the package's (checks the oracle itself)."""
    assert changed(case.data, package_protected(case.data, case.schema)) == case.reference


@EXAMPLES
@given(cases())
def test_a_babelq_consumer_reads_whatever_the_package_protects(case: Case) -> None:
    """package protect -> babelq unprotect restores the data: nothing is dead-lettered, no ciphertext left."""
    assert unprotected(package_protected(case.data, case.schema), case.schema, OURS) == case.data


@EXAMPLES
@given(cases())
def test_the_package_reads_whatever_babelq_protects_and_babelq_refuses_the_rest(case: Case) -> None:
    """babelq protect -> package unprotect restores the data, with the same positions protected;
    a mark the reference grammar does not reach refuses the publish instead of leaking or
    stranding the value."""
    if case.beyond:
        with pytest.raises(ProtectError, match="extended"):
            protected(case.data, case.schema, OURS)
        return
    sealed = protected(case.data, case.schema, OURS)
    assert changed(case.data, sealed) == case.reference
    assert package_unprotected(sealed, case.schema) == case.data


@EXAMPLES
@given(cases())
def test_extended_paths_protect_every_mark_and_cost_the_package_exactly_those_beyond(case: Case) -> None:
    sealed = protected(case.data, case.schema, OURS, paths="extended")
    assert changed(case.data, sealed) == case.extended
    assert unprotected(sealed, case.schema, OURS, paths="extended") == case.data
    # the stated cost: a package consumer leaves the marks beyond its grammar as ciphertext
    assert changed(case.data, package_unprotected(sealed, case.schema)) == case.extended - case.reference


@EXAMPLES
@given(cases())
def test_where_every_mark_is_in_reach_both_modes_agree(case: Case) -> None:
    if case.beyond:
        return
    ours = changed(case.data, protected(case.data, case.schema, OURS))
    assert ours == changed(case.data, protected(case.data, case.schema, OURS, paths="extended"))


def test_a_property_named_star_is_that_property_only() -> None:
    schema = {"properties": {"*": MARK, "name": {}}}
    sealed = protected({"*": "secret", "name": "Ada"}, schema, OURS)
    assert sealed["name"] == "Ada" and isinstance(sealed["*"], str) and sealed["*"] != "secret"
    from_package = package_protected({"*": "secret", "name": "Ada"}, schema)
    assert unprotected(from_package, schema, OURS) == {"*": "secret", "name": "Ada"}


def test_a_dotted_name_is_one_property_never_a_nested_path() -> None:
    schema = {"properties": {"a.b": MARK, "a": {"type": "object"}}}
    data = {"a.b": "secret", "a": {"b": "not marked"}}
    with pytest.raises(ProtectError, match=r"^data\.a\.b: .*name.*extended"):
        protected(data, schema, OURS)
    sealed = protected(data, schema, OURS, paths="extended")
    assert sealed["a"] == {"b": "not marked"} and isinstance(sealed["a.b"], str)
    assert unprotected(sealed, schema, OURS, paths="extended") == data
    # the default consumer leaves the literal property alone, as the package does
    assert unprotected(data, schema, OURS) == data


def test_wildcard_under_extended_is_not_a_literal_star() -> None:
    schema = {"properties": {"labels": {"properties": {"*": {}}, "additionalProperties": MARK}}}
    sealed = protected({"labels": {"*": "s", "k": "v"}}, schema, OURS, paths="extended")
    assert all(isinstance(v, str) and v not in ("s", "v") for v in sealed["labels"].values())


def test_the_wider_reach_is_off_by_default() -> None:
    """A ``$ref`` mark: refused on protect, left alone on unprotect, unless ``paths="extended"``."""
    schema = {
        "$defs": {"contact": {"type": "string", **MARK}},
        "properties": {"email": {"$ref": "#/$defs/contact"}, "name": {"type": "string", **MARK}},
    }
    data = {"email": "ada@example.com", "name": "Ada"}
    with pytest.raises(ProtectError, match=r"^data\.email: .*\$ref.*paths='extended'"):
        protected(data, schema, OURS)
    with pytest.raises(ProtectError):
        protected(data, schema, OURS, paths="reference")
    assert isinstance(protected(data, schema, OURS, paths="extended")["email"], str)
    from_package = package_protected(data, schema)
    assert from_package["email"] == "ada@example.com"  # the package leaves it in clear
    assert unprotected(from_package, schema, OURS) == data


def test_an_unknown_paths_mode_is_refused() -> None:
    from babelq.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"^paths: must be 'reference' or 'extended', got 'wide'$"):
        protected({}, {"properties": {}}, OURS, paths="wide")  # type: ignore[arg-type]


def test_a_mark_beyond_the_grammar_inside_a_reachable_mark_needs_nothing_more() -> None:
    schema = {"properties": {"card": {**MARK, "properties": {"pan": {"$ref": "#/$defs/p"}}}},
              "$defs": {"p": MARK}}  # fmt: skip
    sealed = protected({"card": {"pan": "4242"}}, schema, OURS)
    assert isinstance(sealed["card"], str)
    assert package_unprotected(sealed, schema) == {"card": {"pan": "4242"}}


def test_the_reason_names_each_construct() -> None:
    cases_ = {
        "additionalProperties": {"properties": {"m": {"additionalProperties": MARK}}},
        "patternProperties": {"properties": {"m": {"patternProperties": {"^k": MARK}}}},
        "allOf": {"properties": {"m": {"allOf": [MARK]}}},
        "prefixItems": {"properties": {"m": {"prefixItems": [MARK]}}},
        "array of arrays": {"properties": {"m": {"items": {"items": MARK}}}},
        "ends in": {"properties": {"m[]": MARK}},
    }
    for reason, schema in cases_.items():
        with pytest.raises(ProtectError, match=rf"^data\.m.*{json.dumps(reason)[1:-1]}"):
            protected({"m": {}}, schema, OURS)


def test_a_name_ending_in_brackets_is_read_as_the_reference_grammar_reads_it() -> None:
    """``z[]`` alone reads as "every item of ``z``": refused. Followed by its items, the
    reference form ``z[][]`` is read back as the items of the property ``z[]``: in reach."""
    with pytest.raises(ProtectError, match=r"^data\.z\[\]: .*ends in '\[\]'"):
        protected({"z[]": "secret"}, {"properties": {"z[]": MARK}}, OURS)
    schema = {"properties": {"z[]": {"items": MARK}, "z": {"items": {}}}}
    data = {"z[]": ["secret"], "z": ["plain"]}
    sealed = protected(data, schema, OURS)
    assert sealed["z"] == ["plain"] and sealed["z[]"][0] != "secret"
    assert changed(data, package_protected(data, schema)) == changed(data, sealed) == {("z[]", 0)}
    assert package_unprotected(sealed, schema) == data
