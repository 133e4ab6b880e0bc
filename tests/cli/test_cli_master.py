"""``--master`` / ``--conf`` / ``$BABELQ_SPARK_MASTER`` on the Spark commands, and the cluster guard rails.

The refusals run the real ``babelq`` in a subprocess and never start a JVM: a named non-local
master (``spark://127.0.0.1:1``, where nothing listens) is enough to refuse a relative SQLite
broker or an SQLite ledger before Spark starts. The two rows that start Spark (demo, settle) read
the master the application really ran on from its Spark event log, written where ``--conf`` said.
On a real cluster: ``tests/pipelines/test_cluster_ingest.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cluster import event_log_conf, read_event_log
from conftest import ROOT, require_service
from spark_defaults import isolated_env

BABELQ = ROOT / ".venv" / "bin" / "babelq"
SCRUBBED = ("BABELQ_BROKER", "BABELQ_SPARK_MASTER", "MASTER", "SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS")
NOWHERE = "spark://127.0.0.1:1"  # a cluster master URL; nothing is contacted before the refusal
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


def babelq(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(BABELQ)] if BABELQ.exists() else [sys.executable, "-m", "babelq.cli.main"]
    full = isolated_env(SCRUBBED)
    full.update(env or {})
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, cwd=cwd, env=full, timeout=300, check=False
    )


def one_error_line(done: subprocess.CompletedProcess[str], command: str) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"babelq {command}: error: "), lines[0]
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture
def bulk_file(tmp_path: Path) -> Path:
    path = tmp_path / "payments.csv"
    path.write_text(
        "payment_reference,amount_cents,currency,debtor_bsb,debtor_account,creditor_bsb,creditor_account\n"
        "r1,100,AUD,062-000,12345678,062-001,87654321\n"
    )
    return path


def _ingest(bulk: Path, *extra: str) -> list[str]:
    return ["ingest", str(bulk), "--rejects", "rejects", *extra]


def _settle(*extra: str) -> list[str]:
    return ["settle", "--checkpoint", "ck", *extra]


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("spark.executor.memory", "expected KEY=VALUE"),
        ("=2g", "expected KEY=VALUE"),
        ("spark executor.memory=2g", "expected KEY=VALUE"),
        ("executor.memory=2g", "start with 'spark.'"),
    ],
)
@pytest.mark.parametrize("command", ["ingest", "settle", "demo"])
def test_bad_conf_is_one_line_naming_the_option(
    command: str, item: str, says: str, tmp_path: Path, bulk_file: Path
) -> None:
    args = {
        "ingest": _ingest(bulk_file, "--broker", f"sqlite:///{tmp_path}/q.db"),
        "settle": _settle("--broker", f"sqlite:///{tmp_path}/q.db", "--ledger", str(tmp_path / "l.db")),
        "demo": ["demo", "--out", "out"],
    }[command]
    line = one_error_line(babelq([*args, "--conf", item], tmp_path), command)
    assert f"--conf {item!r}" in line and says in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "rejects").exists()


@pytest.mark.parametrize("how", ["--master", "BABELQ_SPARK_MASTER"])
def test_relative_sqlite_broker_is_refused_on_a_cluster(how: str, tmp_path: Path, bulk_file: Path) -> None:
    master, env = (["--master", NOWHERE], {}) if how == "--master" else ([], {"BABELQ_SPARK_MASTER": NOWHERE})
    done = babelq(_ingest(bulk_file, "--broker", "sqlite://q.db", *master), tmp_path, env)
    line = one_error_line(done, "ingest")
    assert "--broker" in line and "relative SQLite path" in line and NOWHERE in line
    line = one_error_line(
        babelq(_settle("--broker", "sqlite://q.db", "--ledger", POSTGRES, *master), tmp_path, env), "settle"
    )
    assert "--broker" in line and "relative SQLite path" in line
    assert not (tmp_path / "q.db").exists() and not (tmp_path / "rejects").exists()


def test_sqlite_ledger_is_refused_on_a_cluster(tmp_path: Path) -> None:
    for ledger in (str(tmp_path / "ledger.db"), "ledger.db", f"sqlite:///{tmp_path}/ledger.db"):
        args = _settle("--broker", "redis://127.0.0.1:6379/15", "--ledger", ledger, "--master", NOWHERE)
        done = babelq(args, tmp_path)
        line = one_error_line(done, "settle")
        assert "--ledger" in line and "PostgreSQL on a cluster" in line
    assert not (tmp_path / "ledger.db").exists()


def test_demo_on_a_cluster_needs_a_postgresql_ledger(tmp_path: Path) -> None:
    line = one_error_line(babelq(["demo", "--out", "out", "--master", NOWHERE], tmp_path), "demo")
    assert "--ledger" in line and "PostgreSQL on a cluster" in line
    assert not (tmp_path / "out").exists()  # refused before anything was generated


def test_absolute_sqlite_broker_and_local_masters_pass_the_checks() -> None:
    from babelq.pipelines.cluster_checks import check_cluster_targets

    check_cluster_targets(NOWHERE, broker="sqlite:////shared/q.db", ledger=POSTGRES)
    check_cluster_targets("local[4]", broker="sqlite://q.db", ledger="ledger.db")
    check_cluster_targets(None, broker="sqlite://q.db", ledger="ledger.db")  # master not known yet


def test_dlq_takes_no_spark_options(tmp_path: Path) -> None:
    """dlq reads the broker directly, without Spark: no --master to mislead anyone."""
    done = babelq(["dlq", "--help"], tmp_path)
    assert done.returncode == 0 and "--master" not in done.stdout and "--conf" not in done.stdout
    for command in ("ingest", "settle", "demo"):
        shown = babelq([command, "--help"], tmp_path).stdout
        assert "--master URL" in shown and "--conf KEY=VALUE" in shown and "BABELQ_SPARK_MASTER" in shown


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.live
def test_demo_runs_on_the_named_master_with_a_postgresql_ledger(tmp_path: Path) -> None:
    require_service("postgres")
    events = tmp_path / "events"
    done = babelq(
        ["demo", "--rows", "300", "--out", "out", "--master", "local[1]", "--ledger", POSTGRES,
         *event_log_conf(events)],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "BALANCED" in done.stdout and "NOT BALANCED" not in done.stdout
    assert read_event_log(events).master == "local[1]"
    assert not (tmp_path / "out" / "ledger.db").exists()  # the ledger was PostgreSQL
    # ... in tables of this run's own, which the output names; drop them
    prefix = re.search(r"^ledger: .* \(tables (demo_[0-9a-f]+_)\*\)$", done.stdout, re.M)
    assert prefix, done.stdout
    import psycopg

    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        for table in ("processed_ids", "ledger_entries", "outbox"):
            conn.execute(f"DROP TABLE {prefix.group(1)}{table}")


@pytest.mark.slow
@pytest.mark.spark
def test_settle_takes_its_master_from_the_environment(tmp_path: Path) -> None:
    from babelq.envelope import make
    from babelq.transports import Outgoing, open_transport

    url = f"sqlite:///{tmp_path}/q.db"
    transport = open_transport(url)
    urn = "urn:babel:payments:transfer.requested"
    body = make(urn, {"payment_reference": "x"}, queue="payments").encode()
    transport.publish_many("payments", [Outgoing(body), Outgoing(b"not json")])
    transport.close()
    events = tmp_path / "events"
    done = babelq(
        _settle("--broker", url, "--ledger", str(tmp_path / "ledger.db"), "--timeout", "120",
                *event_log_conf(events)),
        tmp_path,
        env={"BABELQ_SPARK_MASTER": "local[1]"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 messages" in done.stdout and "drained" in done.stdout
    log = read_event_log(events)
    assert log.master == "local[1]" and set(log.task_executors) == {"driver"}



class _SessionOnACluster:
    """What the library's check reads of a SparkSession: its context's master (a cluster here;
    the functions must refuse before they touch Spark, so nothing else is needed)."""

    class sparkContext:  # noqa: N801 - SparkSession's attribute name
        master = NOWHERE


def test_library_ingest_and_settle_refuse_unshareable_targets_on_the_sessions_master(
    tmp_path: Path, bulk_file: Path
) -> None:
    from babelq.errors import ConfigurationError
    from babelq.pipelines.ingest import ingest
    from babelq.pipelines.settle import settle

    spark = _SessionOnACluster()
    with pytest.raises(ConfigurationError, match=r"^url: .*relative SQLite path.*spark://127\.0\.0\.1:1"):
        ingest(spark, bulk_file, url="sqlite://q.db", rejects_path=tmp_path / "rejects")
    with pytest.raises(ConfigurationError, match=r"^ledger: the SQLite ledger .*PostgreSQL on a cluster"):
        settle(spark, url="redis://127.0.0.1:6379/15", queue="payments", ledger=tmp_path / "ledger.db",
               checkpoint=tmp_path / "ck")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["payments.csv"]  # no journal, ledger, checkpoint
