"""On a real standalone cluster, executors read the broker: two executor JVMs, not the driver;
and an executor SIGKILLed while it holds its reservations loses nothing.

The cluster is the session's ``spark_cluster`` (a master and two one-core workers from PySpark's
own ``spark-class``, ``tests/cluster.py``). A child process (one pytest process holds one
SparkContext) streams a Redis queue through the ``babelq`` source with four read slots per
micro-batch and records each row's ``read_by``; meanwhile this test lists the executor JVMs the
workers launched. Every row must have been read by an executor, by at least two of them, and
each ``read_by`` must name one of those JVMs (never the driver's); every message is read once
and acked. The second test kills one executor JVM at the worst moment for an executor read: its
task has reserved its slot and holds the rows; Spark runs the task again elsewhere, which must
read the same messages.
"""

from __future__ import annotations

import json
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
from spark_defaults import isolated_env

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


def _run_child(cluster: Any, script: str, args: list[str], tmp_path: Path) -> subprocess.Popen[str]:
    path = tmp_path / "child.py"
    path.write_text(script)
    env = isolated_env(_SCRUBBED)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"  # the driver must be reachable at the address it advertises
    return subprocess.Popen(
        [sys.executable, str(path), cluster.master_url, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip


def test_reads_happen_in_at_least_two_executor_processes(
    spark_cluster: Any, unique_queue: str, tmp_path: Path
) -> None:
    host, port = require_service("redis")
    url = f"redis://{host}:{port}/15"
    bodies = [make("urn:babel:tests:item", {"i": i}, queue=unique_queue).encode() for i in range(800)]
    transport = open_transport(url)
    try:
        transport.publish_many(unique_queue, [Outgoing(b) for b in bodies])
        out = tmp_path / "out.json"
        child = _run_child(
            spark_cluster, CHILD, [url, unique_queue, str(out), str(tmp_path / "ck")], tmp_path
        )
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


KILLED_CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from babelq.spark.datasource import register
    from babelq.spark.session import get_session

    master, url, queue, out, ck = sys.argv[1:6]
    spark = get_session(app_name="babelq-executor-killed", master=master,
                        **{"spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1"})
    register(spark)

    def hold(batches):
        from pyspark import TaskContext
        import pyarrow as pa
        context = TaskContext.get()
        got = [b for batch in batches for b in batch.to_pylist()]
        name = f"{out}/p{context.partitionId()}-a{context.attemptNumber()}.json"
        with open(name + ".tmp", "w") as fh:
            json.dump({"bodies": [r["body"].decode() for r in got],
                       "read_by": [r["read_by"] for r in got]}, fh)
        os.rename(name + ".tmp", name)
        if context.attemptNumber() == 0:
            time.sleep(6)  # holding the slot's reservation: the test kills this executor now
        yield pa.RecordBatch.from_arrays([pa.array([r["body"] for r in got], pa.binary())], names=["body"])

    sunk = []
    query = (spark.readStream.format("babelq").option("url", url).option("queue", queue)
             .option("numPartitions", "4").option("visibilityTimeout", "60").load()
             .writeStream
             .foreachBatch(lambda df, _: sunk.extend(
                 bytes(r["body"]).decode()
                 for r in df.select("body", "read_by").mapInArrow(hold, "body binary").collect()))
             .option("checkpointLocation", ck).trigger(availableNow=True).start())
    query.awaitTermination(240)
    with open(f"{out}/sunk.json", "w") as fh:
        json.dump(sunk, fh)
    spark.stop()
    """
)


def test_an_executor_killed_holding_its_reservations_loses_nothing(
    spark_cluster: Any, unique_queue: str, tmp_path: Path
) -> None:
    host, port = require_service("redis")
    url = f"redis://{host}:{port}/15"
    bodies = [make("urn:babel:tests:item", {"i": i}, queue=unique_queue).encode() for i in range(400)]
    transport = open_transport(url)
    out = tmp_path / "out"
    out.mkdir()
    try:
        transport.publish_many(unique_queue, [Outgoing(b) for b in bodies])
        child = _run_child(
            spark_cluster, KILLED_CHILD, [url, unique_queue, str(out), str(tmp_path / "ck")], tmp_path
        )
        killed: int | None = None
        deadline = time.monotonic() + 300
        while child.poll() is None and time.monotonic() < deadline:
            if killed is None:
                for path in out.glob("p*-a0.json"):
                    readers = set(json.loads(path.read_text())["read_by"])
                    if len(readers) == 1:  # this attempt read its slot and is now holding it
                        killed = int(readers.pop().rsplit(":", 1)[1])
                        spark_cluster.kill_executor(killed)
                        break
            time.sleep(0.1)
        _, stderr = child.communicate(timeout=60)
        assert child.returncode == 0, stderr[-4000:]
        assert killed is not None, "no attempt was seen holding its slot"
        attempts = {p.stem: json.loads(p.read_text()) for p in out.glob("p*-a*.json")}
        retried = sorted(name for name in attempts if not name.endswith("-a0"))
        assert retried, f"the killed executor's task was not run again: {sorted(attempts)}"
        for name in retried:  # a retried slot read exactly what its first attempt had reserved
            first = attempts[name.rsplit("-a", 1)[0] + "-a0"]
            assert attempts[name]["bodies"] == first["bodies"]
            assert killed not in {int(r.rsplit(":", 1)[1]) for r in attempts[name]["read_by"]}
        sunk = json.loads((out / "sunk.json").read_text())
        assert sorted(sunk) == sorted(b.decode() for b in bodies)  # nothing lost, nothing twice
        assert transport.size(unique_queue) == 0 and transport.reserved(unique_queue) == 0  # all acked
    finally:
        transport.purge(unique_queue)
        transport.close()
