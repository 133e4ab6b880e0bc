"""GDPR field encryption benchmark: Spark's aes_encrypt vs a pandas UDF vs a plain Python UDF.

One run, one local[2] SparkSession, N rows (default 500k) with two marked string columns
(``email``, ``full_name``) and two plain ones, written to Spark's ``noop`` sink; warm-up, then
best of 3 rounds, the contenders interleaved round by round:

* protect: ``babelq.spark.gdpr.protect`` engine ``sql`` (Spark's ``aes_encrypt(.., 'GCM')`` on the
  JVM) / engine ``arrow`` (the core cipher in a vectorized pandas UDF) / a plain Python UDF
  calling the core cipher row by row;
* unprotect: the same three over the protected rows (cached), decrypting to strings.

Every contender's output is checked first: a protected value from each opens with the core
cipher. Then the core itself (no Spark): ``babelq.gdpr.protected``/``unprotected`` of one
five-field message, messages per second, as the runtime middleware pays it.

Usage: ``.venv/bin/python bench/bench_gdpr.py [--rows N] [--skip-spark]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from _util import format_rate, interleaved_best, print_table, yardstick
from babelq.gdpr import AesGcmCipher, Keyring, generate_key, marked_steps, protected, unprotected
from babelq.gdpr.fields import protected_with, unprotected_with

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "email": {"type": "string", "x-gdpr-sensitive": True},
        "full_name": {"type": "string", "x-gdpr-sensitive": True},
        "tier": {"type": "string"},
        "country": {"type": "string"},
    },
}
MARKED = ["email", "full_name"]

_CIPHERS: dict[str, AesGcmCipher] = {}


def _cipher(material: dict[str, bytes], current: str) -> AesGcmCipher:
    """One core cipher per Python worker (AESGCM objects do not pickle; key bytes do)."""
    found = _CIPHERS.get(current)
    if found is None:
        found = _CIPHERS[current] = AesGcmCipher(Keyring(material, current, source="bench"))
    return found


def plain_udfs(keyring: Keyring) -> tuple[Any, Any]:
    """Row-at-a-time Python UDFs over the core cipher: the baseline the issue asks for."""
    from pyspark.sql import functions as sf

    material = {kid: keyring.key(kid) for kid in keyring.ids}
    current = keyring.current

    def seal(value):  # type: ignore[no-untyped-def]  # no hints: Spark would try an Arrow UDF
        if value is None:
            return None
        return _cipher(material, current).encrypt(json.dumps(value).encode())

    def open_(value):  # type: ignore[no-untyped-def]
        if value is None:
            return None
        return json.loads(_cipher(material, current).decrypt(value))

    return sf.udf(seal, "string"), sf.udf(open_, "string")


def race(n: int, paths: dict[str, Any], repeats: int = 3) -> dict[str, float]:
    best = dict.fromkeys(paths, float("inf"))
    for df in paths.values():  # warm-up: code generation, Python workers
        df.write.format("noop").mode("overwrite").save()
    for _ in range(repeats):
        for label, df in paths.items():
            start = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            best[label] = min(best[label], time.perf_counter() - start)
    return {label: n / seconds for label, seconds in best.items()}


def spark_bench(n: int, keyring: Keyring) -> None:
    from pyspark.sql import functions as sf

    from babelq.spark.gdpr import protect, unprotect
    from babelq.spark.session import get_session

    spark = get_session(app_name="bench-gdpr", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    src = spark.range(n).selectExpr(
        "id",
        "concat('customer', cast(id as string), '@example.com') as email",
        "concat('Zoë Müller ', cast(id % 1000 as string)) as full_name",
        "case when id % 3 = 0 then 'gold' else 'basic' end as tier",
        "'BE' as country",
    )
    seal_udf, open_udf = plain_udfs(keyring)
    protect_paths = {
        "spark aes_encrypt GCM (engine=sql)": protect(src, SCHEMA, keyring, engine="sql"),
        "pandas UDF, core cipher (engine=arrow)": protect(src, SCHEMA, keyring, engine="arrow"),
        "plain Python UDF, core cipher": src.select(
            "id", *(seal_udf(c).alias(c) for c in MARKED), "tier", "country"
        ),
    }
    core = AesGcmCipher(keyring)
    for label, df in protect_paths.items():  # each contender's output opens with the core cipher
        row = df.where("id = 7").first()
        assert row is not None
        clear = unprotected(row.asDict(), SCHEMA, core)
        assert clear["email"] == "customer7@example.com", (label, clear)

    sealed = protect(src, SCHEMA, keyring, engine="sql").cache()
    sealed.count()
    unprotect_paths = {
        "spark try_aes_decrypt GCM (engine=sql)": unprotect(sealed, SCHEMA, keyring, engine="sql"),
        "pandas UDF, core cipher (engine=arrow)": unprotect(sealed, SCHEMA, keyring, engine="arrow"),
        "plain Python UDF, core cipher": sealed.select(
            "id", *(open_udf(c).alias(c) for c in MARKED), "tier", "country"
        ),
    }
    for label, df in unprotect_paths.items():
        row = df.where("id = 7").first()
        assert row is not None and row["email"] == "customer7@example.com", label
    baseline = src.select(sf.col("id"), *MARKED, "tier", "country")

    for title, paths in (("protect", protect_paths), ("unprotect", unprotect_paths)):
        rates = race(n, {"no encryption (same columns)": baseline, **paths})
        plain = rates["plain Python UDF, core cipher"]
        print(f"\n{title}: {n:,} rows x {len(MARKED)} marked columns, local[2], best of 3")
        print_table(
            ["path", "rows/s", "vs plain UDF"],
            [[label, format_rate(rate), f"{rate / plain:.2f}x"] for label, rate in rates.items()],
        )
    sealed.unpersist()
    spark.stop()


def core_bench(keyring: Keyring) -> None:
    cipher = AesGcmCipher(keyring)
    schema: dict[str, Any] = {
        "properties": {
            "email": {"x-gdpr-sensitive": True},
            "profile": {"properties": {"full_name": {"x-gdpr-sensitive": True}}},
            "addresses": {"items": {"properties": {"line": {"x-gdpr-sensitive": True}}}},
            "card": {"x-gdpr-sensitive": True},
        }
    }
    data = {
        "customer_id": 1042,
        "email": "alice@example.com",
        "profile": {"full_name": "Alice Example", "tier": "gold"},
        "addresses": [{"line": "1 Main St", "city": "Ghent"}, {"line": "2 Side St", "city": "Lyon"}],
        "card": {"last4": "4242", "holder": "ALICE"},
    }
    sealed = protected(data, schema, cipher)
    steps = marked_steps(schema)  # what the middleware caches per URN
    timings = interleaved_best(
        {
            "protected() one message, 5 values": lambda: protected(data, schema, cipher),
            "unprotected() one message, 5 values": lambda: unprotected(sealed, schema, cipher),
            "protected_with() cached paths (middleware)": lambda: protected_with(data, steps, cipher),
            "unprotected_with() cached paths (middleware)": lambda: unprotected_with(sealed, steps, cipher),
            "AesGcmCipher.encrypt one value": lambda: cipher.encrypt(b'"alice@example.com"'),
        },
        rounds=7,
    )
    print(
        "\ncore (no Spark), best of 7 interleaved rounds; "
        f"yardstick (10M-iteration loop): {yardstick():.3f} s"
    )
    print_table(["call", "per second"], [[t.name, format_rate(t.per_second)] for t in timings.values()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--skip-spark", action="store_true")
    args = parser.parse_args()
    keyring = Keyring.parse(f"bench:{generate_key()}")
    core_bench(keyring)
    if not args.skip_spark:
        spark_bench(args.rows, keyring)


if __name__ == "__main__":
    main()
