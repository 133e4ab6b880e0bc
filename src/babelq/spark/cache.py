"""Caching a DataFrame that one job reads a few times: uncompressed columnar batches.

Spark's in-memory cache compresses every column by default, and choosing a compression costs a
pass over each column of each batch (``DictionaryEncoding``'s statistics with a hash map per
column). For a DataFrame cached only to be read by the next two or three actions of the same
job (ingest: the counts, the rejects, the publish), that CPU is spent on the critical path and
saved nowhere. :func:`cache_uncompressed` caches without it. The setting is read when the cache
is declared, so it applies to this DataFrame only and the session's setting is restored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"


def cache_uncompressed(df: DataFrame) -> DataFrame:
    """``df.persist()`` (memory, then disk) with uncompressed columnar batches."""
    conf = df.sparkSession.conf
    before = conf.get(_COMPRESSED, None)
    conf.set(_COMPRESSED, "false")
    try:
        return df.persist()
    finally:
        if before is None:
            conf.unset(_COMPRESSED)
        else:
            conf.set(_COMPRESSED, before)
