"""Consuming envelopes in a DataFrame: typed columns plus the consumer verdict, on the JVM.

:func:`decode` reads a body column (binary or string) and adds the fields the core
:class:`~babelq.envelope.Envelope` exposes, with the same fallbacks (``""`` for a missing
string, ``0`` attempts, priority 5), plus ``accepted`` and ``reject_reason`` computed by the
rules of :mod:`babelq.envelope.verdict`, in the same order and, where the value can be shown,
with the same text.

The verdict needs exact JSON types (``"1"`` is not ``1``, ``1.0`` is not an integer, ``true``
is not a URN), which ``from_json`` loses, so the body is parsed into a Spark VARIANT and every
field's type is read with ``schema_of_variant``. Spark's JSON parser stops after the first
value and ignores what follows; the core codec calls trailing content poison. So the body is
parsed inside ``[<body>,"<nonce>"]`` with a random per-call nonce: only a body that is exactly
one JSON value leaves the nonce as the second element.

Known differences from the core codec (documented in docs/spark.md): Spark's variant parser
refuses duplicate object keys (the core keeps the last one) unless
``spark.sql.variant.allowDuplicateKeys`` is true; it reads ``1e400`` as infinity where the core
calls it poison; and it allows 1000 levels of nesting where the core allows 1024.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from babelq.spark.json_expr import json_double

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

_WS = " \t\n\r\x0b\x0c"
_JSON_WS = " \t\n\r"
_P = "__bq_"
_STRING = "STRING"
_LONG = "BIGINT"


def _lit(value: object) -> Column:
    from pyspark.sql import functions as sf

    return sf.lit(value)


def _h(name: str) -> Column:
    from pyspark.sql import functions as sf

    return sf.col(_P + name)


def _field(variant: Column, path: str) -> Column:
    from pyspark.sql import functions as sf

    return sf.try_variant_get(variant, path, "variant")


def _nonblank(text: Column) -> Column:
    from pyspark.sql import functions as sf

    return sf.coalesce(sf.length(sf.btrim(text, _lit(_WS))) > 0, _lit(False))


def _is_object(variant: Column) -> Column:
    from pyspark.sql import functions as sf

    return sf.coalesce(sf.try_variant_get(variant, "$", "struct<>").isNotNull(), _lit(False))


def _is_int(kind: Column) -> Column:
    """A JSON integer: BIGINT, or an integer too large for 64 bits (a scale-0 decimal of 19+ digits)."""
    from pyspark.sql import functions as sf

    return sf.coalesce((kind == _LONG) | kind.rlike(r"^DECIMAL\((19|[2-9]\d|\d{3,}),0\)$"), _lit(False))


def _python_type_name(kind: Column) -> Column:
    """The Python type name ``json.loads`` would give a value of variant type ``kind``."""
    from pyspark.sql import functions as sf

    return (
        sf.when(kind.isNull() | (kind == "VOID"), _lit("missing"))
        .when(kind == _STRING, _lit("str"))
        .when(kind == "BOOLEAN", _lit("bool"))
        .when(_is_int(kind), _lit("int"))
        .when(kind.startswith("OBJECT"), _lit("dict"))
        .when(kind.startswith("ARRAY"), _lit("list"))
        .otherwise(_lit("float"))
    )


def _python_repr(value: Column, kind: Column) -> Column:
    """Python's ``repr`` of a JSON value: exact for scalars and empty containers, approximate
    for strings needing escapes and for non-empty containers (``{...}``)."""
    from pyspark.sql import functions as sf

    return (
        sf.when(kind.isNull() | (kind == "VOID"), _lit("None"))
        .when(
            kind == "BOOLEAN", sf.when(sf.try_variant_get(value, "$", "boolean"), "True").otherwise("False")
        )
        .when(kind == _STRING, sf.concat(_lit("'"), sf.try_variant_get(value, "$", "string"), _lit("'")))
        .when(_is_int(kind), sf.try_variant_get(value, "$", "string"))
        .when(
            kind.startswith("OBJECT"), sf.when(sf.to_json(value) == "{}", _lit("{}")).otherwise(_lit("{...}"))
        )
        .when(
            kind.startswith("ARRAY"), sf.when(sf.to_json(value) == "[]", _lit("[]")).otherwise(_lit("[...]"))
        )
        .otherwise(json_double(sf.try_variant_get(value, "$", "double"), "meta.schema_version"))
    )


def _root_kind(first: Column) -> Column:
    from pyspark.sql import functions as sf

    return (
        sf.when(first == "[", _lit("an array"))
        .when(first == '"', _lit("a string"))
        .when(first.isin("t", "f"), _lit("a boolean"))
        .when(first == "n", _lit("null"))
        .otherwise(_lit("a number"))
    )


def _kind_fields() -> dict[str, str]:
    """Name -> path (from the document root) of every scalar whose JSON type matters."""
    paths = {
        "job": "$.job",
        "urn": "$.urn",
        "trace_id": "$.trace_id",
        "attempts": "$.attempts",
    }
    for key in ("id", "queue", "lang", "schema_version", "created_at", "correlation_id", "sharding_key"):
        paths[key] = f"$.meta.{key}"
    for key in ("deliver_at", "expire_at", "priority", "transaction_id"):
        paths[key] = f"$.meta.{key}"
    return paths


def decode(
    df: DataFrame,
    column: str = "body",
    *,
    data_schema: StructType | None = None,
    data_json: bool | None = None,
) -> DataFrame:
    """``df`` plus the decoded envelope columns and the consumer verdict.

    Added columns: ``urn trace_id id queue lang`` (strings, ``""`` when absent or not a
    string), ``schema_version created_at`` (longs or null), ``attempts`` (long, 0 when not an
    integer), ``extensions`` (struct of SPEC section 6 keys; priority 5 by default),
    ``data_json`` (the data object as JSON text, key order kept; on by default unless
    ``data_schema`` is given), ``data`` (a struct of ``data_schema``, when given),
    ``dead_letter`` (struct or null), ``accepted`` (bool) and ``reject_reason`` (null when
    accepted). Poison bodies (not UTF-8, not JSON, not an object) are rejected with a reason.
    Existing columns of those names are replaced.
    """
    from pyspark.sql import functions as sf
    from pyspark.sql import types as stypes

    from babelq.spark.schema import DEAD_LETTER_SCHEMA

    body_type = df.schema[column].dataType
    text = sf.col(column).cast("string") if isinstance(body_type, stypes.BinaryType) else sf.col(column)
    nonce = uuid.uuid4().hex
    out = df.withColumn(_P + "s", text)
    out = out.withColumn(_P + "utf8", sf.coalesce(sf.is_valid_utf8(_h("s")), _lit(False)))
    out = out.withColumn(
        _P + "wrapped", sf.try_parse_json(sf.concat(_lit("["), _h("s"), _lit(f',"{nonce}"]')))
    )
    out = out.withColumn(_P + "first", sf.left(sf.ltrim(_h("s"), _lit(_JSON_WS)), _lit(1)))
    out = out.withColumn(
        _P + "whole",
        _h("utf8") & sf.coalesce(sf.try_variant_get(_h("wrapped"), "$[1]", "string") == nonce, _lit(False)),
    )
    whole = _h("whole")
    out = out.withColumn(_P + "doc", sf.when(whole & (_h("first") == "{"), _field(_h("wrapped"), "$[0]")))
    doc = _h("doc")
    out = out.withColumn(_P + "meta", _field(doc, "$.meta"))

    paths = _kind_fields()
    kinds = sf.struct(
        *[sf.schema_of_variant(_field(doc, path)).alias(name) for name, path in paths.items()],
    )
    out = out.withColumn(_P + "kinds", kinds)
    k = _h("kinds")

    def typed(name: str, spark_type: str, kind: str) -> Column:
        return sf.when(k[name] == kind, sf.try_variant_get(doc, paths[name], spark_type))

    job = typed("job", "string", _STRING)
    alias = typed("urn", "string", _STRING)
    urn = sf.when(_nonblank(job), job).when(_nonblank(alias), alias).otherwise(_lit(""))
    out = out.withColumn("urn", urn)
    sv_ok = (k["schema_version"] == _LONG) & sf.coalesce(
        typed("schema_version", "long", _LONG) == 1, _lit(False)
    )
    trace = typed("trace_id", "string", _STRING)
    attempts_ok = _is_int(k["attempts"])
    reason = (
        sf.when(~_h("utf8"), _lit("body is not valid UTF-8"))
        .when(~whole, _lit("body is not JSON"))
        .when(
            _h("first") != "{",
            sf.concat(_lit("body is JSON but "), _root_kind(_h("first")), _lit(", not an object")),
        )
        .when(sf.col("urn") == "", _lit("no URN: neither 'job' nor 'urn' is a non-empty string"))
        .when(~_is_object(_h("meta")), _lit("meta is missing or not an object"))
        .when(
            ~sv_ok,
            sf.concat(
                _lit("meta.schema_version is "),
                _python_repr(_field(_h("meta"), "$.schema_version"), k["schema_version"]),
                _lit("; only 1 is supported"),
            ),
        )
        .when(~_is_object(_field(doc, "$.data")), _lit("data is missing or not an object"))
        .when(
            ~attempts_ok,
            sf.concat(_lit("attempts is "), _python_type_name(k["attempts"]), _lit(", not an integer")),
        )
        .when(~_nonblank(trace), _lit("trace_id is missing or not a non-empty string"))
    )
    out = out.withColumn("reject_reason", reason)
    out = out.withColumn("accepted", sf.col("reject_reason").isNull())

    priority = typed("priority", "long", _LONG)
    columns: dict[str, Column] = {
        "trace_id": sf.coalesce(trace, _lit("")),
        "id": sf.coalesce(typed("id", "string", _STRING), _lit("")),
        "queue": sf.coalesce(typed("queue", "string", _STRING), _lit("")),
        "lang": sf.coalesce(typed("lang", "string", _STRING), _lit("")),
        "schema_version": typed("schema_version", "long", _LONG),
        "created_at": typed("created_at", "long", _LONG),
        "attempts": sf.coalesce(
            sf.when(attempts_ok, sf.try_variant_get(doc, "$.attempts", "long")), _lit(0).cast("long")
        ),
        "extensions": sf.struct(
            typed("correlation_id", "string", _STRING).alias("correlation_id"),
            typed("sharding_key", "string", _STRING).alias("sharding_key"),
            typed("deliver_at", "long", _LONG).alias("deliver_at"),
            typed("expire_at", "long", _LONG).alias("expire_at"),
            sf.when(priority.between(1, 10), priority).otherwise(_lit(5).cast("long")).alias("priority"),
            typed("transaction_id", "string", _STRING).alias("transaction_id"),
        ),
    }
    want_json = data_json if data_json is not None else data_schema is None
    data_variant = _field(doc, "$.data")
    data_is_object = _is_object(data_variant)
    if want_json:
        columns["data_json"] = sf.when(data_is_object, sf.get_json_object(_h("s"), "$.data"))
    if data_schema is not None:
        columns["data"] = sf.when(
            data_is_object, sf.try_variant_get(data_variant, "$", data_schema.simpleString())
        )
    dead_letter = _field(doc, "$.dead_letter")
    columns["dead_letter"] = sf.when(
        _is_object(dead_letter), sf.try_variant_get(dead_letter, "$", DEAD_LETTER_SCHEMA.simpleString())
    )
    out = out.withColumns(columns)
    ordered = [c for c in df.columns if c not in _added_names(columns)] + [
        "urn",
        *columns,
        "accepted",
        "reject_reason",
    ]
    return out.select(*ordered)


def _added_names(columns: dict[str, Column]) -> set[str]:
    return {"urn", "accepted", "reject_reason", *columns}
