"""name_uuid in Spark SQL equals Python's uuid.uuid5 for every name (version 5, RFC 4122)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.spark

NAMESPACE = uuid.UUID("6f1b1c2e-3d4a-5b6c-8d7e-9f0a1b2c3d4e")


@settings(max_examples=15, deadline=None)
@given(names=st.lists(st.text(min_size=0, max_size=80), min_size=1, max_size=40))
def test_name_uuid_is_python_uuid5(spark: Any, names: list[str]) -> None:
    from pyspark.sql import functions as sf

    from babelq.spark.ids import name_uuid

    names = [n.encode("utf-8", "replace").decode("utf-8") for n in names]  # no lone surrogates
    rows = spark.createDataFrame([(i, n) for i, n in enumerate(names)], "i int, n string")
    got = {r.i: r.u for r in rows.select("i", name_uuid(NAMESPACE, sf.col("n")).alias("u")).collect()}
    assert got == {i: str(uuid.uuid5(NAMESPACE, n)) for i, n in enumerate(names)}


def test_a_null_name_has_no_id(spark: Any) -> None:
    from pyspark.sql import functions as sf

    from babelq.spark.ids import name_uuid

    frame = spark.createDataFrame([(None,)], "n string")
    [row] = frame.select(name_uuid(NAMESPACE, sf.col("n")).alias("u")).collect()
    assert row.u is None
