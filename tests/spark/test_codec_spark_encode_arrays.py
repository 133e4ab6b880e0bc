"""babelq.spark.encode's array fast paths and ``omit_null`` still write the core codec's bytes.

Arrays of strings are escaped as one joined text (no per-element lambda) unless an element
holds a control character; arrays of integers and booleans are joined directly. Both paths
must give exactly what ``make(...).encode()`` writes, including null elements, empty arrays,
quotes, backslashes and the two marker characters (U+0001, U+0002) the fast path relies on
never seeing. ``omit_null`` leaves a null top-level data field out of the object.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from babelq.envelope import make

pytestmark = pytest.mark.spark

sf: Any = pytest.importorskip("pyspark.sql.functions")

CREATED = 1_749_132_727_000
URN = "urn:babel:spark:arrays"
SCHEMA = (
    "tags array<string>, ns array<long>, flags array<boolean>, small array<int>, "
    "nested array<array<string>>, note string, last long"
)
COLUMNS = ["tags", "ns", "flags", "small", "nested", "note", "last"]

texts = st.one_of(
    st.sampled_from(["", "a", 'q"uote', "back\\slash", "\x01", "\x02", '"\x02"', "\n", "é/ü", "\u2028", ","]),
    st.text(alphabet=st.characters(codec="utf-8", min_codepoint=0), max_size=6),
    st.text(alphabet='ab"\\,', max_size=4),
)
strings = st.lists(st.none() | texts, max_size=5)
rows = st.tuples(
    st.none() | strings,
    st.none() | st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), max_size=4),
    st.none() | st.lists(st.none() | st.booleans(), max_size=4),
    st.none() | st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=4),
    st.none() | st.lists(st.none() | strings, max_size=3),
    st.none() | texts,
    st.none() | st.integers(-5, 5),
)


def _core(row: Any, omit: tuple[str, ...]) -> bytes:
    data = {name: row[name] for name in COLUMNS if not (name in omit and row[name] is None)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = make(URN, data, queue="q", trace_id=row["trace_id"], message_id=row["id"], created_at=CREATED)
    return env.encode()


# Long lists of these rows overrun hypothesis' entropy buffer (it then retries and keeps only
# sparse rows), so: more examples of fewer rows.
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    generated=st.lists(rows, min_size=50, max_size=50),
    omit=st.sampled_from([(), ("note",), ("note", "last")]),
)
def test_arrays_and_omitted_nulls_equal_the_core_codec(
    spark: Any, generated: list[Any], omit: tuple[str, ...]
) -> None:
    from babelq.spark.encode import encode

    df = spark.createDataFrame(generated, SCHEMA)
    out = encode(df, urn=URN, data=COLUMNS, queue="q", created_at=sf.lit(CREATED), omit_null=omit).collect()
    mismatches = [(bytes(r["body"]), _core(r, omit)) for r in out if bytes(r["body"]) != _core(r, omit)]
    assert not mismatches, mismatches[:3]


def test_omit_null_names_must_be_data_fields(spark: Any) -> None:
    from babelq.errors import EnvelopeError
    from babelq.spark.encode import encode

    df = spark.createDataFrame([("x",)], "note string")
    with pytest.raises(EnvelopeError, match="omit_null names fields the struct does not have"):
        encode(df, urn=URN, data=["note"], queue="q", omit_null=("nope",))
