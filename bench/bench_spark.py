"""Spark codec benchmark: babelq's JVM encode/decode next to plain to_json/from_json and a UDF.

One run, local[2], N rows (default 1M) generated in Spark, written to Spark's ``noop`` sink,
best of 3 after a warm-up. Compared paths:

* encode: ``babelq.spark.encode`` / plain ``to_json`` of the same envelope shape / the
  ``babelqueue`` codec (``EnvelopeCodec.make`` + ``encode``) inside a Python UDF;
* decode: ``babelq.spark.decode`` (typed columns + verdict; data as JSON text, and data parsed
  with a schema) / plain ``from_json`` with the envelope schema / ``EnvelopeCodec.decode`` +
  ``accepts`` inside a Python UDF.

Usage: ``.venv/bin/python bench/bench_spark.py [--rows N]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

URN = "urn:babel:orders:created"
DATA_FIELDS = ["order_id", "amount_cents", "currency", "customer", "ratio", "tags"]


def rows(spark: Any, n: int) -> Any:
    """N order rows: longs, strings with non-ASCII, a nested struct, a double, an array."""
    return spark.range(n).selectExpr(
        "id as order_id",
        "id * 7 + 1299 as amount_cents",
        "case when id % 3 = 0 then 'EUR' else 'USD' end as currency",
        "named_struct('name', concat('Zoë Müller ', cast(id % 1000 as string)), "
        "'email', concat('c', cast(id as string), '@example.com')) as customer",
        "cast(id % 1000 as double) / 8 as ratio",
        "array('new', concat('batch-', cast(id % 17 as string))) as tags",
    )


def timed(name: str, n: int, df: Any, repeats: int = 3) -> float:
    """Rows/s of writing ``df`` to the noop sink: best of ``repeats`` after one warm-up."""
    df.write.format("noop").mode("overwrite").save()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        best = min(best, time.perf_counter() - start)
    rate = n / best
    print(f"  {name:<46} {rate / 1e3:9.0f}k rows/s   ({best:.2f}s)")
    return rate


def encode_paths(spark: Any, src: Any, n: int) -> dict[str, float]:
    from pyspark.sql import functions as sf
    from pyspark.sql import types as stypes

    from babelq.spark.encode import encode

    print("encode")
    results = {}
    results["babelq"] = timed(
        "babelq.spark.encode (body bytes)",
        n,
        encode(src, urn=URN, data=DATA_FIELDS, queue="orders").select("body"),
    )
    envelope = sf.struct(
        sf.lit(URN).alias("job"),
        sf.expr("uuid()").alias("trace_id"),
        sf.struct(*DATA_FIELDS).alias("data"),
        sf.struct(
            sf.expr("uuid()").alias("id"),
            sf.lit("orders").alias("queue"),
            sf.lit("python").alias("lang"),
            sf.lit(1).alias("schema_version"),
            sf.unix_millis(sf.current_timestamp()).alias("created_at"),
        ).alias("meta"),
        sf.lit(0).alias("attempts"),
    )
    results["to_json"] = timed(
        "plain to_json (same shape)", n, src.select(sf.to_json(envelope).cast("binary").alias("body"))
    )

    @sf.udf(returnType=stypes.BinaryType())  # type: ignore[misc]
    def udf_encode(row: Any) -> bytes:
        from babelqueue import EnvelopeCodec

        env = EnvelopeCodec.make(URN, row.asDict(recursive=True), queue="orders")
        return EnvelopeCodec.encode(env).encode("utf-8")  # type: ignore[no-any-return]

    results["udf"] = timed(
        "babelqueue make+encode in a Python UDF",
        n,
        src.select(udf_encode(sf.struct(*DATA_FIELDS)).alias("body")),
    )
    return results


def decode_paths(spark: Any, bodies: Any, data_schema: Any, n: int) -> dict[str, float]:
    from pyspark.sql import functions as sf
    from pyspark.sql import types as stypes

    from babelq.spark.decode import decode
    from babelq.spark.schema import envelope_schema

    print("decode")
    results = {}
    results["babelq"] = timed("babelq.spark.decode (typed + verdict, data_json)", n, decode(bodies))
    results["babelq_schema"] = timed(
        "babelq.spark.decode (typed + verdict, data struct)", n, decode(bodies, data_schema=data_schema)
    )
    parsed = sf.from_json(sf.col("body").cast("string"), envelope_schema(data_schema))
    results["from_json"] = timed(
        "plain from_json (envelope schema)", n, bodies.select(parsed.alias("e")).select("e.*")
    )

    verdict_type = stypes.StructType(
        [stypes.StructField("urn", stypes.StringType()), stypes.StructField("accepted", stypes.BooleanType())]
    )

    @sf.udf(returnType=verdict_type)  # type: ignore[misc]
    def udf_decode(body: bytes) -> tuple[str | None, bool]:
        from babelqueue import EnvelopeCodec

        try:
            env = EnvelopeCodec.decode(body.decode("utf-8"))
        except Exception:
            return None, False
        return env.get("job"), EnvelopeCodec.accepts(env)

    results["udf"] = timed(
        "babelqueue decode+accepts in a Python UDF",
        n,
        bodies.select(udf_decode("body").alias("v")).select("v.*"),
    )
    return results


def pipeline_stage_timings(spark: Any, n: int) -> dict[str, float]:
    """HOOK for the pipeline engineer: add the demo pipeline's stage timings here.

    Return ``{stage name: rows per second}``; the figures are printed after the codec table.
    """
    return {}


def report(
    title: str, results: dict[str, float], ours: str, targets: dict[str, Callable[[dict[str, float]], float]]
) -> None:
    print(title)
    for label, baseline in targets.items():
        print(f"  {ours} / {label}: {results[ours] / baseline(results):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    n = args.rows

    from babelq.spark.encode import encode
    from babelq.spark.session import get_session

    spark = get_session("babelq-bench", master="local[2]")
    src = rows(spark, n).cache()
    src.count()
    enc = encode_paths(spark, src, n)

    data_schema = src.select(*DATA_FIELDS).schema
    bodies = encode(src, urn=URN, data=DATA_FIELDS, queue="orders").select("body").cache()
    bodies.count()
    dec = decode_paths(spark, bodies, data_schema, n)

    print("ratios (targets: encode >= 5x UDF and >= 0.4x to_json; decode >= 1.2x max(from_json, UDF))")
    report("encode", enc, "babelq", {"UDF": lambda r: r["udf"], "to_json": lambda r: r["to_json"]})
    faster = lambda r: max(r["from_json"], r["udf"])  # noqa: E731
    report("decode", dec, "babelq", {"max(from_json, UDF)": faster})
    report("decode", dec, "babelq_schema", {"max(from_json, UDF)": faster})
    stages = pipeline_stage_timings(spark, n)
    if stages:
        print("pipeline stages")
        for stage, rate in stages.items():
            print(f"  {stage:<46} {rate / 1e3:9.0f}k rows/s")
    spark.stop()


if __name__ == "__main__":
    main()
