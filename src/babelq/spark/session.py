"""One place that builds the local SparkSession babelq's jobs, CLI and tests use.

Local mode is the embedded default; on a cluster pass ``master=None`` (or an existing
session to the jobs) and Spark's own configuration wins.
"""

from __future__ import annotations

import os
import sys
from typing import Any


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
    }
    defaults.update(conf)
    for key, value in defaults.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
