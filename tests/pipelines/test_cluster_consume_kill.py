"""``babelq consume`` on the standalone cluster, one executor JVM SIGKILLed mid-run.

The orders example pipeline reads a Redis queue on the cluster's executors, whose Python has no
babelq (``bare_python``: ``get_session`` ships the package, and the pipeline's own module travels
with its functions), and writes each order into a PostgreSQL table in a schema of the test's own.
Once the table holds some but not all orders, the first executor seen running a task that
launched a moment before gets SIGKILL, so the kill lands inside a task. Spark retries the task;
the retried read takes back its slot's messages, and the processed ids make what the killed task
had committed harmless.

Then, from outside the job: the run ended "drained"; every order is in the table once (rows =
distinct order ids = the orders published); each bad message is on the DLQ once; the queue is
empty; the event log shows a task lost with the killed executor, and nothing failed for another
reason.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import dlq_name, make
from cluster import (
    QUICK_JIT,
    cli_env,
    event_log_conf,
    failed_tasks,
    free_port,
    make_bare_python,
    queue_and_schema,
    read_event_log,
    watch_and_kill,
)
from conftest import ROOT, require_service

pytestmark = [
    pytest.mark.slow, pytest.mark.spark, pytest.mark.cluster, pytest.mark.live, pytest.mark.timeout(600),
]

BABELQ = ROOT / ".venv" / "bin" / "babelq"
EXAMPLE = ROOT / "examples" / "orders_pipeline.py"
REDIS = "redis://127.0.0.1:6379/15"
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
URN = "urn:babel:orders:created"
ORDERS = 20_000
BAD = 20
#: micro-batches of 4k: several, so the kill lands with work both behind and ahead of it
BATCH = 4_000


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The executors' Python: pyspark and babelq's dependencies, not babelq (it is shipped)."""
    return make_bare_python(tmp_path_factory.mktemp("bare-env"))


@pytest.fixture
def orders_queue(unique_queue: str) -> Any:
    """A Redis queue (and its DLQ) purged afterwards, and a PostgreSQL schema for the sink, dropped."""
    require_service("redis")
    require_service("postgres")
    with queue_and_schema(REDIS, unique_queue, POSTGRES, "t_consume_kill") as (transport, url, schema):
        yield unique_queue, transport, url, schema


def _orders(conn: Any, schema: str) -> int:
    import psycopg

    try:
        row = conn.execute(f"SELECT count(*) FROM {schema}.orders").fetchone()
    except psycopg.errors.UndefinedTable:  # the pipeline's setup has not run yet
        return 0
    return int(row[0])


def test_consume_on_the_cluster_survives_an_executor_sigkill(
    spark_cluster: Any, orders_queue: Any, bare_python: Path, tmp_path: Path
) -> None:
    import psycopg

    from babelq.pipelines.dlq import triage
    from babelq.transports import Outgoing

    queue, transport, sink, schema = orders_queue
    bodies = [make(URN, {"order_id": n, "amount_cents": n, "currency": "AUD"}, queue=queue).encode()
              for n in range(ORDERS)]
    bad = [make(URN, {"order_id": f"bad-{n}", "currency": "AUD"}, queue=queue).encode() for n in range(BAD)]
    for n, body in enumerate(bad):  # spread over the micro-batches
        bodies.insert(n * (ORDERS // BAD), body)
    for start in range(0, len(bodies), 5_000):
        transport.publish_many(queue, [Outgoing(b) for b in bodies[start:start + 5_000]])
    assert transport.size(queue) == ORDERS + BAD

    ui_port, events = free_port(), tmp_path / "consume-events"
    env = cli_env({"PYSPARK_PYTHON": str(bare_python)})
    args = [str(BABELQ), "consume", "--app", f"{EXAMPLE}:pipeline", "--broker", REDIS, "--queue", queue,
            "--sink", sink, "--checkpoint", str(tmp_path / "ck"), "--micro-batch", str(BATCH),
            "--timeout", "240",
            "--master", spark_cluster.master_url, *QUICK_JIT, *event_log_conf(events),
            "--conf", "spark.ui.enabled=true", "--conf", f"spark.ui.port={ui_port}"]
    consuming = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    try:
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            watch = watch_and_kill(spark_cluster, consuming, ui=f"http://127.0.0.1:{ui_port}",
                                   app_name="babelq-consume", progress=lambda: _orders(conn, schema),
                                   expected=ORDERS, within=270)
        stdout, stderr = consuming.communicate(timeout=60)
    finally:
        if consuming.poll() is None:
            consuming.kill()
            consuming.communicate()
    story = "\n".join([*watch.log, stdout, stderr[-3000:]])
    outcome = [line for line in stdout.splitlines() if " messages in " in line]
    assert consuming.returncode == 0 and outcome and outcome[0].endswith(" drained"), story
    assert watch.killed, f"no executor was killed while consume ran (too fast?)\n{story}"

    with psycopg.connect(POSTGRES) as conn:
        rows, distinct = conn.execute(
            f"SELECT count(*), count(DISTINCT order_id) FROM {schema}.orders").fetchone() or (0, 0)
    assert (rows, distinct) == (ORDERS, ORDERS), story
    assert transport.size(queue) == 0 and transport.reserved(queue) == 0, story
    dlq = triage(transport, dlq_name(queue))
    assert dlq.distinct_messages == BAD, dlq.table()

    failed = failed_tasks(events)
    lost = [r for r in failed if r.get("Reason") == "ExecutorLostFailure"]
    assert lost and {r.get("Executor ID") for r in lost} == {watch.killed_executor}, (failed, story)
    assert {r.get("Reason") for r in failed} <= {"ExecutorLostFailure", "FetchFailed"}, (failed, story)
    log = read_event_log(events)
    assert log.master == spark_cluster.master_url and "driver" not in log.task_executors, story
