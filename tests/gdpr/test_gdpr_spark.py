"""babelq.spark.gdpr: marked DataFrame columns as the core cipher's ciphertext, both engines."""

from __future__ import annotations

import base64
import copy
import io
import json
from contextlib import redirect_stdout
from typing import Any

import pytest

from babelq.errors import ConfigurationError
from babelq.gdpr import Keyring, protected, unprotected

from .support import DATA, SCHEMA, ReferenceAesGcm, cipher_for, key_b64

pytestmark = pytest.mark.spark

DDL = (
    "customer_id long, email string, profile struct<full_name:string,tier:string>, "
    "addresses array<struct<line:string,city:string>>, card struct<holder:string,last4:string>"
)
CARD_TYPE = "struct<holder:string,last4:string>"


def rows() -> list[dict[str, Any]]:
    other = copy.deepcopy(DATA)
    other.update(customer_id=7, email="Zoë ünïcode@example.com", addresses=[], card=None)
    return [copy.deepcopy(DATA), other]


def as_python(row: Any) -> dict[str, Any]:
    return json.loads(json.dumps(row.asDict(recursive=True)))


@pytest.fixture
def frame(spark: Any) -> Any:
    return spark.createDataFrame([json.loads(json.dumps(r)) for r in rows()], DDL)


@pytest.mark.parametrize("engine", ["auto", "sql", "arrow"])
def test_spark_protected_values_open_with_the_core_and_reference_ciphers(frame: Any, engine: str) -> None:
    from babelq.spark.gdpr import protect

    key = key_b64()
    schema = _no_arrays(SCHEMA) if engine == "arrow" else SCHEMA
    sealed = [as_python(r) for r in protect(frame, schema, cipher_for(("k1", key)), engine=engine).collect()]
    core, ref = cipher_for(("k1", key)), ReferenceAesGcm(base64.b64decode(key))
    for got, want in zip(sealed, rows(), strict=True):
        assert isinstance(got["email"], str) and got["email"] != want["email"]
        assert got["customer_id"] == want["customer_id"] and got["profile"]["tier"] == want["profile"]["tier"]
        assert unprotected(got, schema, core) == want
        if engine != "arrow":
            assert [a["city"] for a in got["addresses"]] == [a["city"] for a in want["addresses"]]
            from babelqueue import gdpr as bq_gdpr

            theirs = copy.deepcopy(got)
            bq_gdpr.unprotect(theirs, schema, ref)
            assert theirs == want


@pytest.mark.parametrize("engine", ["auto", "sql", "arrow"])
def test_core_protected_values_open_in_spark_after_rotation(spark: Any, engine: str) -> None:
    from babelq.spark.gdpr import unprotect

    old = key_b64()
    schema = _no_arrays(SCHEMA) if engine == "arrow" else SCHEMA
    sealed = [protected(r, schema, cipher_for(("old", old))) for r in rows()]
    text_ddl = DDL.replace(f"card {CARD_TYPE}", "card string")  # the marked struct travels as one string
    df = spark.createDataFrame(sealed, text_ddl)
    rotated = Keyring.parse(f"new:{key_b64()},old:{old}")
    out = unprotect(df, schema, rotated, types={"card": CARD_TYPE}, engine=engine)
    assert [as_python(r) for r in out.collect()] == rows()


@pytest.mark.parametrize("engine", ["sql", "arrow"])
def test_a_value_no_key_opens_fails_the_job_naming_field_and_key_ids(frame: Any, engine: Any) -> None:
    from babelq.spark.gdpr import protect, unprotect

    sealed = protect(frame.select("customer_id", "email"), SCHEMA, cipher_for(("k1", key_b64())))
    stranger = Keyring.parse(f"k2:{key_b64()}")
    with pytest.raises(
        Exception, match=r"data\.email: cannot be decrypted with any known key \(tried 'k2'\)"
    ):
        unprotect(sealed, SCHEMA, stranger, engine=engine).collect()
    nulls = unprotect(sealed, SCHEMA, stranger, on_error="null", engine=engine).collect()
    assert [r.email for r in nulls] == [None, None] and [r.customer_id for r in nulls] == [1042, 7]


@pytest.mark.parametrize("engine", ["auto", "sql"])
def test_key_bytes_never_reach_the_plan(frame: Any, engine: str) -> None:
    from babelq.spark.gdpr import protect, unprotect

    key = key_b64()
    ring = Keyring.parse(f"k1:{key}")
    sealed = protect(frame, SCHEMA, ring, engine=engine)  # type: ignore[arg-type]
    df = unprotect(sealed, SCHEMA, ring, types={"card": CARD_TYPE}, engine=engine)  # type: ignore[arg-type]
    out = io.StringIO()
    with redirect_stdout(out):
        df.explain(extended=True)
    plan = out.getvalue()
    assert "aes_encrypt" in plan.lower() or "aesencrypt" in plan.lower() or "aes_decrypt" in plan.lower()
    raw = base64.b64decode(key)
    assert raw.hex().upper() not in plan.upper() and key not in plan
    assert [as_python(r) for r in df.collect()] == rows()


def test_unmarked_or_absent_columns_are_left_alone(frame: Any) -> None:
    from babelq.spark.gdpr import protect

    ring = Keyring.parse(f"k1:{key_b64()}")
    only = frame.select("customer_id")
    assert protect(only, SCHEMA, ring) is only
    with pytest.raises(ConfigurationError, match=r"^engine 'arrow': addresses\[\]\.line is inside an array"):
        protect(frame, SCHEMA, ring, engine="arrow")


def _no_arrays(schema: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(schema)
    out["properties"]["addresses"]["items"]["properties"]["line"].pop("x-gdpr-sensitive")
    return out


def test_map_values_need_extended_paths_as_in_the_core(spark: Any) -> None:
    """A map column's values are marked through additionalProperties: refused by default."""
    from babelq.gdpr import ProtectError
    from babelq.spark.gdpr import protect, unprotect

    marked = {"type": "string", "x-gdpr-sensitive": True}
    schema = {"properties": {"labels": {"additionalProperties": marked}}}
    df = spark.createDataFrame([({"home": "Secret Lane"},)], "labels map<string,string>")
    ring = Keyring.parse(f"k1:{key_b64()}")
    with pytest.raises(ProtectError, match=r"^data\.labels\.\*: .*additionalProperties.*paths='extended'"):
        protect(df, schema, ring)
    # collected once: each evaluation of protect draws fresh nonces
    sealed = spark.createDataFrame(protect(df, schema, ring, paths="extended").collect(), df.schema)
    [row] = sealed.collect()
    assert row["labels"]["home"] != "Secret Lane"
    assert unprotected(as_python(row), schema, cipher_for(("k1", ring_key(ring))), paths="extended") == {
        "labels": {"home": "Secret Lane"}}  # fmt: skip
    assert unprotect(sealed, schema, ring).collect() == sealed.collect()  # default: left as it is
    assert unprotect(sealed, schema, ring, paths="extended").collect() == df.collect()


def ring_key(ring: Keyring) -> str:
    return base64.b64encode(ring.key(ring.current)).decode("ascii")
