"""The ``babelq`` Spark data source: broker queues as batch and streaming DataFrames.

>>> from babelq.spark.datasource import register
>>> register(spark)
>>> df = spark.readStream.format("babelq").option("url", "sqlite:///q.db").option("queue", "payments").load()

Reads give ``body`` (the exact envelope bytes) plus reservation facts; writes publish a
``body`` column. Streaming reads are at-least-once with acks after the micro-batch commits
(see :mod:`babelq.spark.datasource.stream_reader`). Importing this module imports pyspark.
"""

from __future__ import annotations

import threading
from typing import Any

from babelq.spark.datasource.options import SourceOptions
from babelq.spark.datasource.rows import READ_SCHEMA
from babelq.spark.datasource.source import NAME, BabelqDataSource

#: one registration at a time in this process (see :func:`register`)
_REGISTERING = threading.Lock()


def register(spark: Any) -> None:
    """Make ``format("babelq")`` available in ``spark`` (idempotent, and safe from several threads).

    Spark checks a new Python data source's name in two steps (is it registered? does any data
    source answer to it?) and refuses it as "already exists" when another thread's registration of
    the same name lands in between: two threads registering at once (the demo prepares settle
    while ingest runs) could fail one of them. Registrations here take turns."""
    with _REGISTERING:
        spark.dataSource.register(BabelqDataSource)


__all__ = ["NAME", "READ_SCHEMA", "BabelqDataSource", "SourceOptions", "register"]
