"""A failed task attempt is retried by Spark and reads the same messages; nothing is lost or acked
unread.

The session-wide ``spark`` fixture runs ``local[2]``, where Spark never retries a task, so this
test starts its own Spark (``local[2,3]``: three attempts per task) in a child process. The
streaming query's sink runs a function over Arrow batches that records what each attempt of
each partition read, then fails the first attempt of partition 0 *after* reading it (the worst
moment: the executor's reservation exists, its rows are in flight), and SIGKILLs the Python
worker running the first attempt of partition 1 at the same point. The retried attempts must get
the same messages back (a slot's tag is taken once), and the commit must ack exactly those.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from babelq.transports import Outgoing, open_transport

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CHILD = textwrap.dedent(
    """
    import json, os, sys
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from babelq.spark.datasource import register

    url, queue, out, ck = sys.argv[1:5]
    spark = (SparkSession.builder.master("local[2,3]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    register(spark)

    def read_then_fail_once(batches):
        from pyspark import TaskContext
        context = TaskContext.get()
        got = [b for batch in batches for b in batch.column("body").to_pylist()]
        name = f"{out}/p{context.partitionId()}-a{context.attemptNumber()}.json"
        with open(name, "w") as fh:
            json.dump([b.decode() for b in got], fh)
        if context.attemptNumber() == 0 and context.partitionId() == 0:
            raise RuntimeError("injected failure after reading")
        if context.attemptNumber() == 0 and context.partitionId() == 1:
            os.kill(os.getpid(), 9)  # the executor's Python worker dies holding its reservation
        import pyarrow as pa
        yield pa.RecordBatch.from_arrays([pa.array(got, pa.binary())], names=["body"])

    sunk = []

    def sink(df, batch_id):
        rows = df.select("body").mapInArrow(read_then_fail_once, "body binary").collect()
        sunk.extend(bytes(r["body"]).decode() for r in rows)

    query = (spark.readStream.format("babelq").option("url", url).option("queue", queue)
             .option("numPartitions", "2").option("visibilityTimeout", "30").load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    with open(f"{out}/sunk.json", "w") as fh:
        json.dump(sunk, fh)
    spark.stop()
    """
)


def test_a_retried_task_reads_what_its_failed_or_killed_attempt_read(
    tmp_path: Path, unique_queue: str
) -> None:
    db = tmp_path / "q.db"
    bodies = [f'{{"job":"urn:babel:test:retry","n":{i}}}' for i in range(40)]
    publisher = open_transport(f"sqlite://{db}")
    publisher.publish_many(unique_queue, [Outgoing(b.encode()) for b in bodies])
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    done = subprocess.run(
        [sys.executable, str(script), f"sqlite://{db}", unique_queue, str(out), str(tmp_path / "ck")],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    attempts = {p.stem: json.loads(p.read_text()) for p in out.glob("p*-a*.json")}
    # both partitions were retried: one after an exception, one after its worker was SIGKILLed
    assert sorted(attempts) == ["p0-a0", "p0-a1", "p1-a0", "p1-a1"], sorted(attempts)
    for p in ("p0", "p1"):
        assert attempts[f"{p}-a0"]
        assert attempts[f"{p}-a1"] == attempts[f"{p}-a0"]  # the same messages, in order
    sunk = json.loads((out / "sunk.json").read_text())
    assert sorted(sunk) == sorted(bodies)  # each exactly once: nothing lost, nothing read twice
    assert publisher.size(unique_queue) == 0 and publisher.reserved(unique_queue) == 0  # all acked
    publisher.close()
