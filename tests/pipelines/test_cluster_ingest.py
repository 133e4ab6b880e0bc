"""``babelq ingest`` on a real Spark standalone cluster whose executors do not have babelq.

The cluster (``spark_cluster``, ``tests/cluster.py``) is a master and two workers started from
PySpark's own ``spark-class``. Every Python worker of these runs is ``bare_python``: an
interpreter with pyspark, orjson, pyarrow, redis... but not babelq (:func:`cluster.make_bare_python`
proves ``import babelq`` fails there). PySpark runs one interpreter for every Python worker of
an application, so the executors' workers are that interpreter too; what makes the job work is
the package ``get_session`` ships with ``addPyFile``, and the control row shows the same run
failing with that turned off.

How "it ran on the cluster, on executors" is checked, from outside the job: the application's
Spark event log (written where ``--conf`` says) names the master and the executor of every
finished task (``driver`` would mean local mode); the master's web UI JSON lists the
application; the executors' work directories hold the shipped zip; and the messages are in Redis.

Each run starts a JVM and registers an application (10-30 s), so the rows are few. Ingest and
settle of 50,000 payments on the same kind of executors (no babelq installed), with one executor
SIGKILLed mid-settle, is ``test_cluster_settle_kill.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cluster import event_log_conf, make_bare_python, read_event_log, spark_home
from conftest import ROOT, require_service
from spark_defaults import DEFAULTS, isolated_env

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.cluster, pytest.mark.live]

BABELQ = ROOT / ".venv" / "bin" / "babelq"
REDIS = "redis://127.0.0.1:6379/15"
ROWS = 600
_SCRUBBED = ("BABELQ_BROKER", "BABELQ_SPARK_MASTER", "MASTER", "SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS",
             "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_bare_python(tmp_path_factory.mktemp("bare-env"))


@pytest.fixture(scope="module")
def bulk(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from babelq.pipelines.generator import generate_bulk_file

    return generate_bulk_file(tmp_path_factory.mktemp("bulk") / "payments.csv", ROWS, seed=11)


@pytest.fixture
def redis_queue(unique_queue: str) -> Any:
    require_service("redis")
    from babelq.envelope import dlq_name
    from babelq.transports import open_transport

    transport = open_transport(REDIS)
    try:
        yield unique_queue, transport
    finally:
        transport.purge(unique_queue)
        transport.purge(dlq_name(unique_queue))
        transport.close()


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = isolated_env(_SCRUBBED)
    # the driver must be reachable by the executors at the address it advertises
    full.update({"SPARK_LOCAL_IP": "127.0.0.1", **env})
    return subprocess.run(
        command, capture_output=True, text=True, cwd=cwd, env=full, timeout=400, check=False
    )


def ingest_args(bulk: Any, queue: str, tmp_path: Path) -> list[str]:
    rejects = str(tmp_path / "rejects")
    return ["ingest", str(bulk.path), "--broker", REDIS, "--queue", queue, "--rejects", rejects]


def assert_ran_on_executors(cluster: Any, events: Path, app_name: str) -> None:
    log = read_event_log(events)
    assert log.master == cluster.master_url
    assert log.task_executors, "no task finished"
    assert "driver" not in log.task_executors, "a task ran inside the driver (local mode)"
    assert set(log.task_executors) <= set(log.executors)
    assert set(log.executors.values()) == {"127.0.0.1"}
    app = cluster.application(log.app_id)
    assert app["name"] == app_name and app["state"] == "FINISHED", app
    shipped = [
        path
        for work in cluster.work_dirs
        for path in (work / log.app_id).glob("*/babelq-*.zip")  # an executor's files land in its cwd
    ]
    assert shipped, f"no executor of {log.app_id} received the babelq package"
    # and their Python workers have it on their path (relative: the executor's directory)
    assert log.properties.get("spark.executorEnv.PYTHONPATH", "").split(os.pathsep)[0] == shipped[0].name


def test_ingest_under_spark_submit_keeps_the_master_spark_was_given(
    spark_cluster: Any, bare_python: Path, bulk: Any, redis_queue: Any, tmp_path: Path
) -> None:
    """No --master: the CLI must run where spark-submit put it, not on local[2]."""
    from babelq.cli import main as cli_main

    queue, transport = redis_queue
    events = tmp_path / "events"
    done = run(
        [str(spark_home() / "bin" / "spark-submit"), "--master", spark_cluster.master_url,
         "--conf", f"spark.pyspark.python={bare_python}",
         "--conf", f"spark.pyspark.driver.python={sys.executable}", *event_log_conf(events),
         str(Path(cli_main.__file__)), *ingest_args(bulk, queue, tmp_path)],
        tmp_path,
        {"SPARK_HOME": str(spark_home())},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert transport.size(queue) == ROWS - bulk.expected_rejected
    assert_ran_on_executors(spark_cluster, events, "babelq-ingest")


def test_without_the_shipped_package_the_bare_python_cannot_run_ingest(
    spark_cluster: Any, bare_python: Path, bulk: Any, redis_queue: Any, tmp_path: Path
) -> None:
    """The control: spark.babelq.shipPackage=false, the same run fails for want of babelq."""
    queue, transport = redis_queue
    done = run(
        [str(BABELQ), *ingest_args(bulk, queue, tmp_path), "--master", spark_cluster.master_url,
         "--conf", "spark.babelq.shipPackage=false", "--conf", "spark.task.maxFailures=1"],
        tmp_path,
        {"PYSPARK_PYTHON": str(bare_python)},
    )
    assert done.returncode == 2
    error = [line for line in done.stderr.splitlines() if line.startswith("babelq ingest: error:")]
    assert error and "No module named 'babelq'" in error[0], done.stderr[-4000:]
    assert transport.size(queue) == 0


def test_relative_sqlite_broker_is_refused_on_the_master_of_spark_defaults(
    spark_cluster: Any, bulk: Any, tmp_path: Path
) -> None:
    """The master comes from spark-defaults.conf (not named on the command line), so the check
    runs on the master the session got."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(f"{DEFAULTS}spark.master {spark_cluster.master_url}\n")
    done = run(
        [str(BABELQ), "ingest", str(bulk.path), "--broker", "sqlite://q.db", "--rejects", "rejects"],
        tmp_path,
        {"SPARK_CONF_DIR": str(conf)},
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("babelq ingest: error:")]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-4000:]
    assert "--broker" in lines[0] and "relative SQLite path" in lines[0]
    assert spark_cluster.master_url in lines[0]
    assert not (tmp_path / "q.db").exists()
