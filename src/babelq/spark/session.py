"""One place that builds the local SparkSession babelq's jobs, CLI and tests use.

Local mode is the embedded default; on a cluster pass ``master=None`` (or an existing
session to the jobs) and Spark's own configuration wins.
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: the Spark setting that makes the VARIANT parser keep the last of repeated keys (as the core does)
DUPLICATE_KEYS_CONF = "spark.sql.variant.allowDuplicateKeys"


def get_session(app_name: str = "babelq", master: str | None = "local[2]", **conf: str) -> Any:
    """Return the active SparkSession or build a small local one.

    Spark's Python workers run ``PYSPARK_PYTHON`` (default: ``python3`` on PATH, which may
    not have babelq installed), so we point it at this interpreter unless the caller set it.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    defaults = {
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "2g",
        "spark.ui.showConsoleProgress": "false",
        # HotSpot never JIT-compiles a method over 8000 bytes of bytecode; Spark's generated
        # code for a wide projection (babelq.spark.decode's) is bigger, and runs about twice as
        # slow interpreted. On a cluster, set the same flag in spark.executor.extraJavaOptions.
        "spark.driver.extraJavaOptions": "-XX:-DontCompileHugeMethods",
        "spark.executor.extraJavaOptions": "-XX:-DontCompileHugeMethods",
        # JSON with a repeated object key keeps the last value in Python's json, orjson and
        # every other SDK; Spark's VARIANT parser refuses such text unless this is on, and
        # babelq.spark.decode would then call an otherwise valid body poison.
        DUPLICATE_KEYS_CONF: "true",
    }
    defaults.update(conf)
    # babelq's JVM helpers (babelq.spark.jvm): the envelope scanner and Python's float repr
    from babelq.spark.jvm import jar_path

    jars = [j for j in defaults.get("spark.jars", "").split(",") if j]
    defaults["spark.jars"] = ",".join([*jars, jar_path()] if jar_path() not in jars else jars)
    for key, value in defaults.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
