"""GDPR field encryption on DataFrames: the marked columns as the core cipher's ciphertext.

:func:`protect` replaces every value a per-URN schema marks ``x-gdpr-sensitive`` by the string
:class:`babelq.gdpr.AesGcmCipher` would write (``base64(nonce[12] || ciphertext || tag)``, the
babelqueue package's reference format); :func:`unprotect` reverses it. Values protected here
are opened by the core cipher and by the package's reference cipher, and the reverse.

Positions: a top-level column (``email``), a struct field (``profile.full_name``), every item
of an array column (``addresses[].line``, ``phones[]``) and, with ``paths="extended"``, every
value of a map column (``labels.*``) and the core's other wider positions. A position the
DataFrame does not have is skipped, as in the core; a null value stays null (a DataFrame cannot
tell an absent field from a null one).

The plaintext of a value is its JSON text as Spark writes it (``to_json``), which is valid JSON
but not always the core's canonical form (struct fields in column order, non-ASCII unescaped):
decryption in the core restores the same value, not necessarily the same bytes.

Two engines; the default ``"auto"`` picks per position by measurement (``bench/bench_gdpr.py``):
``"arrow"`` for top-level and struct-field positions (it measured faster), ``"sql"`` for
positions inside arrays and maps (a Python UDF cannot run inside ``transform``).

``"sql"``
    Spark's own ``aes_encrypt(value, key, 'GCM')`` / ``try_aes_decrypt``, on the JVM, no Python
    per row. Spark's GCM output is a 12-byte random IV, the ciphertext, the 16-byte tag: the
    core's layout byte for byte, so ``base64`` of it is the core's string. The keys reach the
    plan as **data** (a one-row broadcast DataFrame joined in), never as literals, so
    ``explain()``, the Spark UI and event logs do not show key bytes.
    It measured slower than the core cipher (OpenSSL through ``cryptography``) in a Python UDF,
    which is why it is not the default where the Arrow engine can go.
``"arrow"``
    A vectorized pandas UDF running the core cipher over Arrow batches (struct-field and
    top-level positions only). The key bytes travel inside the pickled UDF, not in the plan.

Rotation as in the core: encrypt with the current key, decrypt with any known key (tried in
keyring order). A value no key opens fails the job with
``data.<field>: cannot be decrypted with any known key (tried 'k1', 'k2')`` unless
``on_error="null"``.

:func:`unprotect` needs the Spark type of each restored value: ``types={"path": "ddl type"}``,
else the marked node's JSON Schema ``type`` (string, integer -> bigint, number -> double,
boolean), else the value's JSON text.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from babelq.errors import ConfigurationError
from babelq.gdpr import AesGcmCipher, Keyring
from babelq.gdpr.fields import Paths, plan
from babelq.gdpr.paths import ANY_KEY, ITEMS, KEY, Step
from babelq.schema.sensitive import path_text

Engine = Literal["auto", "sql", "arrow"]
OnError = Literal["raise", "null"]

_JSON_TYPES: Final = {"string": "string", "integer": "bigint", "number": "double", "boolean": "boolean"}


def _keyring(cipher: AesGcmCipher | Keyring) -> Keyring:
    if isinstance(cipher, Keyring):
        return cipher
    if isinstance(cipher, AesGcmCipher):
        return cipher.keyring
    raise ConfigurationError("cipher: must be a babelq.gdpr.AesGcmCipher or Keyring")


def _field_type(dtype: Any, steps: tuple[Step, ...]) -> Any:
    """The Spark type at ``steps`` inside ``dtype``, or None when the DataFrame lacks the position."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    for step in steps:
        if step.kind == KEY and isinstance(dtype, StructType) and step.name in dtype.fieldNames():
            dtype = dtype[step.name].dataType
        elif step.kind == ITEMS and isinstance(dtype, ArrayType):
            dtype = dtype.elementType
        elif step.kind == ANY_KEY and isinstance(dtype, MapType):
            dtype = dtype.valueType
        else:
            return None
    return dtype


def _rebuild(column: Any, steps: tuple[Step, ...], leaf: Callable[[Any], Any]) -> Any:
    """``column`` with ``leaf`` applied at ``steps`` (struct fields, array items, map values)."""
    from pyspark.sql import functions as sf

    if not steps:
        return leaf(column)
    step, rest = steps[0], steps[1:]
    if step.kind == KEY:
        inner = _rebuild(column.getField(step.name), rest, leaf)
        return sf.when(column.isNull(), column).otherwise(column.withField(f"`{step.name}`", inner))
    if step.kind == ITEMS:
        return sf.transform(column, lambda item: _rebuild(item, rest, leaf))
    return sf.transform_values(column, lambda _k, value: _rebuild(value, rest, leaf))


def _json_text(value: Any) -> Any:
    """The JSON text of any Spark value (``to_json(array(v))`` without its brackets); null for null.

    ``nullif(.., 'null')`` is exact: only a null value has the JSON text ``null`` (a string
    ``"null"`` is written with its quotes). It is much cheaper than a ``when(isNull)`` around
    the whole expression, which Spark would evaluate for every value.
    """
    from pyspark.sql import functions as sf

    wrapped = sf.to_json(sf.array(value))
    return sf.nullif(sf.substring(wrapped, sf.lit(2), sf.length(wrapped) - sf.lit(2)), sf.lit("null"))


def _marked(df: Any, schema: Any, paths: Paths, *, protecting: bool) -> list[tuple[tuple[Step, ...], Any]]:
    """(steps, Spark type at the position) of every marked position the DataFrame has.

    Protecting refuses a mark ``paths`` leaves out, as the core does.
    """
    found = []
    chosen = plan(schema, paths)
    if protecting and chosen.refused is not None:
        raise chosen.refusal()
    for steps in chosen.steps:
        if steps[0].kind != KEY:
            continue
        dtype = _field_type(df.schema, steps)
        if dtype is not None:
            found.append((steps, dtype))
    return found


class _Keys:
    """The keyring as a one-row broadcast DataFrame joined to ``df``: keys are data, not literals."""

    def __init__(self, df: Any, keyring: Keyring) -> None:
        from pyspark.sql import functions as sf

        tag = uuid.uuid4().hex[:8]
        self.names = [f"__babelq_gdpr_{tag}_{i}" for i in range(len(keyring.ids))]
        self.ids = keyring.ids
        spark = df.sparkSession
        row = tuple(bytearray(keyring.key(kid)) for kid in keyring.ids)
        ddl = ", ".join(f"{name} binary" for name in self.names)
        self.joined = df.crossJoin(sf.broadcast(spark.createDataFrame([row], ddl)))

    def column(self, i: int = 0) -> Any:
        from pyspark.sql import functions as sf

        return sf.col(self.names[i])

    def done(self, df: Any) -> Any:
        return df.drop(*self.names)


def protect(
    df: Any,
    schema: Mapping[str, Any] | bool | None,
    cipher: AesGcmCipher | Keyring,
    *,
    engine: Engine = "auto",
    paths: Paths = "reference",
) -> Any:
    """``df`` with every marked position as a ciphertext string (null stays null).

    ``paths`` as in :func:`babelq.gdpr.protected` (a mark beyond the reference grammar refuses
    under ``"reference"``).
    """
    keyring = _keyring(cipher)
    marked = _marked(df, schema, paths, protecting=True)
    if not marked:
        return df
    arrow, sql = _split(marked, engine)
    if arrow:
        df = _protect_arrow(df, arrow, keyring)
    return _protect_sql(df, sql, keyring) if sql else df


def _split(marked: list[tuple[tuple[Step, ...], Any]], engine: str) -> tuple[list[Any], list[Any]]:
    """(positions for the Arrow engine, positions for the SQL engine)."""
    if engine == "arrow":
        _arrow_only(marked)
        return marked, []
    if engine == "sql":
        return [], marked
    if engine != "auto":
        raise ConfigurationError(f"engine: must be 'auto', 'sql' or 'arrow', got {engine!r}")
    arrow = [m for m in marked if all(step.kind == KEY for step in m[0])]
    return arrow, [m for m in marked if m not in arrow]


def _protect_sql(df: Any, marked: list[tuple[tuple[Step, ...], Any]], keyring: Keyring) -> Any:
    from pyspark.sql import functions as sf

    keys = _Keys(df, keyring)
    out = keys.joined

    def seal(value: Any) -> Any:
        plaintext = sf.encode(_json_text(value), "UTF-8")
        # base64() breaks lines every 76 characters (spark.sql.chunkBase64String.enabled); the
        # core format is one line, so the breaks are removed rather than a session setting changed
        chunked = sf.base64(sf.aes_encrypt(plaintext, keys.column(), sf.lit("GCM")))
        return sf.regexp_replace(chunked, sf.lit("\r\n"), sf.lit(""))

    for steps, _ in marked:
        name = steps[0].name
        out = out.withColumn(name, _rebuild(sf.col(f"`{name}`"), steps[1:], seal))
    return keys.done(out)


def _target_type(schema: Any, steps: tuple[Step, ...], types: Mapping[str, str]) -> str | None:
    explicit = types.get(path_text(steps))
    if explicit:
        return explicit
    node = schema
    for step in steps:
        if not isinstance(node, Mapping):
            return None
        if step.kind == KEY:
            node = (node.get("properties") or {}).get(step.name)
        elif step.kind == ITEMS:
            node = node.get("items")
        else:
            node = node.get("additionalProperties")
    kind = node.get("type") if isinstance(node, Mapping) else None
    return _JSON_TYPES.get(kind) if isinstance(kind, str) else None


def unprotect(
    df: Any,
    schema: Mapping[str, Any] | bool | None,
    cipher: AesGcmCipher | Keyring,
    *,
    types: Mapping[str, str] | None = None,
    engine: Engine = "auto",
    on_error: OnError = "raise",
    paths: Paths = "reference",
) -> Any:
    """``df`` with every marked ciphertext decrypted to its value (see the module doc for types)."""
    from pyspark.sql.types import StringType

    keyring = _keyring(cipher)
    marked = [(s, t) for s, t in _marked(df, schema, paths, protecting=False) if isinstance(t, StringType)]
    if not marked:
        return df
    if on_error not in ("raise", "null"):
        raise ConfigurationError(f"on_error: must be 'raise' or 'null', got {on_error!r}")
    arrow, sql = _split(marked, engine)
    if arrow:
        df = _unprotect_arrow(df, schema, arrow, keyring, types or {}, on_error)
    return _unprotect_sql(df, schema, sql, keyring, types or {}, on_error) if sql else df


def _unprotect_sql(  # noqa: PLR0917 - private, called once
    df: Any,
    schema: Any,
    marked: list[tuple[tuple[Step, ...], Any]],
    keyring: Keyring,
    types: Mapping[str, str],
    on_error: OnError,
) -> Any:
    from pyspark.sql import functions as sf

    keys = _Keys(df, keyring)
    out = keys.joined
    tried = ", ".join(repr(k) for k in keyring.ids)
    for steps, _ in marked:
        target = _target_type(schema, steps, types)
        failure = f"data.{path_text(steps)}: cannot be decrypted with any known key (tried {tried})"

        def open_(value: Any, target: str | None = target, failure: str = failure) -> Any:
            raw = sf.try_to_binary(value, sf.lit("base64"))
            opened = sf.coalesce(
                *(sf.try_aes_decrypt(raw, keys.column(i), sf.lit("GCM")) for i in range(len(keys.ids)))
            )
            text = opened.cast("string")
            if on_error == "raise":  # evaluated only when no key opened a non-null value
                refuse = sf.when(value.isNotNull(), sf.raise_error(sf.lit(failure))).cast("string")
                text = sf.coalesce(text, refuse)
            if target is None:
                return text
            return sf.from_json(sf.concat(sf.lit("["), text, sf.lit("]")), f"array<{target}>")[0]

        name = steps[0].name
        out = out.withColumn(name, _rebuild(sf.col(f"`{name}`"), steps[1:], open_))
    return keys.done(out)


# -- the vectorized (Arrow) engine --------------------------------------------------------------
def _arrow_only(marked: list[tuple[tuple[Step, ...], Any]]) -> None:
    for steps, _ in marked:
        if any(step.kind != KEY for step in steps):
            raise ConfigurationError(
                f"engine 'arrow': {path_text(steps)} is inside an array or map; use engine='sql'"
            )


def _protect_arrow(df: Any, marked: list[tuple[tuple[Step, ...], Any]], keyring: Keyring) -> Any:
    from pyspark.sql import functions as sf

    _arrow_only(marked)
    seal_udf = _arrow_udf(keyring, "seal", "")
    out = df
    for steps, _ in marked:
        name = steps[0].name

        def seal(value: Any) -> Any:
            return seal_udf(_json_text(value))

        out = out.withColumn(name, _rebuild(sf.col(f"`{name}`"), steps[1:], seal))
    return out


def _unprotect_arrow(  # noqa: PLR0917 - private, called once
    df: Any,
    schema: Any,
    marked: list[tuple[tuple[Step, ...], Any]],
    keyring: Keyring,
    types: Mapping[str, str],
    on_error: OnError,
) -> Any:
    from pyspark.sql import functions as sf

    _arrow_only(marked)
    out = df
    for steps, _ in marked:
        target = _target_type(schema, steps, types)
        open_udf = _arrow_udf(keyring, "open" if on_error == "raise" else "open_or_null", path_text(steps))

        def open_(value: Any, target: str | None = target, open_udf: Any = open_udf) -> Any:
            text = open_udf(value)
            if target is None:
                return text
            return sf.from_json(sf.concat(sf.lit("["), text, sf.lit("]")), f"array<{target}>")[0]

        name = steps[0].name
        out = out.withColumn(name, _rebuild(sf.col(f"`{name}`"), steps[1:], open_))
    return out


def _arrow_udf(keyring: Keyring, mode: str, field: str) -> Any:
    """A pandas UDF (string -> string) running the core cipher over each Arrow batch."""
    from pyspark.sql.pandas import functions as pandas_functions

    pandas_udf: Any = pandas_functions.pandas_udf
    ids = keyring.ids
    current = keyring.current
    material = {kid: keyring.key(kid) for kid in ids}  # pickled into the UDF, never into the plan

    import pandas as pd

    made: list[Any] = []  # one cipher per Python worker, built on its first batch

    def run(values: Any) -> Any:
        from babelq.gdpr import AesGcmCipher, Keyring, UndecryptableError

        if not made:
            made.append(AesGcmCipher(Keyring(material, current, source="spark")))
        cipher = made[0]
        if mode == "seal":
            seal = cipher.encrypt
            return pd.Series([None if v is None else seal(v.encode("utf-8")) for v in values], dtype=object)

        def open_one(v: Any) -> Any:
            if v is None:
                return None
            try:
                return cipher.decrypt(v).decode("utf-8")
            except UndecryptableError as exc:
                if mode == "open_or_null":
                    return None
                raise UndecryptableError(field, exc.problem) from None

        return pd.Series([open_one(v) for v in values], dtype=object)

    run.__annotations__ = {"values": pd.Series, "return": pd.Series}  # how PySpark picks a Series UDF
    return pandas_udf(run, "string")
