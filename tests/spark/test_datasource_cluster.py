"""On a real standalone cluster, executors read the broker: two executor JVMs, not the driver.

The cluster is the session's ``spark_cluster`` (a master and two one-core workers from PySpark's
own ``spark-class``, ``tests/cluster.py``). A child process (one pytest process holds one
SparkContext) streams a Redis queue through the ``babelq`` source with four read slots per
micro-batch and records each row's ``read_by``; meanwhile this test lists the executor JVMs the
workers launched. Every row must have been read by an executor, by at least two of them, and
each ``read_by`` must name one of those JVMs (never the driver's); every message is read once
and acked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import make
from babelq.transports import Outgoing, open_transport
from conftest import require_service

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.cluster, pytest.mark.live]

CHILD = textwrap.dedent(
    """
    import json, sys
    from babelq.spark.datasource import register
    from babelq.spark.session import get_session

    master, url, queue, out, ck = sys.argv[1:6]
    spark = get_session(app_name="babelq-read-by", master=master,
                        **{"spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1"})
    register(spark)
    rows = []
    query = (spark.readStream.format("babelq").option("url", url).option("queue", queue)
             .option("numPartitions", "4").option("maxMessagesPerBatch", "400").load()
             .writeStream.foreachBatch(lambda df, _: rows.extend(df.select("body", "read_by").collect()))
             .option("checkpointLocation", ck).trigger(availableNow=True).start())
    query.awaitTermination(240)
    with open(out, "w") as fh:
        json.dump({"bodies": [bytes(r["body"]).decode() for r in rows],
                   "read_by": [r["read_by"] for r in rows],
                   "driver_jvm": spark.sparkContext._gateway.proc.pid}, fh)
    spark.stop()
    """
)
_SCRUBBED = ("BABELQ_BROKER", "BABELQ_SPARK_MASTER", "MASTER", "SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS",
             "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")  # fmt: skip


def test_reads_happen_in_at_least_two_executor_processes(
    spark_cluster: Any, unique_queue: str, tmp_path: Path
) -> None:
    host, port = require_service("redis")
    url = f"redis://{host}:{port}/0"
    bodies = [make("urn:babel:tests:item", {"i": i}, queue=unique_queue).encode() for i in range(800)]
    transport = open_transport(url)
    try:
        transport.publish_many(unique_queue, [Outgoing(b) for b in bodies])
        script, out = tmp_path / "child.py", tmp_path / "out.json"
        script.write_text(CHILD)
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
        env["SPARK_LOCAL_IP"] = "127.0.0.1"  # the driver must be reachable at the address it advertises
        child = subprocess.Popen(
            [sys.executable, str(script), spark_cluster.master_url, url, unique_queue, str(out),
             str(tmp_path / "ck")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
        )  # fmt: skip
        executors: dict[int, str] = {}
        deadline = time.monotonic() + 300
        while child.poll() is None and time.monotonic() < deadline:
            executors.update({e.pid: e.executor_id for e in spark_cluster.executor_pids()})
            time.sleep(0.2)
        _, stderr = child.communicate(timeout=60)
        assert child.returncode == 0, stderr[-4000:]
        result = json.loads(out.read_text())
        assert sorted(result["bodies"]) == sorted(b.decode() for b in bodies)  # each once
        readers = set(result["read_by"])
        assert {r.split(" ")[0] for r in readers} == {"executor"}, readers
        pids = {int(r.rsplit(":", 1)[1]) for r in readers}
        assert len(pids) >= 2, f"every read happened in one executor: {readers}"
        assert pids <= set(executors), (readers, executors)  # the executor JVMs the workers launched
        assert result["driver_jvm"] not in pids
        assert transport.size(unique_queue) == 0 and transport.reserved(unique_queue) == 0
    finally:
        transport.purge(unique_queue)
        transport.close()
