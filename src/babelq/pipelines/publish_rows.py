"""A bulk file of any rows as one DataFrame ``babelq publish`` can check and publish.

Whatever the format, :func:`read_rows` gives a ``data`` struct (the object each row publishes)
plus ``row_no`` (the read order), ``csv_record`` (the text of a CSV record of the wrong field
count), ``json_line`` (a JSON line as written), ``shape_error`` (a line that is not a JSON object)
and ``type_error`` (the first member whose value is not its declared type, named as
``$.qty: ...``); a CSV file's rows also have ``cells``, the record's text cells as written.
How the values get their types:

* CSV: every cell is text, an empty cell is no value (left out of the object). A member the
  schema declares ``integer`` (digits with an optional sign, 64-bit), ``number`` (a decimal or
  exponent number, read as a double) or ``boolean`` (``true``/``false``, any case) is read as
  that type after trimming spaces; a cell that does not read as it is a ``type_error``. A cell
  of a ``string`` member is kept as written.
* JSON lines: each line is one object and keeps its JSON types. The members' Spark types are
  inferred from the whole file (a member that is a number on one line and text on another is
  text), but a member the schema declares a scalar type has that type, and a line whose value
  is of another JSON type is a ``type_error`` (never converted).
* Parquet: the columns as stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from babelq.errors import ConfigurationError
from babelq.pipelines.bulk_files import CSV_RECORD, read_csv
from babelq.spark.schema_check import key_segment

FORMATS = ("csv", "jsonl", "parquet")
#: column names the rows of a file may not use: the rejects carry these beside the data
RESERVED = frozenset({"row_no", "csv_record", "json_line", "reasons", "reject_reason", "reject_error",
                      "record_error", CSV_RECORD})
#: how much of a bad value an error shows
_SHOWN = 60


def format_of(source: str | Path, given: str | None = None) -> str:
    """``given``, else the format the name says: ``.jsonl``/``.ndjson``/``.json`` is JSON lines,
    ``.parquet`` or a directory is Parquet, anything else CSV."""
    if given is not None:
        if given not in FORMATS:
            raise ConfigurationError(f"--format: {given!r} is not one of {', '.join(FORMATS)}")
        return given
    path = Path(source)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix == ".parquet" or path.is_dir():
        return "parquet"
    return "csv"


def read_rows(spark: Any, source: str | Path, fmt: str, declared: Mapping[str, str]) -> Any:
    """The rows of ``source`` (read as ``fmt``) as described in the module docstring; ``declared``
    maps members to the JSON type the schema gives them
    (:func:`~babelq.pipelines.publish_schema.declared_types`)."""
    from pyspark.sql import functions as sf

    if fmt == "csv":
        return _csv_rows(spark, str(source), declared)
    if fmt == "jsonl":
        return _json_rows(spark, str(source), declared)
    df = spark.read.parquet(str(source))
    return _framed(df, str(source), [sf.col(f"`{n}`") for n in df.columns])


def _check_names(names: list[str], source: str) -> None:
    clash = sorted(set(names) & RESERVED)
    if clash:
        raise ConfigurationError(
            f"{source}: the column name(s) {', '.join(clash)} are reserved for the rejects' own columns")
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ConfigurationError(f"{source}: the column name(s) {', '.join(twice)} appear twice")


def _framed(df: Any, source: str, data_cols: list[Any], *, csv_record: Any = None, json_line: Any = None,
            type_error: Any = None, shape_error: Any = None, cells: Any = None) -> Any:
    """``df`` as the columns of :func:`read_rows`, ``data_cols`` making the data struct."""
    from pyspark.sql import functions as sf

    _check_names([c for c in df.columns if c not in (CSV_RECORD, "_line")], source)
    none = sf.lit(None).cast("string")
    data = sf.struct(*data_cols)
    extra = [] if cells is None else [cells.alias("cells")]
    out = df.select(
        data.alias("data"),
        *extra,
        (csv_record if csv_record is not None else none).alias("csv_record"),
        (json_line if json_line is not None else none).alias("json_line"),
        (shape_error if shape_error is not None else none).alias("shape_error"),
        (type_error if type_error is not None else none).alias("type_error"),
    )
    return out.withColumn("row_no", sf.monotonically_increasing_id())


def _shown(value: Any) -> Any:
    """A value in an error: at most :data:`_SHOWN` characters."""
    from pyspark.sql import functions as sf

    return sf.when(sf.length(value) > _SHOWN, sf.concat(sf.substring(value, 1, _SHOWN - 1), sf.lit("…"))
                   ).otherwise(value)


_NUMBER = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"


def cell_value(name: str, kind: str) -> tuple[Any, Any]:
    """(the value, the error or null) of the text cell ``name`` read as the JSON type ``kind``."""
    from pyspark.sql import functions as sf

    raw = sf.col(f"`{name}`")
    text = sf.trim(raw)
    if kind == "integer":
        value = sf.when(text.rlike(r"^[+-]?[0-9]{1,19}$"), text.try_cast("bigint"))
        what = "an integer (64-bit)"
    elif kind == "number":
        number = sf.when(text.rlike(_NUMBER), text.try_cast("double"))
        value = sf.when(sf.abs(number) < float("inf"), number)
        what = "a number"
    elif kind == "boolean":
        value = sf.when(sf.lower(text).isin("true", "false"), sf.lower(text) == "true")
        what = "a boolean (true or false)"
    else:
        return raw, None
    # an empty cell is no value, never a bad one
    error = sf.when(raw.isNotNull() & value.isNull(), sf.concat(
        sf.lit(f"${key_segment(name)}: the cell \""), _shown(raw), sf.lit(f"\" is not {what}")))
    return value.alias(name), error


def _csv_rows(spark: Any, source: str, declared: Mapping[str, str]) -> Any:
    from pyspark.sql import functions as sf

    bulk = read_csv(spark, source)
    names = [c for c in bulk.columns if c != CSV_RECORD]
    nested = sorted(n for n in names if declared.get(n) in ("object", "array"))
    if nested:
        raise ConfigurationError(
            f"{source}: the schema declares {', '.join(nested)} an object or array, which a CSV cell cannot "
            "hold; publish such data from JSON lines or Parquet")
    cells = [cell_value(n, declared.get(n, "string")) for n in names]
    errors = [e for _, e in cells if e is not None]
    record = sf.col(CSV_RECORD) if CSV_RECORD in bulk.columns else None
    # the cells as written go with a rejected row, whatever its values were read as
    written = sf.struct(*[sf.col(f"`{n}`") for n in names])
    return _framed(bulk, source, [v for v, _ in cells], csv_record=record, cells=written,
                   type_error=sf.coalesce(*errors) if errors else None)


#: the JSON types (a member's kind) a declared type takes, by the names schema_of_variant gives
_KINDS = {
    "integer": ("TINYINT", "SMALLINT", "INT", "BIGINT"),
    "number": ("TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL"),
    "boolean": ("BOOLEAN",),
    "string": ("STRING",),
}

def _spark_type(kind: str) -> Any:
    """The Spark type of a member declared ``kind`` (one of :data:`_KINDS`)."""
    from pyspark.sql import types as stypes

    types = {"integer": stypes.LongType, "number": stypes.DoubleType, "boolean": stypes.BooleanType,
             "string": stypes.StringType}
    return types[kind]()


def _json_rows(spark: Any, source: str, declared: Mapping[str, str]) -> Any:
    from pyspark.sql import functions as sf
    from pyspark.sql.types import StructField, StructType

    inferred = spark.read.json(source).schema
    fields = {f.name: f for f in inferred.fields if f.name != "_corrupt_record"}
    typed = {n: k for n, k in declared.items() if k in _KINDS}
    for name in typed:
        if "'" in name or "\\" in name:
            raise ConfigurationError(f"--schema: the member name {name!r} holds a quote or a backslash, "
                                     "which the JSON lines type check cannot name")
    for name, kind in typed.items():
        fields[name] = StructField(name, _spark_type(kind))
    struct = StructType(list(fields.values()))
    _check_names(list(fields), source)
    lines = spark.read.text(source).withColumnRenamed("value", "_line")
    lines = lines.filter(sf.length(sf.trim("_line")) > 0)
    variant = sf.expr("try_parse_json(_line)")
    top = sf.schema_of_variant(variant)
    shape = sf.when(variant.isNull(), sf.lit("not JSON")).when(
        ~top.startswith("OBJECT"), sf.lit("not a JSON object"))
    errors = []
    for name, kind in typed.items():
        member = sf.variant_get(variant, f"$['{name}']", "variant")
        shape_of = sf.schema_of_variant(member)
        found = sf.regexp_extract(shape_of, r"^[A-Z]+", 0)
        fits = member.isNull() | found.isin("VOID", *_KINDS[kind])
        # an integer too long for 64 bits is a whole decimal to the parser: say so, not "not an integer"
        too_long = shape_of.endswith(",0)") if kind == "integer" else sf.lit(False)
        problem = sf.when(too_long, sf.lit(" is outside the 64-bit integer range")).otherwise(
            sf.lit(f" is not of type '{kind}'"))
        errors.append(sf.when(~fits, sf.concat(sf.lit(f"${key_segment(name)}: "), _shown(sf.to_json(member)),
                                               problem)))
    parsed = sf.from_json(sf.col("_line"), struct)
    data_cols = [parsed.getField(f.name).alias(f.name) for f in struct.fields]
    df = lines.select("_line")
    type_error = sf.when(shape.isNull(), sf.coalesce(*errors)) if errors else None
    return _framed(df, source, data_cols, json_line=sf.col("_line"), type_error=type_error, shape_error=shape)
