"""cache_uncompressed: this DataFrame's cache skips compression, the session's setting is untouched."""

from __future__ import annotations

from typing import Any

import pytest

from babelq.spark.cache import cache_uncompressed

KEY = "spark.sql.inMemoryColumnarStorage.compressed"


def _cached_bytes(spark: Any, df: Any) -> int:
    df.count()
    return sum(i.memSize() for i in spark.sparkContext._jsc.sc().getRDDStorageInfo())


@pytest.mark.spark
def test_the_cache_is_uncompressed_and_the_setting_restored(spark: Any) -> None:
    rows = spark.range(100_000).selectExpr("id", "'the same text in every row' AS t")
    before = spark.conf.get(KEY, None)
    plain = rows.persist()
    compressed = _cached_bytes(spark, plain)
    plain.unpersist(blocking=True)
    raw = cache_uncompressed(rows.selectExpr("*", "1 AS one"))
    try:
        assert spark.conf.get(KEY, None) == before
        assert _cached_bytes(spark, raw) > 3 * compressed
        assert raw.count() == 100_000
    finally:
        raw.unpersist(blocking=True)
