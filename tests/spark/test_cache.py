"""cache_on_disk: the cache is on local disk, not in the JVM heap, and skips compression; the
session's setting is untouched."""

from __future__ import annotations

from typing import Any

import pytest

from babelq.spark.cache import cache_on_disk

KEY = "spark.sql.inMemoryColumnarStorage.compressed"


def _cached(spark: Any, df: Any) -> tuple[int, int]:
    """(bytes in memory, bytes on disk) of the cached DataFrames, after reading ``df`` once."""
    df.count()
    infos = spark.sparkContext._jsc.sc().getRDDStorageInfo()
    return sum(i.memSize() for i in infos), sum(i.diskSize() for i in infos)


@pytest.mark.spark
def test_the_cache_is_on_disk_uncompressed_and_the_setting_restored(spark: Any) -> None:
    from pyspark import StorageLevel

    rows = spark.range(100_000).selectExpr("id", "'the same text in every row' AS t")
    before = spark.conf.get(KEY, None)
    plain = rows.persist(StorageLevel.DISK_ONLY)
    _, compressed = _cached(spark, plain)
    plain.unpersist(blocking=True)
    raw = cache_on_disk(rows.selectExpr("*", "1 AS one"))
    try:
        assert spark.conf.get(KEY, None) == before
        in_memory, on_disk = _cached(spark, raw)
        assert in_memory == 0 and on_disk > 3 * compressed
        assert raw.count() == 100_000
    finally:
        raw.unpersist(blocking=True)
