"""``babelq settle`` on the standalone cluster, with one executor JVM SIGKILLed mid-settle (issue 11).

The "prove it on a real cluster" test: 50,000 payments from a generated bulk file are ingested by
``babelq ingest --master <cluster>`` into Redis, 50 poison bodies are pushed on the queue as a
misbehaving producer would, and ``babelq settle --master <cluster>`` settles them into a
PostgreSQL ledger in a schema of the test's own. The executors' Python has no babelq (``bare_python``):
they run the package ``get_session`` ships. While settle runs, the test watches the ledger;
once it holds some but not all entries, the first executor of the settle application seen
running a task that launched less than 0.3 s before (the driver's REST API) gets SIGKILL
(``spark_cluster.kill_executor``), so the kill lands inside that task. Spark retries it (a
retried read task takes back the messages its slot's tag recorded on the broker; a lost shuffle
output is recomputed the same way); the standalone master launches a replacement executor on the
freed worker.

Then, from outside the job:

* settle ended "drained" in the same run, with the default ``--visibility-timeout`` (300 s): the
  retried task reads its slot's messages again at once, nothing waits for a lease to lapse;
* the ledger holds each valid payment exactly once (``count(*) == count(DISTINCT
  payment_reference) == expected_posted``), the queue is empty, the outbox has nothing unpublished;
* the DLQ holds what the generator and the injected poison predict, each message once
  (``Triage.messages``; distinct ``meta.id`` = expired + closed accounts), and the demo's
  reconciliation holds: rows in = rejected + posted + dead-lettered;
* the kill hit a running task: the event log has a task of the killed executor that failed with
  ``ExecutorLostFailure`` (and nothing failed for another reason than it or a ``FetchFailed`` for
  the shuffle output lost with it), and the application was given a third executor;
* broker reads happened in at least two executor JVMs: settle's ``read from the broker by N
  process(es)`` lines name executor pids this cluster launched for the application, and their
  counts add up to the messages settle reported.

A kill after a partition's ledger commit but before it published its outbox rows (dead letters,
retries) leaves rows the retried task finds claimed and does not publish; settle publishes them
before it calls the queue drained, so the same run still ends with nothing unpublished
(``tests/pipelines/test_settle_task_retry.py`` hits that window on purpose).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cluster import (
    QUICK_JIT,
    cli_env,
    event_log_conf,
    failed_tasks,
    free_port,
    make_bare_python,
    queue_and_schema,
    read_event_log,
    wait_for,
    watch_and_kill,
)
from conftest import ROOT, require_service

# a standalone cluster, ingest and a killed settle: about 100 s alone
pytestmark = [
    pytest.mark.slow, pytest.mark.spark, pytest.mark.cluster, pytest.mark.live, pytest.mark.timeout(900),
]

BABELQ = ROOT / ".venv" / "bin" / "babelq"
REDIS = "redis://127.0.0.1:6379/15"
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
ROWS = 50_000
POISON = ROWS // 1000
#: micro-batches of 10k: several of them, so the kill lands with work both behind and ahead of it
BATCH = 10_000
_READERS_HEAD = re.compile(r"  read from the broker by \d+ process\(es\):")
_READER = re.compile(r"^ {4}executor (?P<host>[^:\s]+):(?P<pid>\d+): (?P<n>\d+)$")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The executors' Python: pyspark and babelq's dependencies, not babelq (it is shipped)."""
    return make_bare_python(tmp_path_factory.mktemp("bare-env"))


@pytest.fixture
def pipeline(unique_queue: str) -> Any:
    """A Redis queue (and its DLQ) purged afterwards, and a PostgreSQL ledger in a schema of its own
    (``search_path`` in the URL; the settle CLI writes unprefixed tables), dropped afterwards."""
    require_service("redis")
    require_service("postgres")
    with queue_and_schema(REDIS, unique_queue, POSTGRES, "t_kill") as (transport, url, schema):
        yield unique_queue, transport, url, schema


def _ledger_entries(conn: Any, schema: str) -> int:
    import psycopg

    try:
        row = conn.execute(f"SELECT count(*) FROM {schema}.ledger_entries").fetchone()
    except psycopg.errors.UndefinedTable:  # settle has not created its tables yet
        return 0
    return int(row[0])


def _outbox_pending(ledger_url: str) -> int:
    """Dead letters and retries the ledger's outbox holds but no one has published yet."""
    from babelq.pipelines.ledger import open_ledger

    ledger = open_ledger(ledger_url)
    try:
        return ledger.outbox_counts()[1]
    finally:
        ledger.close()


def _readers(stdout: str) -> dict[int, int]:
    """``jvm pid -> messages`` from settle's ``read from the broker by N process(es):`` block."""
    lines = stdout.splitlines()
    heads = [i for i, line in enumerate(lines) if _READERS_HEAD.fullmatch(line)]
    assert len(heads) == 1, stdout
    out: dict[int, int] = {}
    for line in lines[heads[0] + 1:]:
        found = _READER.match(line)
        if found is None:
            assert not line.startswith("    "), f"a reader that is not an executor: {line!r}"
            break
        out[int(found["pid"])] = out.get(int(found["pid"]), 0) + int(found["n"])
    return out


def test_settle_on_the_cluster_survives_an_executor_sigkill_mid_settle(
    spark_cluster: Any, pipeline: Any, bare_python: Path, tmp_path: Path
) -> None:
    import psycopg

    from babelq.envelope import dlq_name
    from babelq.pipelines.dlq import triage
    from babelq.pipelines.generator import generate_bulk_file, poison_bodies
    from babelq.transports import Outgoing

    queue, transport, ledger_url, schema = pipeline
    bare = {"PYSPARK_PYTHON": str(bare_python)}  # executors without babelq: get_session ships it
    took: dict[str, float] = {}
    clock = time.monotonic()
    bulk = generate_bulk_file(tmp_path / "payments.csv", ROWS, seed=11)
    ingest = subprocess.run(
        [str(BABELQ), "ingest", str(bulk.path), "--broker", REDIS, "--queue", queue,
         "--rejects", str(tmp_path / "rejects"), "--master", spark_cluster.master_url, *QUICK_JIT],
        capture_output=True, text=True, cwd=tmp_path, env=cli_env(bare), timeout=300, check=False,
    )
    assert ingest.returncode == 0, ingest.stderr[-4000:]
    published = ROWS - bulk.expected_rejected
    assert f"{published:,} published to {queue}" in ingest.stdout, ingest.stdout
    transport.publish_many(queue, [Outgoing(b) for b in poison_bodies(POISON)])
    assert transport.size(queue) == published + POISON
    took["ingest"] = time.monotonic() - clock
    # the ingest application's executors go before settle's come, so none is mistaken for settle's
    wait_for(lambda: not spark_cluster.executor_pids(), 60, "the ingest executors to exit")

    clock = time.monotonic()
    ui_port, events = free_port(), tmp_path / "settle-events"
    settle = [str(BABELQ), "settle", "--broker", REDIS, "--queue", queue, "--ledger", ledger_url,
              "--checkpoint", str(tmp_path / "checkpoint"), "--micro-batch", str(BATCH),
              "--retry-delay", "0.2",
              "--timeout", "240", "--master", spark_cluster.master_url, *QUICK_JIT]
    settling = subprocess.Popen(
        [*settle, *event_log_conf(events),  # and the driver's REST API, to see which executor is busy
         "--conf", "spark.ui.enabled=true", "--conf", f"spark.ui.port={ui_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=cli_env(bare),
    )
    try:
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            watch = watch_and_kill(
                spark_cluster, settling, ui=f"http://127.0.0.1:{ui_port}", app_name="babelq-settle",
                progress=lambda: _ledger_entries(conn, schema), expected=bulk.expected_posted, within=270)
        stdout, stderr = settling.communicate(timeout=60)
    finally:
        if settling.poll() is None:
            settling.kill()
            settling.communicate()
    took["settle"] = time.monotonic() - clock
    story = "\n".join([*watch.log, stdout, stderr[-3000:]])
    outcome = [line for line in stdout.splitlines() if " messages settled in " in line]
    assert settling.returncode == 0 and outcome and outcome[0].endswith(" drained"), story
    assert watch.killed, f"no executor was killed while settle ran (too fast?)\n{story}"
    assert watch.after_kill, f"no executor replaced the killed one\n{story}"

    assert _outbox_pending(ledger_url) == 0, story  # the same run published what the kill left

    # each valid payment exactly once; nothing left on the queue
    with psycopg.connect(POSTGRES) as conn:
        row = conn.execute(f"SELECT count(*), count(DISTINCT payment_reference) FROM {schema}.ledger_entries")
        entries, references = row.fetchone() or (0, 0)
    assert (entries, references) == (bulk.expected_posted, bulk.expected_posted), story
    assert transport.size(queue) == 0 and transport.reserved(queue) == 0

    # the DLQ: what the generator and the poison predict, each message once
    dlq = triage(transport, dlq_name(queue))
    by_cause: dict[str, int] = {}
    for (reason, cause, *_), n in dlq.messages.items():
        by_cause[cause or reason] = by_cause.get(cause or reason, 0) + n
    dead_payments = sum(n for c, n in by_cause.items() if c not in ("poison", "unsupported"))
    assert by_cause.get("expired", 0) == bulk.defects["expired"], dlq.table()
    assert by_cause.get("max_attempts", 0) == bulk.defects["closed_account"], dlq.table()
    assert by_cause.get("poison", 0) + by_cause.get("unsupported", 0) == POISON, dlq.table()
    assert dead_payments == bulk.defects["expired"] + bulk.defects["closed_account"], dlq.table()
    assert dlq.distinct_ids == dead_payments, dlq.table()  # poison bodies carry no meta.id
    # (dlq.total may exceed dlq.distinct_messages only if the kill cut a publish before its mark)
    # the demo's reconciliation: rows in = rejected at ingest + posted + dead-lettered
    assert (ROWS - published) + entries + dead_payments == ROWS, dlq.table()

    # the kill hit a running task, Spark retried it, and the application got a new executor; the
    # only other failures allowed: tasks of the next stage missing the shuffle output lost with it
    failed = failed_tasks(events)
    lost = [r for r in failed if r.get("Reason") == "ExecutorLostFailure"]
    assert lost, (failed, story)
    assert {r.get("Executor ID") for r in lost} == {watch.killed_executor}, (failed, story)
    assert {r.get("Reason") for r in failed} <= {"ExecutorLostFailure", "FetchFailed"}, (failed, story)
    log = read_event_log(events)
    assert len(log.executors) >= 3, story
    assert log.master == spark_cluster.master_url and "driver" not in log.task_executors, story
    # the executors' Python lacks babelq: they ran the package get_session shipped (in their cwd)
    assert [p for w in spark_cluster.work_dirs for p in (w / log.app_id).glob("*/babelq-*.zip")], story

    # broker reads in at least two executor JVMs of this application, adding up to what settle counted
    readers = _readers(stdout)
    # every delivery was read from the broker: a retried message once per time it came back
    again = re.search(r"([\d,]+) deliveries handled", stdout)
    delivered = again.group(1) if again else outcome[0].split(" messages settled in ", 1)[0]
    messages = int(delivered.replace(",", ""))
    assert len(readers) >= 2, story
    assert sum(readers.values()) == messages, story
    assert set(readers) <= set(watch.executors), (readers, watch.executors, story)
    assert watch.killed in readers or set(readers) & set(watch.after_kill), story
    with pytest.raises(ValueError, match="not an executor"):  # the fixture's kill is for executors only
        spark_cluster.kill_executor(os.getpid())
    print(f"\n[cluster settle kill] ingest {took['ingest']:.1f} s, settle {took['settle']:.1f} s; "
          + "; ".join(watch.log) + f"; readers {readers}; killed pid {watch.killed} read "
          f"{readers.get(watch.killed, 0)}", file=sys.stderr)
