"""Producing envelopes from DataFrame rows, as one Spark SQL expression per row (no Python UDF).

:func:`encode` adds a binary ``body`` column whose bytes equal what the core producer
(``babelq.envelope.make(...).encode()``) writes for the same URN, ids, times and data: the
envelope frame is assembled with ``concat`` around the canonical JSON of ``data``, written by
babelq's JVM writer (:func:`babelq.spark.jvm.data_json`) where the jar is loaded, else built by
:mod:`babelq.spark.json_expr`. The producer rules that depend on row values (non-empty URN,
queue and ids, epoch-ms times >= 0, priority 1..10, no NaN) fail the Spark job with an error
naming the field, as :func:`~babelq.envelope.make` raises; rules that depend only on types
are checked when the expression is built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from babelq.envelope.constants import LANG, SCHEMA_VERSION
from babelq.envelope.urn import check_urn
from babelq.errors import ConfigurationError, EnvelopeError, URNError
from babelq.spark.json_expr import check_json_type, json_object, json_string, quote_key

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType

_WS = " \t\n\r\x0b\x0c"
_STRING_EXTENSIONS = ("correlation_id", "sharding_key")
_MS_EXTENSIONS = ("deliver_at", "expire_at")


def _lit(value: object) -> Column:
    from pyspark.sql import functions as sf

    return sf.lit(value)


def _fail_when(bad: Column, message: str, value: Column) -> Column:
    from pyspark.sql import functions as sf

    return sf.when(bad, sf.raise_error(_lit(message))).otherwise(value)


def _blank(col: Column) -> Column:
    from pyspark.sql import functions as sf

    return col.isNull() | (sf.length(sf.btrim(col, _lit(_WS))) == 0)


def _static_string(path: str, value: str) -> str:
    if type(value) is not str or not value:
        raise EnvelopeError(path, f"must be a non-empty string, got {value!r}")
    return quote_key(value)


#: a string column -> its JSON string token (null stays null)
Quote = Callable[["Column"], "Column"]


def _string_token(path: str, value: str | Column, quote: Quote, *, strip: bool = False) -> Column:
    """The JSON token of a required string field; a blank value fails the job."""
    if isinstance(value, str):
        if strip and not value.strip(_WS):
            raise EnvelopeError(path, f"must be a non-empty string, got {value!r}")
        return _lit(_static_string(path, value))
    from pyspark.sql import functions as sf

    text = value.cast("string")
    bad = _blank(text) if strip else (text.isNull() | (sf.length(text) == 0))
    return _fail_when(bad, f"{path}: must be a non-empty string", quote(text))


def _uuid_token(col: Column) -> Column:
    """The JSON token of a column encode filled with ``uuid()`` itself.

    Such a value is never null or empty and holds only hex digits and dashes, so the checks and
    the escaping a given column needs (a regex test and two replaces per row) are left out.
    """
    from pyspark.sql import functions as sf

    return sf.concat(_lit('"'), col, _lit('"'))


def _ms(col: Column, data_type: DataType) -> Column:
    from pyspark.sql import functions as sf
    from pyspark.sql import types as stypes

    if isinstance(data_type, stypes.TimestampType | stypes.TimestampNTZType):
        return sf.unix_millis(col)
    if isinstance(data_type, stypes.ByteType | stypes.ShortType | stypes.IntegerType | stypes.LongType):
        return col.cast("long")
    raise EnvelopeError("meta", f"epoch milliseconds must be an integer or timestamp column, got {data_type}")


def encode(
    df: DataFrame,
    *,
    urn: str | Column,
    data: Column | list[str],
    queue: str | Column,
    trace_id: Column | None = None,
    correlation_id: Column | None = None,
    sharding_key: Column | None = None,
    deliver_at: Column | None = None,
    expire_at: Column | None = None,
    priority: Column | None = None,
    transaction_id: Column | None = None,
    id: Column | None = None,
    created_at: Column | None = None,
    strict: bool = False,
    body_column: str = "body",
    omit_null: Sequence[str] = (),
    jvm: bool | None = None,
) -> DataFrame:
    """``df`` plus ``id``, ``trace_id`` and a binary ``body`` column holding the envelope.

    ``data`` is a struct column or a list of column names (their values become the data
    object, in that order). ``trace_id`` continues an inbound trace (else ``uuid()``); ``id``
    and ``created_at`` exist for replays and tests (else ``uuid()`` and the query's current
    time in ms). Optional extension columns that are null for a row are left out of that row's
    ``meta``, as ``make`` leaves out ``None`` keywords. Existing ``id``/``trace_id``/``body``
    columns are replaced. Top-level ``data`` fields named in ``omit_null`` are left out of the
    data object when they are null (as ``make`` gets no such key), instead of written as ``null``.

    The data object is written by babelq's JVM JSON writer (:func:`babelq.spark.jvm.data_json`,
    one pass over Spark's internal row) when the session has the jar (``jvm=None``; ``True``
    requires it), else by Spark SQL string functions (``jvm=False`` forces those; with the jar's
    float repr for doubles if only that loads): the same bytes and errors either way.
    """
    from pyspark.sql import functions as sf
    from pyspark.sql import types as stypes

    if isinstance(urn, str):
        if not urn.strip():
            raise URNError("job", f"the URN must be a non-empty string, got {urn!r}")
        check_urn(urn, strict=strict)
    data_col = sf.struct(*[sf.col(name) for name in data]) if isinstance(data, list) else data
    optional = {
        "created_at": created_at,
        "deliver_at": deliver_at,
        "expire_at": expire_at,
        "priority": priority,
    }
    given = {name: col for name, col in optional.items() if col is not None}
    probe = df.select(data_col.alias("data"), *[col.alias(name) for name, col in given.items()]).schema
    types = {field.name: field.dataType for field in probe.fields}
    data_type = types["data"]
    if not isinstance(data_type, stypes.StructType):
        raise EnvelopeError(
            "data", f"must be a struct column (a JSON object), got {data_type.simpleString()}"
        )
    data_json = _data_json(df, data_col, data_type, frozenset(omit_null), jvm)
    quote = _quote(df, jvm)

    out = df.withColumn("id", sf.expr("uuid()") if id is None else id.cast("string"))
    out = out.withColumn("trace_id", sf.expr("uuid()") if trace_id is None else trace_id.cast("string"))
    if created_at is None:
        created = sf.unix_millis(sf.current_timestamp()).cast("string")
    else:
        created_ms = _ms(created_at, types["created_at"])
        created = _fail_when(
            created_ms.isNull() | (created_ms < 0),
            "meta.created_at: must be Unix epoch milliseconds (int >= 0)",
            created_ms.cast("string"),
        )

    parts: list[Column] = [
        _lit('{"job":'),
        _string_token("job", urn, quote, strip=True),
        _lit(',"trace_id":'),
        (
            _uuid_token(sf.col("trace_id"))
            if trace_id is None
            else _string_token("trace_id", sf.col("trace_id"), quote)
        ),
        _lit(',"data":'),
        data_json,
        _lit(',"meta":{"id":'),
        _uuid_token(sf.col("id")) if id is None else _string_token("meta.id", sf.col("id"), quote),
        _lit(',"queue":'),
        _string_token("meta.queue", queue, quote),
        _lit(f',"lang":"{LANG}","schema_version":{SCHEMA_VERSION},"created_at":'),
        created,
    ]
    parts.extend(
        _extensions(
            correlation_id=correlation_id,
            sharding_key=sharding_key,
            deliver_at=deliver_at,
            expire_at=expire_at,
            priority=priority,
            transaction_id=transaction_id,
            types=types,
            quote=quote,
        )
    )
    parts.append(_lit('},"attempts":0}'))
    return out.withColumn(body_column, sf.concat(*parts).cast("binary"))


def _quote(df: DataFrame, jvm: bool | None) -> Quote:
    """How string columns become JSON string tokens: babelq's JVM writer where it loads, else SQL."""
    from pyspark.sql import functions as sf

    if jvm is not False:
        from babelq.spark.jvm import json_string as jvm_json_string

        name = jvm_json_string(df.sparkSession)
        if name is not None:
            return lambda col: sf.call_function(name, col)
    return json_string


def _data_json(
    df: DataFrame, data_col: Column, data_type: StructType, omit_null: frozenset[str], jvm: bool | None
) -> Column:
    """The canonical JSON text of ``data`` (``{}`` when the struct is null).

    With babelq's jar loaded, one call of its JSON writer (:func:`babelq.spark.jvm.data_json`),
    which walks Spark's internal row once; else Spark SQL string functions
    (:func:`~babelq.spark.json_expr.json_object`), with the jar's float repr for doubles when
    only that loads. Same bytes and same errors either way.
    """
    from pyspark.sql import functions as sf

    if jvm is False:
        return sf.when(data_col.isNull(), _lit("{}")).otherwise(
            json_object(data_col, data_type, "data", omit_null=omit_null)
        )
    from babelq.spark.jvm import data_json, float_repr, jar_path

    spark = df.sparkSession
    unknown = sorted(omit_null - set(data_type.fieldNames()))
    if unknown:
        raise EnvelopeError("data", f"omit_null names fields the struct does not have: {unknown}")
    check_json_type(data_type, "data")
    omit = frozenset(i for i, name in enumerate(data_type.fieldNames()) if name in omit_null)
    writer = data_json(spark, omit)
    if writer is not None:
        return sf.call_function(writer, data_col)
    float_function = float_repr(spark)
    if float_function is None and jvm:
        raise ConfigurationError(
            "encode(jvm=True): babelq's JVM helpers are not on this session's classpath; "
            f"add {jar_path()} to spark.jars (babelq.spark.session.get_session does)"
        )
    return sf.when(data_col.isNull(), _lit("{}")).otherwise(
        json_object(data_col, data_type, "data", omit_null=omit_null, jvm=float_function)
    )


def _optional_member(key: str, token: Column) -> Column:
    """``,"key":token`` or the empty string when the token is null."""
    from pyspark.sql import functions as sf

    return sf.coalesce(sf.concat(_lit(f',"{key}":'), token), _lit(""))


def _extensions(
    *,
    correlation_id: Column | None,
    sharding_key: Column | None,
    deliver_at: Column | None,
    expire_at: Column | None,
    priority: Column | None,
    transaction_id: Column | None,
    types: dict[str, DataType],
    quote: Quote,
) -> list[Column]:
    """The docs/standard.md §6 meta members, in the order ``make`` writes them."""
    from pyspark.sql import functions as sf

    members: list[Column] = []
    strings = {"correlation_id": correlation_id, "sharding_key": sharding_key}
    for key in _STRING_EXTENSIONS:
        col = strings[key]
        if col is not None:
            text = col.cast("string")
            token = _fail_when(
                sf.length(text) == 0, f"meta.{key}: must be a non-empty string", quote(text)
            )
            members.append(_optional_member(key, token))
    times = {"deliver_at": deliver_at, "expire_at": expire_at}
    for key in _MS_EXTENSIONS:
        col = times[key]
        if col is not None:
            ms = _ms(col, types[key])
            token = _fail_when(
                ms < 0, f"meta.{key}: must be Unix epoch milliseconds (int >= 0)", ms.cast("string")
            )
            members.append(_optional_member(key, token))
    if priority is not None:
        from pyspark.sql import types as stypes

        if not isinstance(
            types["priority"], stypes.ByteType | stypes.ShortType | stypes.IntegerType | stypes.LongType
        ):
            raise EnvelopeError("meta.priority", f"must be an integer column, got {types['priority']}")
        level = priority.cast("long")
        token = _fail_when(
            (level < 1) | (level > 10), "meta.priority: must be an integer from 1 to 10", level.cast("string")
        )
        members.append(_optional_member("priority", token))
    if transaction_id is not None:
        text = transaction_id.cast("string")
        token = _fail_when(
            sf.length(text) == 0, "meta.transaction_id: must be a non-empty string", quote(text)
        )
        members.append(_optional_member("transaction_id", token))
    return members
