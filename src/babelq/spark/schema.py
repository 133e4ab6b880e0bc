"""The envelope as Spark schemas (docs/standard.md §2, §5 and §6).

``ENVELOPE_SCHEMA`` is the whole message with ``data`` as JSON text; :func:`envelope_schema`
gives the same shape with a caller's struct for ``data``. ``DECODED_SCHEMA`` is what
:func:`babelq.spark.decode.decode` adds to a DataFrame. Building the schemas imports pyspark,
so they are created on first use (module attribute access), keeping ``import babelq.spark``
free of pyspark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType


def _dead_letter_schema() -> StructType:
    from pyspark.sql import types as stypes

    return stypes.StructType(
        [
            stypes.StructField("reason", stypes.StringType()),
            stypes.StructField("error", stypes.StringType()),
            stypes.StructField("exception", stypes.StringType()),
            stypes.StructField("failed_at", stypes.LongType()),
            stypes.StructField("original_queue", stypes.StringType()),
            stypes.StructField("attempts", stypes.LongType()),
            stypes.StructField("lang", stypes.StringType()),
            stypes.StructField("cause", stypes.StringType()),
        ]
    )


def _extensions_schema() -> StructType:
    from pyspark.sql import types as stypes

    return stypes.StructType(
        [
            stypes.StructField("correlation_id", stypes.StringType()),
            stypes.StructField("sharding_key", stypes.StringType()),
            stypes.StructField("deliver_at", stypes.LongType()),
            stypes.StructField("expire_at", stypes.LongType()),
            stypes.StructField("priority", stypes.LongType()),
            stypes.StructField("transaction_id", stypes.StringType()),
        ]
    )


def _meta_schema() -> StructType:
    from pyspark.sql import types as stypes

    core = [
        stypes.StructField("id", stypes.StringType()),
        stypes.StructField("queue", stypes.StringType()),
        stypes.StructField("lang", stypes.StringType()),
        stypes.StructField("schema_version", stypes.LongType()),
        stypes.StructField("created_at", stypes.LongType()),
    ]
    return stypes.StructType(core + list(_extensions_schema().fields))


def envelope_schema(data_type: DataType | None = None) -> StructType:
    """The envelope with ``data`` typed as ``data_type`` (default: JSON text)."""
    from pyspark.sql import types as stypes

    return stypes.StructType(
        [
            stypes.StructField("job", stypes.StringType()),
            stypes.StructField("trace_id", stypes.StringType()),
            stypes.StructField("data", data_type if data_type is not None else stypes.StringType()),
            stypes.StructField("meta", _meta_schema()),
            stypes.StructField("attempts", stypes.LongType()),
            stypes.StructField("dead_letter", _dead_letter_schema()),
        ]
    )


def _decoded_schema() -> StructType:
    from pyspark.sql import types as stypes

    return stypes.StructType(
        [
            stypes.StructField("urn", stypes.StringType(), False),
            stypes.StructField("trace_id", stypes.StringType(), False),
            stypes.StructField("id", stypes.StringType(), False),
            stypes.StructField("queue", stypes.StringType(), False),
            stypes.StructField("lang", stypes.StringType(), False),
            stypes.StructField("schema_version", stypes.LongType()),
            stypes.StructField("created_at", stypes.LongType()),
            stypes.StructField("attempts", stypes.LongType(), False),
            stypes.StructField("extensions", _extensions_schema()),
            stypes.StructField("data_json", stypes.StringType()),
            stypes.StructField("dead_letter", _dead_letter_schema()),
            stypes.StructField("accepted", stypes.BooleanType(), False),
            stypes.StructField("reject_reason", stypes.StringType()),
        ]
    )


_BUILDERS = {
    "DEAD_LETTER_SCHEMA": _dead_letter_schema,
    "EXTENSIONS_SCHEMA": _extensions_schema,
    "META_SCHEMA": _meta_schema,
    "ENVELOPE_SCHEMA": envelope_schema,
    "DECODED_SCHEMA": _decoded_schema,
}


def __getattr__(name: str) -> Any:
    builder = _BUILDERS.get(name)
    if builder is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return builder()
