"""Hypothesis strategies shared by the envelope tests: JSON values of every awkward shape."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

#: Characters from every plane, controls included, lone surrogates (category Cs) excluded.
any_char = st.characters(exclude_categories=["Cs"])

AWKWARD_STRINGS = [
    "",
    "/",
    "a/b\\c",
    '"quoted"',
    "\u2028\u2029",
    "\x7f",
    "\x00\x01\x1f",
    "\b\f\n\r\t",
    "é",
    "Zoë Ōtsuka — 東京 ☕ 😀",
    "\U0010ffff",
    "\ufeff",
    "</script>",
]

text = st.one_of(st.text(any_char, max_size=20), st.sampled_from(AWKWARD_STRINGS))

AWKWARD_FLOATS = [
    0.0,
    -0.0,
    0.1,
    1.5,
    1e20,
    1e-7,
    1e-5,
    1e-4,
    1e-9,
    1e-10,
    5e-324,
    1.7976931348623157e308,
    -1.7976931348623157e308,
    1e16,
    1e15,
    123456789.123,
    9007199254740993.0,
    2.5e-5,
]

floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(AWKWARD_FLOATS),
    st.floats(min_value=1e-10, max_value=1e-3),
)

AWKWARD_INTS = [0, -1, 2**53 - 1, -(2**53) + 1, 2**53, 2**62, INT64_MAX, INT64_MIN]

integers = st.one_of(
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
    st.sampled_from(AWKWARD_INTS),
)

scalars = st.one_of(st.none(), st.booleans(), integers, floats, text)


def json_values(max_leaves: int = 25) -> st.SearchStrategy[Any]:
    """Any JSON value (lists and dicts nested), as Python builds it."""
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=5),
            st.dictionaries(text, children, max_size=5),
        ),
        max_leaves=max_leaves,
    )


def json_objects(max_leaves: int = 25) -> st.SearchStrategy[dict[str, Any]]:
    """A JSON object payload (``data``)."""
    return st.dictionaries(text, json_values(max_leaves), max_size=8)


GOOD_URNS = [
    "urn:babel:orders:created",
    "urn:babel:orders:invoice.requested",
    "urn:babel:payments:payment.settled",
    "urn:babel:bulk-files:batch.file_received",
    "urn:babel:kyc:check.passed",
]

uuids = st.uuids(version=4).map(str)
epoch_ms = st.integers(min_value=0, max_value=4_102_444_800_000)
queues = st.text(any_char, min_size=1, max_size=12)
