"""babelq's own JVM helpers for Spark: a fast envelope scanner, Python's float repr, a JSON writer.

Two hot spots cost far more as Spark SQL expressions than as a few lines of Java: checking
that a body is one strict JSON object the consumer rules accept (Spark's JSON reader loses the
JSON types the verdict needs, its VARIANT parser is exact but slow), and writing a double the
way Python's ``repr`` does (dozens of string functions per value). ``babelq-spark.jar``, built
from ``jvm/src`` by ``jvm/build.py`` and shipped inside the package, holds both:

* ``babelq.spark.EnvelopeScan``, a Java UDF that returns an accepted envelope's typed fields,
  and for any other JSON object body only its verdict and the text of ``data``; it returns
  null for every body it does not vouch for as JSON (:mod:`babelq.spark.decode` takes the
  reason and fields of everything but accepted rows from its exact SQL path, so this is safe);
* ``babelq.spark.PythonFloat``, a Java UDF giving Python's ``repr`` of a double;
* ``babelq.spark.DataJson``, the canonical JSON text of encode's ``data`` struct in one pass,
  and ``babelq.spark.JsonString``, one string's JSON token, both served by the function catalog
  ``babelq.spark.Functions`` (:func:`data_json`, :func:`json_string`);
* ``babelq.spark.EnvelopeScanFunction``, the envelope scan again, served by the same catalog
  (:func:`catalog_scanner`): decode prefers it to the Java UDFs because Spark takes its rows in
  its internal form instead of converting a ``Row`` value by value.

The first two are registered as Java UDFs rather than called through Spark's ``reflect``:
``reflect`` has no generated code, and a single such expression takes the whole projection
around it out of whole-stage code generation, and one is enough to slow all of decode. The
JSON writers are catalog functions instead of Java UDFs because a UDF receives its
struct argument converted to a ``Row``, which for a nested payload costs about as much as the
writing; a catalog function's ``invoke`` gets Spark's internal row from generated code.

:func:`babelq.spark.session.get_session` puts the jar on the classpath (``spark.jars``). On a
session built elsewhere, add it yourself (``--jars``, ``spark.jars`` = :func:`jar_path`), or
babelq tries ``ADD JAR`` the first time it needs it; where neither works (Spark Connect, a
cluster without the jar), :func:`scanner`, :func:`float_repr` and :func:`data_json` say so and the callers
use their pure Spark SQL paths instead: same results, slower.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger(__name__)

#: the jar shipped with the package
JAR = Path(__file__).resolve().parent / "babelq-spark.jar"
SCAN_CLASS = "babelq.spark.EnvelopeScan"
TYPED_SCAN_CLASS = "babelq.spark.EnvelopeScanTyped"
FLOAT_CLASS = "babelq.spark.PythonFloat"
#: the SQL names the UDFs are registered under (versioned with their output types)
SCAN_FUNCTION = "babelq_envelope_scan_v1"
FLOAT_FUNCTION = "babelq_python_float_repr_v1"
FUNCTIONS_CLASS = "babelq.spark.Functions"
#: the catalog name babelq's function catalog is registered under (``spark.sql.catalog.<name>``)
FUNCTIONS_CATALOG = "babelq_functions"
DATA_JSON_FUNCTION = f"{FUNCTIONS_CATALOG}.data_json_v1"
JSON_STRING_FUNCTION = f"{FUNCTIONS_CATALOG}.json_string_v1"
ENVELOPE_SCAN_FUNCTION = f"{FUNCTIONS_CATALOG}.envelope_scan_v1"

#: what EnvelopeScan returns (the Java class builds its rows in this order); ``data`` is the
#: body's text of the data object as UTF-8 bytes (cast it to string: Spark does that for free)
DEAD_LETTER_DDL = (
    "struct<reason: string, error: string, exception: string, failed_at: bigint, original_queue: string, "
    "attempts: bigint, lang: string, cause: string>"
)
SCAN_DDL = (
    "struct<accepted: boolean, urn: string, trace_id: string, id: string, queue: string, lang: string, "
    "schema_version: bigint, created_at: bigint, attempts: bigint, correlation_id: string, "
    f"sharding_key: string, deliver_at: bigint, expire_at: bigint, priority: bigint, "
    f"transaction_id: string, data: binary, dead_letter: {DEAD_LETTER_DDL}, poison: string>"
)

_lock = threading.Lock()
#: (id(session), data type JSON) -> the typed scanner's registered name (sessions kept in _state)
_typed: dict[tuple[int, str], str] = {}
#: id(session) -> (session, scanner registered?, PythonFloat loadable?); the session is kept so
#: its id is not reused while the entry lives
_state: dict[int, tuple[Any, bool | None, bool | None]] = {}
#: id(session) -> (session, function catalog loadable?)
_catalog: dict[int, tuple[Any, bool]] = {}
#: id(session) -> (session, the catalog's envelope scan resolves?)
_catalog_scan: dict[int, tuple[Any, bool]] = {}


def jar_path() -> str:
    """The path of ``babelq-spark.jar`` (for ``spark.jars`` or ``--jars``)."""
    return str(JAR)


def _remember(spark: Any, *, scan: bool | None = None, float_repr: bool | None = None) -> None:
    _, old_scan, old_float = _state.get(id(spark), (spark, None, None))
    _state[id(spark)] = (
        spark,
        old_scan if scan is None else scan,
        old_float if float_repr is None else float_repr,
    )


def _add_jar(spark: Any) -> bool:
    try:
        spark.sql(f"ADD JAR '{jar_path()}'")
    except Exception as exc:  # Spark Connect without artifacts, a locked-down cluster, ...
        log.debug("babelq: ADD JAR %s failed: %s", jar_path(), exc)
        return False
    return True


def _with_jar(spark: Any, step: Callable[[], object], what: str) -> bool:
    """Run ``step`` (which needs a class of the jar); if it fails, add the jar once and try again."""
    for attempt in range(2):
        try:
            step()
            return True
        except Exception as exc:
            log.debug("babelq: %s failed: %s", what, exc)
            if attempt or not _add_jar(spark):
                return False
    return False


def _register(spark: Any, name: str, cls: str, ddl: str | DataType) -> bool:
    """Register the Java UDF ``cls`` as ``name``, adding the jar once if the class is missing."""
    return _with_jar(spark, lambda: spark.udf.registerJavaFunction(name, cls, ddl), f"registering {cls}")


def scanner(spark: Any) -> str | None:
    """The SQL function name of the envelope scanner in ``spark``, or None where it cannot load."""
    with _lock:
        known = _state.get(id(spark))
        if known is not None and known[1] is not None:
            return SCAN_FUNCTION if known[1] else None
        ok = _register(spark, SCAN_FUNCTION, SCAN_CLASS, SCAN_DDL)
        if not ok:
            log.warning(
                "babelq: %s is not on this Spark session's classpath (add %s to spark.jars); "
                "babelq.spark.decode uses its slower Spark SQL path",
                SCAN_CLASS,
                jar_path(),
            )
        _remember(spark, scan=ok)
        return SCAN_FUNCTION if ok else None


def float_repr(spark: Any) -> str | None:
    """The SQL function name of Python's float ``repr`` in ``spark``, or None where it cannot load."""
    with _lock:
        known = _state.get(id(spark))
        if known is not None and known[2] is not None:
            return FLOAT_FUNCTION if known[2] else None
        ok = _register(spark, FLOAT_FUNCTION, FLOAT_CLASS, "string")
        _remember(spark, float_repr=ok)
        return FLOAT_FUNCTION if ok else None


def reads_data_type(data_type: DataType) -> bool:
    """Whether the typed scanner converts every type inside ``data_type`` (else decode uses from_json)."""
    from pyspark.sql import types as stypes

    if isinstance(data_type, stypes.StructType):
        return all(reads_data_type(f.dataType) for f in data_type.fields)
    if isinstance(data_type, stypes.ArrayType):
        return reads_data_type(data_type.elementType)
    if isinstance(data_type, stypes.MapType):
        return isinstance(data_type.keyType, stypes.StringType) and reads_data_type(data_type.valueType)
    return isinstance(
        data_type,
        stypes.StringType
        | stypes.LongType
        | stypes.IntegerType
        | stypes.ShortType
        | stypes.ByteType
        | stypes.DoubleType
        | stypes.FloatType
        | stypes.BooleanType,
    )


def typed_scanner(spark: Any, data_schema: StructType) -> str | None:
    """The SQL name of the scanner reading ``data`` into ``data_schema`` (one per schema), or None.

    None when the jar is not loaded or the schema holds a type the scanner does not convert
    (:func:`reads_data_type`). Call it as ``name(body, lit(data_schema.json()))``.
    """
    if not reads_data_type(data_schema) or scanner(spark) is None:
        return None
    from pyspark.sql import types as stypes

    schema_json = data_schema.json()
    with _lock:
        key = (id(spark), schema_json)
        known = _typed.get(key)
        if known is not None:
            return known
        name = f"babelq_envelope_scan_typed_v1_{hashlib.sha1(schema_json.encode()).hexdigest()[:16]}"
        text_type = stypes._parse_datatype_string(SCAN_DDL)
        assert isinstance(text_type, stypes.StructType)
        fields = [
            stypes.StructField(f.name, data_schema if f.name == "data" else f.dataType, True)
            for f in text_type.fields
        ]
        if not _register(spark, name, TYPED_SCAN_CLASS, stypes.StructType(fields)):
            return None
        _typed[key] = name
        return name


def _catalog_loads(spark: Any) -> bool:
    """Register babelq's function catalog in ``spark`` and resolve its function once (no job runs)."""
    key = f"spark.sql.catalog.{FUNCTIONS_CATALOG}"
    probe = f"SELECT {DATA_JSON_FUNCTION}(named_struct('a', 1L))"

    def load() -> None:
        if spark.conf.get(key, None) != FUNCTIONS_CLASS:
            spark.conf.set(key, FUNCTIONS_CLASS)
        _ = spark.sql(probe).schema  # analysis loads the catalog class and binds the function

    return _with_jar(spark, load, f"loading the function catalog {FUNCTIONS_CLASS}")


def function_catalog(spark: Any) -> bool:
    """Whether babelq's function catalog (:func:`data_json`, :func:`json_string`) loads in ``spark``."""
    with _lock:
        known = _catalog.get(id(spark))
        if known is not None:
            return bool(known[1])
        ok = _catalog_loads(spark)
        _catalog[id(spark)] = (spark, ok)
        return ok


def json_string(spark: Any) -> str | None:
    """The SQL name of babelq's JSON string token writer (quoted, escaped; null stays null), or None.

    One pass over the bytes where the Spark SQL spelling (:func:`babelq.spark.json_expr.json_string`)
    runs a regex test and a chain of ``replace`` calls.
    """
    return JSON_STRING_FUNCTION if function_catalog(spark) else None


def data_json(spark: Any, omit: frozenset[int] = frozenset()) -> str | None:
    """The SQL name of babelq's JSON writer for encode's ``data`` struct, or None where it cannot load.

    Call it as ``name(struct)``: it gives the struct's canonical JSON text (``{}`` for a null
    struct), failing the task like ``raise_error`` on NaN/Infinity. ``omit`` holds the indexes of
    top-level fields to leave out when null; they are part of the function's name, the only
    thing of a call besides its argument types that reaches a catalog function.
    """
    if not function_catalog(spark):
        return None
    suffix = "".join(f"_{index}" for index in sorted(omit))
    return f"{DATA_JSON_FUNCTION}_omit{suffix}" if omit else DATA_JSON_FUNCTION


def catalog_scanner(spark: Any) -> str | None:
    """The SQL name of the envelope scan served by babelq's function catalog, or None.

    The same scan as :func:`scanner` and :func:`typed_scanner`, but Spark gets its rows in its
    internal form: the Java UDFs return ``Row`` objects that Spark converts value by value, which
    for a typed ``data`` struct cost about as much as the scan. Call it as
    ``name(body_binary)`` (``data`` as the text's bytes) or ``name(body_binary,
    lit(None).cast(data_schema))``: only the second argument's type matters, it is how the data
    type reaches the function. None where the catalog does not load or an older jar lacks it.
    """
    if not function_catalog(spark):
        return None
    with _lock:
        known = _catalog_scan.get(id(spark))
        if known is not None:
            return ENVELOPE_SCAN_FUNCTION if known[1] else None
        try:
            _ = spark.sql(f"SELECT {ENVELOPE_SCAN_FUNCTION}(CAST(NULL AS BINARY))").schema
            ok = True
        except Exception as exc:  # a jar from before the function: the Java UDFs do the scan
            log.debug("babelq: %s does not resolve: %s", ENVELOPE_SCAN_FUNCTION, exc)
            ok = False
        _catalog_scan[id(spark)] = (spark, ok)
        return ENVELOPE_SCAN_FUNCTION if ok else None
