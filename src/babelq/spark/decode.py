"""Consuming envelopes in a DataFrame: typed columns plus the consumer verdict, on the JVM.

:func:`decode` reads a body column (binary or string) and adds the fields the core
:class:`~babelq.envelope.Envelope` exposes, with the same fallbacks (``""`` for a missing
string, ``0`` attempts, priority 5), plus ``accepted`` and ``reject_reason`` computed by the
rules of :mod:`babelq.envelope.verdict`, in the same order and, where the value can be shown,
with the same text.

The verdict needs exact JSON types (``"1"`` is not ``1``, ``1.0`` is not an integer, ``true``
is not a URN) and must call trailing content poison; Spark's own ``from_json`` loses the first
and ignores the second. So every row takes one of two paths, with one answer:

* **Fast path** (almost every real row): babelq's JVM scanner (:mod:`babelq.spark.jvm`), a
  Java UDF that reads the body once with the core codec's JSON rules and returns an accepted
  envelope's typed fields (and ``data`` as text, or typed into ``data_schema`` in the same
  pass). Where the jar is not loaded, a Spark SQL fast path takes its place: one ``from_json``
  of ``{"<items>":[<body>,{"<tail>":1}]}`` (random per-call keys) with a corrupt-record column,
  integer fields read as ``bigint`` and string fields as VARIANT; it takes a row only when the
  array holds exactly the body and the sentinel, the row is valid UTF-8, none of the spellings
  where Spark's reader and Python's ``json`` could disagree is present, and the envelope is
  accepted.
* **Exact path** (every other row: poison, rejected, odd): the body is parsed into a VARIANT
  inside ``[<body>,"<nonce>"]`` with a random nonce (only a body that is exactly one JSON value
  leaves the nonce as the second element) and every field's JSON type is read with
  ``schema_of_variant``, which gives the core's reasons in the core's order.

Everything is one projection that Spark compiles with whole-stage code generation: no
``from_json`` or ``reflect`` (neither has generated code) is in it when the scanner is used.
``fast=False`` forces the exact path and ``scanner=False`` the Spark SQL fast path; the tests
compare all three.

The core's limits hold on every path: a body nested deeper than
:data:`~babelq.envelope.constants.MAX_DEPTH` levels is poison (the scanner measures it as the
core does; the SQL paths let Spark's own parser refuse it, the body padded so that its 1000-level
limit falls exactly there), and the members the standard types as int64 must fit one.

Known differences from the core codec (documented in docs/spark.md): on the exact path Spark's
variant parser refuses duplicate object keys (the core keeps the last one) unless
``spark.sql.variant.allowDuplicateKeys`` is true (babelq's own sessions set it; :func:`decode`
warns when it is off); and it reads ``1e400`` as infinity where the core calls it poison.
"""

from __future__ import annotations

import uuid
import warnings
from typing import TYPE_CHECKING

from babelq.envelope.constants import ASCII_WHITESPACE, CORE_META_KEYS, EXTENSION_META_KEYS, MAX_DEPTH
from babelq.envelope.limits import SHALLOW_JSON_BYTES
from babelq.envelope.verdict import JOB_NOT_A_URN, NO_URN
from babelq.spark.json_expr import json_double
from babelq.spark.session import DUPLICATE_KEYS_CONF

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

_WS = ASCII_WHITESPACE
_JSON_WS = " \t\n\r"

#: The deepest nesting Spark's JSON parsers read (Jackson's default ``maxNestingDepth`` in the
#: Spark 4 line; ``tests/spark`` checks it against the session).
SPARK_JSON_MAX_DEPTH = 1000
#: Levels of ``[...]`` put around a body so that Spark's parser refuses exactly the bodies nested
#: deeper than the envelope's limit.
_DEPTH_PAD = SPARK_JSON_MAX_DEPTH - MAX_DEPTH
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
    """Not null and not only whitespace (the core's ``str.strip`` set); the common case - a
    first character that is not whitespace - is settled without trimming."""
    from pyspark.sql import functions as sf

    starts_blank = text.startswith(_WS[0])
    for char in _WS[1:]:
        starts_blank = starts_blank | text.startswith(char)
    trimmed = sf.length(sf.btrim(text, _lit(_WS))) > 0
    return sf.coalesce(sf.when(~starts_blank, sf.length(text) > 0).otherwise(trimmed), _lit(False))


def _is_object(variant: Column) -> Column:
    from pyspark.sql import functions as sf

    return sf.coalesce(sf.try_variant_get(variant, "$", "struct<>").isNotNull(), _lit(False))


def _is_int(kind: Column, raw: Column | None = None) -> Column:
    """A JSON integer: BIGINT, or an integer too large for 64 bits (a scale-0 decimal of 19+
    digits, or, beyond a decimal's 38 digits, a double whose text ``raw`` is an integer literal)."""
    from pyspark.sql import functions as sf

    wide = (kind == _LONG) | kind.rlike(r"^DECIMAL\((19|[2-9]\d|\d{3,}),0\)$")
    if raw is not None:
        wide = wide | ((kind == "DOUBLE") & (sf.length(raw) > 38) & raw.rlike(r"^-?[0-9]+$"))
    return sf.coalesce(wide, _lit(False))


def _python_type_name(kind: Column, raw: Column | None = None) -> Column:
    """The Python type name ``json.loads`` would give a value of variant type ``kind`` (``raw``,
    the value's JSON text, tells an integer of 39+ digits from a float)."""
    from pyspark.sql import functions as sf

    return (
        sf.when(kind.isNull() | (kind == "VOID"), _lit("missing"))
        .when(kind == _STRING, _lit("str"))
        .when(kind == "BOOLEAN", _lit("bool"))
        .when(_is_int(kind, raw), _lit("int"))
        .when(kind.startswith("OBJECT"), _lit("dict"))
        .when(kind.startswith("ARRAY"), _lit("list"))
        .otherwise(_lit("float"))
    )


def _python_repr(value: Column, kind: Column, float_function: str | None) -> Column:
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
        .otherwise(
            json_double(sf.try_variant_get(value, "$", "double"), "meta.schema_version", jvm=float_function)
        )
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


_LONG_META = ("schema_version", "created_at", "deliver_at", "expire_at", "priority")

#: Envelope fields the verdict or an output column reads: name -> (path, JSON type wanted).
_FIELDS: dict[str, tuple[str, str]] = {
    "job": ("$.job", _STRING),
    "urn": ("$.urn", _STRING),
    "trace_id": ("$.trace_id", _STRING),
    "attempts": ("$.attempts", _LONG),
    **{
        key: (f"$.meta.{key}", _LONG if key in _LONG_META else _STRING)
        for key in (*CORE_META_KEYS, *EXTENSION_META_KEYS)
    },
}


def _absent(kind: Column) -> Column:
    """The member is missing or JSON null."""
    return kind.isNull() | (kind == "VOID")


def _int64_reason(label: str, kind: Column, raw: Column) -> tuple[Column, Column]:
    """(broken, reason) of the int64 rule on a member present and not null, as the core words it."""
    from pyspark.sql import functions as sf

    reason = sf.when(_is_int(kind, raw), _lit(f"{label} is an integer outside signed 64-bit")).otherwise(
        sf.concat(_lit(f"{label} is "), _python_type_name(kind, raw), _lit(", not an integer"))
    )
    return sf.coalesce(~_absent(kind) & (kind != _LONG), _lit(False)), reason


def _maybe_deep(text: Column) -> Column:
    """Cheap and sound for JSON: long enough, and enough opening brackets, to nest beyond the limit.

    A CASE rather than an AND: Spark's subexpression elimination hoists what a condition holds
    out of the projection and computes it for every row, but leaves a branch's value to the rows
    that reach it, so the brackets are counted only in bodies over 1,025 characters.
    """
    from pyspark.sql import functions as sf

    openers = sf.length(text) - sf.length(sf.translate(text, "[{", ""))
    return sf.coalesce(sf.when(sf.length(text) > SHALLOW_JSON_BYTES, openers > MAX_DEPTH), _lit(False))


def _too_deep(text: Column) -> Column:
    """True when ``text`` is not JSON within the envelope's depth: padded with ``_DEPTH_PAD`` levels,
    Spark's parser (which stops at ``SPARK_JSON_MAX_DEPTH``) refuses exactly the deeper bodies."""
    from pyspark.sql import functions as sf

    padded = sf.concat(_lit("[" * _DEPTH_PAD), text, _lit("]" * _DEPTH_PAD))
    return sf.try_parse_json(padded).isNull()


def _fast_envelope_type(data_type: str, dead_letter_type: str, tail: str) -> str:
    """The fast path's envelope type (``tail`` is the sentinel object's key).

    Integer fields are ``bigint``: Spark's reader refuses a string, a fraction, a boolean or an
    integer beyond 64 bits there, which marks the record corrupt and sends the row to the exact
    path. String fields are VARIANT, because the reader would turn ``5`` into ``"5"`` for a
    string field; ``try_variant_get(v, '$', 'binary')`` is non-null only for a JSON string.
    """

    def spark_type(name: str) -> str:
        return "bigint" if _FIELDS[name][1] == _LONG else "variant"

    meta = ", ".join(
        f"{name}: {spark_type(name)}" for name, (path, _) in _FIELDS.items() if path.startswith("$.meta.")
    )
    top = ", ".join(
        f"{name}: {spark_type(name)}" for name, (path, _) in _FIELDS.items() if not path.startswith("$.meta.")
    )
    rest = f"data: {data_type}, meta: struct<{meta}>, dead_letter: {dead_letter_type}, {tail}: int"
    return f"struct<{top}, {rest}>"


#: Spark's JSON reader, made as strict as Python's ``json`` where it is lenient by default.
_STRICT_JSON = {"allowNonNumericNumbers": "false", "allowSingleQuotes": "false"}

#: A ``\u`` escape (an odd run of backslashes, then ``u``) without four ASCII hex digits after it:
#: never JSON, but Spark's parser takes a non-ASCII character whose low byte is a hex digit's
#: code (U+D230, U+0130...) as that digit, and would read the body.
_BAD_ESCAPE = r"(?<!\\)(?:\\\\)*\\u(?![0-9a-fA-F]{4})"

#: Rows holding one of these may be read differently by Spark and by Python (a lone surrogate
#: escape, or a string whose first character is ``{`` spelled as an escape); only checked on
#: rows that contain a ``\u`` escape at all.
_RISKY_ESCAPE = r"\\u[dD][89a-fA-F]|\"\\u007[bB]|" + _BAD_ESCAPE


def _vouched(text: Column, utf8: Column, parsed: Column, keys: tuple[str, str, str]) -> Column:
    """True when the fast parse of this row is whole and reads what Python's ``json`` reads."""
    from pyspark.sql import functions as sf

    items, tail, corrupt = keys
    plain = ~text.contains('"{') & (~text.contains("\\u") | ~text.rlike(_RISKY_ESCAPE)) & ~_maybe_deep(text)
    values = parsed[items]
    whole = (
        parsed[corrupt].isNull()
        & (sf.size(values) == 2)
        & sf.get(values, 0).isNotNull()
        & (sf.get(values, 1)[tail] == 1)
    )
    return sf.coalesce(utf8 & plain & whole, _lit(False))


def _fast_values(envelope: Column) -> dict[str, Column]:
    """Typed values from the fast parse: a string field is null unless it is a JSON string."""
    from pyspark.sql import functions as sf

    values = {}
    for name, (path, kind) in _FIELDS.items():
        raw = envelope["meta"][name] if path.startswith("$.meta.") else envelope[name]
        values[name] = raw if kind == _LONG else sf.try_variant_get(raw, "$", "binary").cast("string")
    return values


def _exact_values(kinds: Column, variants: Column) -> dict[str, Column]:
    """Typed values from the exact parse: null unless the JSON type is the one wanted."""
    from pyspark.sql import functions as sf

    return {
        name: sf.when(
            kinds[name] == kind,
            sf.try_variant_get(variants[name], "$", "long" if kind == _LONG else "string"),
        )
        for name, (_, kind) in _FIELDS.items()
    }


def _urn(job: Column, alias: Column, job_absent: Column) -> Column:
    """The core's URN rule: ``job`` when present, the ``urn`` alias only when ``job`` is absent
    (missing or null); ``""`` when the one that counts is not a non-blank string."""
    from pyspark.sql import functions as sf

    blank = _lit("")
    return sf.when(
        sf.coalesce(job_absent, _lit(True)), sf.when(_nonblank(alias), alias).otherwise(blank)
    ).otherwise(sf.when(_nonblank(job), job).otherwise(blank))


def _scan_call(
    df: DataFrame, scan_function: str, body_bytes: Column, data_schema: StructType | None
) -> tuple[Column, bool]:
    """The scanner's call on ``body_bytes`` and whether it also types ``data`` into ``data_schema``
    (given only when typed data is wanted) in the same pass, so no from_json follows.

    The catalog function's scan comes first: Spark takes its rows as they are, where the Java
    UDFs' rows are converted value by value (for typed data as costly as the scan itself). Its
    second argument carries only the data type (to the function's bind). Without the catalog,
    the typed Java UDF where it reads the type; else the text scan.
    """
    from pyspark.sql import functions as sf

    from babelq.spark.jvm import catalog_scanner, reads_data_type, typed_scanner

    catalog_scan = catalog_scanner(df.sparkSession)
    if data_schema is not None:
        if catalog_scan is not None:
            if reads_data_type(data_schema):
                return sf.call_function(catalog_scan, body_bytes, _lit(None).cast(data_schema)), True
        else:
            typed_udf = typed_scanner(df.sparkSession, data_schema)
            if typed_udf is not None:
                return sf.call_function(typed_udf, body_bytes, _lit(data_schema.json())), True
    return sf.call_function(catalog_scan or scan_function, body_bytes), False


def _use_scanner(df: DataFrame, wanted: bool | None) -> str | None:
    """The scanner's SQL function name when it is to be used, else None."""
    if wanted is False:
        return None
    from babelq.spark.jvm import jar_path, scanner

    name = scanner(df.sparkSession)
    if name is None and wanted:
        from babelq.errors import ConfigurationError

        raise ConfigurationError(
            "decode(scanner=True): babelq's JVM scanner is not on this session's classpath; "
            f"add {jar_path()} to spark.jars (babelq.spark.session.get_session does)"
        )
    return name


def decode(
    df: DataFrame,
    column: str = "body",
    *,
    data_schema: StructType | None = None,
    data_json: bool | None = None,
    fast: bool = True,
    scanner: bool | None = None,
    path_column: str | None = None,
) -> DataFrame:
    """``df`` plus the decoded envelope columns and the consumer verdict.

    Added columns: ``urn trace_id id queue lang`` (strings, ``""`` when absent or not a
    string), ``schema_version created_at`` (longs or null), ``attempts`` (long, 0 when not a
    64-bit integer), ``extensions`` (struct of docs/standard.md §6 keys; priority 5 by default),
    ``data_json`` (the data object as JSON text, key order kept; on by default unless
    ``data_schema`` is given), ``data`` (a struct of ``data_schema``, read the way
    ``from_json`` reads it, when given), ``dead_letter`` (struct or null), ``accepted``
    (bool) and ``reject_reason`` (null when accepted). Poison bodies (not UTF-8, not JSON, not
    an object) are rejected with a reason. Existing columns of those names are replaced.

    Fast paths: babelq's JVM scanner (:mod:`babelq.spark.jvm`) when the session has it
    (``scanner=None``; ``True`` requires it, ``False`` uses the Spark SQL fast path instead).
    ``fast=False`` sends every row through the exact VARIANT path (same verdicts and values,
    slower). ``path_column`` names an extra column telling which path read each row
    (``"scan"``, ``"sql"`` or ``"exact"``), to see why a feed decodes slowly (e.g. a producer
    escaping surrogates). ``data_json`` is the body's own text of ``data`` on the scanner path
    and Spark's compact re-serialization on the others (same JSON value).
    """
    from pyspark.sql import functions as sf
    from pyspark.sql import types as stypes

    from babelq.spark.schema import DEAD_LETTER_SCHEMA

    _warn_if_duplicate_keys_refused(df)
    body_type = df.schema[column].dataType
    text = sf.col(column).cast("string") if isinstance(body_type, stypes.BinaryType) else sf.col(column)
    want_json = data_json if data_json is not None else data_schema is None
    typed_data = data_schema is not None and not want_json
    dead_letter_type = DEAD_LETTER_SCHEMA.simpleString()
    nonce = uuid.uuid4().hex
    items, tail, corrupt = (f"k{uuid.uuid4().hex}" for _ in range(3))
    data_type = data_schema.simpleString() if typed_data and data_schema is not None else "string"

    out = df.withColumn(_P + "s", text)
    valid_utf8 = sf.coalesce(sf.is_valid_utf8(_h("s")), _lit(False))

    scan_function = _use_scanner(df, scanner) if fast else None
    # the reason text's float repr: babelq's JVM UDF where loaded (the SQL version calls
    # reflect, which takes the whole projection out of whole-stage code generation)
    float_function = None
    if scanner is not False:
        from babelq.spark.jvm import float_repr

        float_function = float_repr(df.sparkSession)

    # 1. The fast path: the JVM scanner, or one from_json; a row is taken when vouched for AND accepted.
    typed_in_scan = False
    if scan_function is not None:
        body_bytes = sf.col(column) if isinstance(body_type, stypes.BinaryType) else _h("s").cast("binary")
        call, typed_in_scan = _scan_call(df, scan_function, body_bytes, data_schema if typed_data else None)
        out = out.withColumn(_P + "scan", call)
        scan = _h("scan")
        scan_data = scan["data"] if typed_in_scan else scan["data"].cast("string")
        if typed_data and data_schema is not None and not typed_in_scan:
            scan_data = sf.from_json(scan_data, data_schema)
        # the scanner's row is read directly (no copy into another struct); the scanner checked
        # UTF-8 on the rows it accepts, so only the others are checked again
        out = out.withColumn(_P + "fast", sf.coalesce(scan["accepted"], _lit(False)))
        out = out.withColumn(_P + "utf8", _h("fast") | valid_utf8)
        # read straight from the scanner's row at the end: every intermediate column holding a
        # struct would be one more copy of it per row
        fast_data, fast_dead_letter = scan_data, scan["dead_letter"]
    elif fast:
        out = out.withColumn(_P + "utf8", valid_utf8)
        wrapper = sf.concat(_lit(f'{{"{items}":['), _h("s"), _lit(f',{{"{tail}":1}}]}}'))
        envelope_type = _fast_envelope_type(data_type, dead_letter_type, tail)
        parsed_type = f"struct<{items}: array<{envelope_type}>, {corrupt}: string>"
        options = {**_STRICT_JSON, "columnNameOfCorruptRecord": corrupt}
        out = out.withColumn(_P + "m", sf.from_json(wrapper, parsed_type, options))
        envelope = sf.get(_h("m")[items], 0)
        vouched = _vouched(_h("s"), _h("utf8"), _h("m"), (items, tail, corrupt))
        values = _fast_values(envelope)
        job_variant = envelope["job"]
        values["resolved_urn"] = _urn(
            values["job"], values["urn"], job_variant.isNull() | sf.is_variant_null(job_variant)
        )
        values["meta_ok"] = envelope["meta"].isNotNull()
        data_ok = envelope["data"].isNotNull() if typed_data else envelope["data"].startswith("{")
        values["data_ok"] = sf.coalesce(data_ok, _lit(False))
        # Everything is read out of the parse in one step, so the wide parse result is not
        # carried on: a projection of more than 100 (nested) fields leaves whole-stage code
        # generation, which costs more than the parse itself.
        taken = {
            "vouched": vouched,
            "f": sf.when(vouched, sf.struct(*[value.alias(name) for name, value in values.items()])),
            "f_data": sf.when(vouched, envelope["data"]),
            "f_dead_letter": sf.when(vouched, envelope["dead_letter"]),
        }
        out = out.withColumns({_P + name: value for name, value in taken.items()})
        fast_data, fast_dead_letter = _h("f_data"), _h("f_dead_letter")
        f = _h("f")
        accepted = (
            (f["resolved_urn"] != "")
            & f["meta_ok"]
            & sf.coalesce(f["schema_version"] == 1, _lit(False))
            & f["data_ok"]
            & f["attempts"].isNotNull()
            & _nonblank(f["trace_id"])
        )
        out = out.withColumn(_P + "fast", sf.coalesce(_h("vouched") & accepted, _lit(False)))
    else:
        out = out.withColumns({_P + "fast": _lit(False), _P + "utf8": valid_utf8})
    fast_row = _h("fast")

    def fast_value(name: str) -> Column:
        if scan_function is not None:  # the scanner resolves the URN itself
            return _h("scan")["urn" if name in ("job", "resolved_urn") else name]
        return _h("f")[name]


    # 2. The exact path, evaluated only for the rows the fast path did not take.
    out = out.withColumn(
        _P + "wrapped",
        sf.when(~fast_row, sf.try_parse_json(sf.concat(_lit("["), _h("s"), _lit(f',"{nonce}"]')))),
    )
    out = out.withColumn(
        _P + "first", sf.when(~fast_row, sf.left(sf.ltrim(_h("s"), _lit(_JSON_WS)), _lit(1)))
    )
    nonce_seen = sf.coalesce(sf.try_variant_get(_h("wrapped"), "$[1]", "string") == nonce, _lit(False))
    bad_escape = _h("s").contains("\\u") & _h("s").rlike(_BAD_ESCAPE)
    # nested deeper than the envelope's limit: "not JSON", as the core says (a second parse, padded,
    # only for the few rows long and bracket-heavy enough to be that deep)
    # (nested CASEs, so that nothing of it is computed for the fast rows: see _maybe_deep)
    deep = sf.coalesce(
        sf.when(~fast_row, sf.when(_maybe_deep(_h("s")), _too_deep(_h("s")))), _lit(False)
    )
    out = out.withColumn(_P + "whole", fast_row | (_h("utf8") & nonce_seen & ~bad_escape & ~deep))
    whole = _h("whole")
    # poison by the scanner's reading (NaN, a number only infinity holds, a lone surrogate...)
    # although Spark's parser reads it: no fields, and the scanner's reason
    scan_poison = _h("scan")["poison"] if scan_function is not None else _lit(None).cast("string")
    out = out.withColumn(
        _P + "doc",
        sf.when(
            ~fast_row & whole & (_h("first") == "{") & scan_poison.isNull(), _field(_h("wrapped"), "$[0]")
        ),
    )
    doc = _h("doc")

    def exact_is_object(path: str) -> Column:
        # null on fast rows, which never read it: nothing of the exact path runs for them
        return sf.when(~fast_row, _is_object(_field(doc, path)))

    # data in the body's key order (a VARIANT sorts keys), keeping the last of repeated keys as
    # the VARIANT parse and the core do. With the scanner: its data where it read the body (typed
    # in the same pass when the data type allows), else get_json_object's text or a VARIANT cast
    # for the few bodies it does not vouch for as JSON (poison, nesting deeper than 256). Without
    # it: the fast path's JSON reader. from_json has no generated code, so with the scanner it
    # is kept out of the projection, which then runs under whole-stage code generation.
    scan_read = _h("scan").isNotNull() if scan_function is not None else _lit(False)
    if typed_in_scan and data_schema is not None:
        unread = sf.try_variant_get(doc, "$.data", data_schema.simpleString())
        exact_data = sf.when(exact_is_object("$.data"), sf.when(scan_read, scan_data).otherwise(unread))
    else:
        if scan_function is not None:
            data_text = sf.when(scan_read, scan["data"].cast("string")).otherwise(
                sf.get_json_object(_h("s"), "$.data")
            )
        else:
            data_text = sf.from_json(_h("s"), "struct<data: string>", _STRICT_JSON)["data"]
        exact_data = sf.when(exact_is_object("$.data"), data_text)
        if typed_data and data_schema is not None:
            exact_data = sf.from_json(exact_data, data_schema)
    exact = {
        "v": sf.when(
            ~fast_row, sf.struct(*[_field(doc, path).alias(name) for name, (path, _) in _FIELDS.items()])
        ),
        "meta_ok": exact_is_object("$.meta"),
        "data_ok": exact_is_object("$.data"),
        "data": exact_data,
        "dead_letter": sf.when(
            exact_is_object("$.dead_letter"), sf.try_variant_get(doc, "$.dead_letter", dead_letter_type)
        ),
    }
    out = out.withColumns({_P + "x_" + name: value for name, value in exact.items()})
    v = _h("x_v")
    out = out.withColumn(
        _P + "kinds",
        sf.when(~fast_row, sf.struct(*[sf.schema_of_variant(v[name]).alias(name) for name in _FIELDS])),
    )
    k = _h("kinds")
    out = out.withColumn(
        _P + "x",
        sf.when(~fast_row, sf.struct(*[value.alias(name) for name, value in _exact_values(k, v).items()])),
    )

    # 3. One value per column: the fast path's where it took the row, else the exact path's.
    def either(name: str) -> Column:
        exact_value = _h("x")[name]
        return sf.when(fast_row, fast_value(name)).otherwise(exact_value) if fast else exact_value

    typed = {name: either(name) for name in _FIELDS}
    data = sf.when(fast_row, fast_data).otherwise(_h("x_data")) if fast else _h("x_data")
    fast_name = "scan" if scan_function is not None else "sql"
    dead_letter = (
        sf.when(fast_row, fast_dead_letter).otherwise(_h("x_dead_letter")) if fast else _h("x_dead_letter")
    )

    exact_urn = _urn(typed["job"], typed["urn"], _absent(k["job"]))
    out = out.withColumn(
        "urn", sf.when(fast_row, fast_value("resolved_urn")).otherwise(exact_urn) if fast else exact_urn
    )
    exact_sv = _h("x")["schema_version"]

    def raw(path: str) -> Column:
        """The member's JSON text (an integer's exact digits), read only where a reason needs it;
        from the body column itself, so that no projection carries the text column for it."""
        return sf.get_json_object(text, path)

    # The rules from data on in one string column, computed where the body text and the
    # parsed document are at hand; only that column is carried to the final projection. Every
    # field a projection carries counts towards Spark's limit of 100 (nested) fields for
    # whole-stage code generation, which decode with a data struct comes close to (99 with the
    # benchmark's data type); beyond it the projection runs interpreted, markedly slower.
    block_kind = sf.schema_of_variant(_field(doc, "$.dead_letter"))
    rules = [
        (~_h("x_data_ok"), _lit("data is missing or not an object")),
        (
            ~_is_int(k["attempts"], raw("$.attempts")),
            sf.concat(
                _lit("attempts is "),
                _python_type_name(k["attempts"], raw("$.attempts")),
                _lit(", not an integer"),
            ),
        ),
        (k["attempts"] != _LONG, _lit("attempts is an integer outside signed 64-bit")),
        (~_nonblank(_h("x")["trace_id"]), _lit("trace_id is missing or not a non-empty string")),
        _int64_reason("meta.created_at", k["created_at"], raw("$.meta.created_at")),
        (
            sf.coalesce(~_absent(block_kind) & ~block_kind.startswith("OBJECT"), _lit(False)),
            sf.concat(
                _lit("dead_letter is "),
                _python_type_name(block_kind, raw("$.dead_letter")),
                _lit(", not an object"),
            ),
        ),
        *[
            _int64_reason(
                f"dead_letter.{key}",
                sf.schema_of_variant(_field(doc, f"$.dead_letter.{key}")),
                raw(f"$.dead_letter.{key}"),
            )
            for key in ("failed_at", "attempts")
        ],
    ]
    rule = sf.when(rules[0][0], rules[0][1])
    for broken, text_of in rules[1:]:
        rule = rule.when(broken, text_of)
    out = out.withColumn(_P + "x_rule", sf.when(~fast_row, rule))
    reason = (
        sf.when(fast_row, _lit(None).cast("string"))
        .when(~_h("utf8"), _lit("body is not valid UTF-8"))
        .when(scan_poison.isNotNull(), scan_poison)
        .when(~whole, _lit("body is not JSON"))
        .when(
            _h("first") != "{",
            sf.concat(_lit("body is JSON but "), _root_kind(_h("first")), _lit(", not an object")),
        )
        .when(sf.col("urn") == "", sf.when(_absent(k["job"]), _lit(NO_URN)).otherwise(_lit(JOB_NOT_A_URN)))
        .when(~_h("x_meta_ok"), _lit("meta is missing or not an object"))
        .when(
            ~sf.coalesce(exact_sv == 1, _lit(False)),
            sf.concat(
                _lit("meta.schema_version is "),
                _python_repr(v["schema_version"], k["schema_version"], float_function),
                _lit("; only 1 is supported"),
            ),
        )
        .when(_h("x_rule").isNotNull(), _h("x_rule"))
    )
    out = out.withColumn("reject_reason", reason)
    out = out.withColumn("accepted", sf.col("reject_reason").isNull())

    priority = typed["priority"]
    # attempts beyond 64 bits (rejected) is an integer no long holds: reported as 0.
    columns: dict[str, Column] = {
        "trace_id": sf.coalesce(typed["trace_id"], _lit("")),
        "id": sf.coalesce(typed["id"], _lit("")),
        "queue": sf.coalesce(typed["queue"], _lit("")),
        "lang": sf.coalesce(typed["lang"], _lit("")),
        "schema_version": typed["schema_version"],
        "created_at": typed["created_at"],
        "attempts": sf.coalesce(typed["attempts"], _lit(0).cast("long")),
        "extensions": sf.struct(
            typed["correlation_id"].alias("correlation_id"),
            typed["sharding_key"].alias("sharding_key"),
            typed["deliver_at"].alias("deliver_at"),
            typed["expire_at"].alias("expire_at"),
            sf.when(priority.between(1, 10), priority).otherwise(_lit(5).cast("long")).alias("priority"),
            typed["transaction_id"].alias("transaction_id"),
        ),
    }
    if want_json:
        columns["data_json"] = data  # null unless data is an object (or, typed, a struct)
    if data_schema is not None:
        columns["data"] = data if typed_data else sf.from_json(data, data_schema)
    columns["dead_letter"] = dead_letter
    if path_column:
        columns[path_column] = sf.when(fast_row, _lit(fast_name)).otherwise(_lit("exact"))
    out = out.withColumns(columns)
    ordered = [c for c in df.columns if c not in _added_names(columns)] + [
        "urn",
        *columns,
        "accepted",
        "reject_reason",
    ]
    return out.select(*ordered)


def _warn_if_duplicate_keys_refused(df: DataFrame) -> None:
    """Say so when the session would call a body with a repeated key poison (the core keeps the last)."""
    try:
        allowed = str(df.sparkSession.conf.get(DUPLICATE_KEYS_CONF, "false")).lower() == "true"
    except Exception:  # a remote session that does not expose its conf: nothing to say
        return
    if not allowed:
        warnings.warn(
            f"{DUPLICATE_KEYS_CONF} is false in this Spark session: babelq.spark.decode will reject "
            "bodies with a repeated object key as 'body is not JSON' unless they take the fast path, "
            f"where the core codec keeps the last value; set {DUPLICATE_KEYS_CONF}=true to agree",
            RuntimeWarning,
            stacklevel=3,
        )


def _added_names(columns: dict[str, Column]) -> set[str]:
    return {"urn", "accepted", "reject_reason", *columns}
