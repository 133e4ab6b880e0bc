"""The ``babelq`` Spark data source: broker queues as batch and streaming DataFrames.

>>> from babelq.spark.datasource import register
>>> register(spark)
>>> df = spark.readStream.format("babelq").option("url", "sqlite:///q.db").option("queue", "payments").load()

Reads give ``body`` (the exact envelope bytes) plus reservation facts; writes publish a
``body`` column. Streaming reads are at-least-once with acks after the micro-batch commits
(see :mod:`babelq.spark.datasource.stream_reader`). Importing this module imports pyspark.
"""

from __future__ import annotations

from typing import Any

from babelq.spark.datasource.options import SourceOptions
from babelq.spark.datasource.rows import READ_SCHEMA
from babelq.spark.datasource.source import NAME, BabelqDataSource


def register(spark: Any) -> None:
    """Make ``format("babelq")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(BabelqDataSource)


__all__ = ["NAME", "READ_SCHEMA", "BabelqDataSource", "SourceOptions", "register"]
