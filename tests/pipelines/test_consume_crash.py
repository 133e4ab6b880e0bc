"""``babelq consume`` SIGKILLed right after a sink commit: the next run loses nothing, doubles nothing.

The command runs as a real process group (driver, JVM, Python workers) with the failpoint
``consume.after_sink_commit`` armed: the first partition to commit its handlers' rows, processed
ids and outbox rows kills the whole session before its dead letters are published and before any
ack. A second run, on the same checkpoint and sink, takes the messages back once their leases lapse,
publishes the committed dead letters from the outbox and finds the committed ids processed.

The Parquet sink is killed at each of its moments: its files staged and the transaction not
committed (``consume.files_staged``: the staged file is never read), committed and not yet
renamed into the table (``consume.after_sink_commit``: the next run renames it), and between the
outbox's publish and its mark (``consume.after_outbox_publish``: the one window where a dead
letter is published twice; rows never are).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import make
from babelq.pipelines.consume import consume, load_pipeline
from babelq.pipelines.consume.files import FilesSink
from babelq.pipelines.consume.sink import open_sink
from babelq.pipelines.failpoints import ENV as FAILPOINT_ENV
from babelq.pipelines.failpoints import kill_session, session_pids
from babelq.transports import Outgoing, open_transport

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

URN = "urn:babel:orders:created"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders_pipeline.py"
PARQUET_EXAMPLE = EXAMPLE.with_name("orders_parquet_pipeline.py")
VISIBILITY = 3.0


def _gone(session: int) -> None:
    """Wait until no process of the killed run's session is left."""
    deadline = time.monotonic() + 30
    while session_pids(session) and time.monotonic() < deadline:
        kill_session(session)
        time.sleep(0.05)
    assert not session_pids(session), f"processes of session {session} survived SIGKILL"


def _dlq_size(url: str, queue: str) -> int:
    transport = open_transport(url)
    try:
        return transport.size(f"{queue}.dlq")
    finally:
        transport.close()


def _publish(url: str, queue: str) -> set[str]:
    """60 orders and 6 that break the schema, spread over the batches so the killed partition holds
    dead letters to publish; the bad ones' meta ids."""
    orders = [make(URN, {"order_id": n, "amount_cents": n, "currency": "AUD"}, queue=queue)
              for n in range(60)]
    bad = [make(URN, {"order_id": f"bad-{n}", "currency": "AUD"}, queue=queue) for n in range(6)]
    transport = open_transport(url)
    transport.publish_many(queue, [Outgoing(e.encode()) for e in [*bad[:3], *orders, *bad[3:]]])
    transport.close()  # no connection of this process stays open across the kill
    return {e.id for e in bad}


def _killed_at(point: str, app: Path, *, url: str, queue: str, sink: str, checkpoint: Path) -> None:
    """``babelq consume`` in a session of its own, SIGKILLed whole at ``point``."""
    args = [
        sys.executable, "-c", "import sys; from babelq.cli.main import main; sys.exit(main())",
        "consume", "--app", f"{app}:pipeline", "--broker", url, "--queue", queue, "--sink", sink,
        "--checkpoint", str(checkpoint), "--batch", "30", "--visibility-timeout", str(VISIBILITY),
        "--timeout", "240",
        "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:-DontCompileHugeMethods",
    ]
    proc = subprocess.Popen(args, env={**os.environ, FAILPOINT_ENV: point},
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = proc.communicate(timeout=400)
    _gone(proc.pid)
    assert proc.returncode == -signal.SIGKILL, f"the failpoint did not fire: {out[-3000:]!r}"


def test_a_consume_killed_after_its_sink_commit_is_completed_by_the_next_run_each_order_once(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    url, queue, sink = f"sqlite://{tmp_path}/q.db", unique_queue, f"sqlite://{tmp_path}/shop.db"
    _publish(url, queue)
    _killed_at("consume.after_sink_commit", EXAMPLE, url=url, queue=queue, sink=sink,
               checkpoint=tmp_path / "ck")
    db = sqlite3.connect(tmp_path / "shop.db")
    committed = db.execute("SELECT COUNT(*) FROM orders").fetchone()[0]
    assert 0 < committed < 60  # a partition committed, then the run died
    assert _dlq_size(url, queue) == 0  # ... before anything was published

    run = consume(spark, load_pipeline(f"{EXAMPLE}:pipeline"), url=url, sink=sink, queue=queue,
                  checkpoint=tmp_path / "ck", visibility_timeout=VISIBILITY, timeout=240)
    assert run.drained
    rows, distinct = db.execute("SELECT COUNT(*), COUNT(DISTINCT order_id) FROM orders").fetchone()
    db.close()
    assert rows == distinct == 60
    assert run.stats.count("handled") == 60 - committed  # the committed ones were not handled again
    assert _dlq_size(url, queue) == 6  # each bad order once, the committed ones from the outbox
    opened = open_sink(sink)
    assert opened.counts() == (60, 6, 0)
    opened.close()


def _dead_letter_ids(url: str, queue: str) -> list[str]:
    transport = open_transport(url)
    try:
        return [json.loads(m.body)["meta"]["id"] for m in transport.reserve(f"{queue}.dlq", max_messages=100)]
    finally:
        transport.close()


@pytest.mark.parametrize("point", ["consume.files_staged", "consume.after_sink_commit",
                                   "consume.after_outbox_publish"])
def test_a_parquet_consume_killed_at_a_failpoint_leaves_each_order_once_after_the_next_run(
    spark: Any, tmp_path: Path, unique_queue: str, point: str
) -> None:
    url, queue, shop = f"sqlite://{tmp_path}/q.db", unique_queue, tmp_path / "shop"
    sink = f"parquet://{shop}"
    bad = _publish(url, queue)
    _killed_at(point, PARQUET_EXAMPLE, url=url, queue=queue, sink=sink, checkpoint=tmp_path / "ck")
    staging = shop / "orders" / "_staging"
    staged = sorted(staging.iterdir()) if staging.exists() else []
    visible = list((shop / "orders").glob("*.parquet"))
    opened = open_sink(sink)
    assert isinstance(opened, FilesSink)
    committed, _, _ = opened.counts()
    files, unpublished = opened.file_counts()
    opened.close()
    dead_before = _dlq_size(url, queue)
    if point == "consume.files_staged":  # staged, not committed: no record, nothing visible
        assert staged and not visible and files == 0
    elif point == "consume.after_sink_commit":  # committed, not renamed: recorded, not visible
        assert staged and not visible and unpublished == files > 0 and dead_before == 0
    else:  # renamed into the table, dead letters published, not marked
        assert unpublished == 0 and len(visible) == files

    run = consume(spark, load_pipeline(f"{PARQUET_EXAMPLE}:pipeline"), url=url, sink=sink, queue=queue,
                  checkpoint=tmp_path / "ck", visibility_timeout=VISIBILITY, timeout=240)
    assert run.drained
    orders = spark.read.parquet(str(shop / "orders"))
    rows = orders.count()
    assert rows == orders.select("order_id").distinct().count() == 60
    assert run.stats.count("handled") == 60 - committed  # the committed ones were not handled again
    dead = _dead_letter_ids(url, queue)
    assert set(dead) == bad
    # each bad order once; a kill between the publish and the mark publishes those again
    assert len(dead) == 6 if point != "consume.after_outbox_publish" else 6 <= len(dead) <= 6 + dead_before
    left = sorted(staging.iterdir())
    assert left == (staged if point == "consume.files_staged" else [])  # the uncommitted file: kept, unread
    opened = open_sink(sink)
    assert isinstance(opened, FilesSink)
    assert opened.counts()[0] == 60 and opened.file_counts()[1] == 0
    opened.close()
