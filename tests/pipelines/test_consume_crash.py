"""``babelq consume`` SIGKILLed seven times: every order lands once, every bad one is dead-lettered.

The command runs as a real process group (driver, JVM, Python workers), on one queue, sink and
checkpoint, killed:

* at the failpoint ``consume.after_sink_commit``: the first partition to commit its handlers'
  rows, processed ids and outbox rows kills the whole session before its dead letters are
  published and before any ack;
* at ``consume.after_outbox_publish``: the broker took a partition's dead letters, the outbox has
  not marked them (the one window where a dead letter can be written twice);
* five times at random moments, each once the sink has grown (so the kill lands mid-micro-batch).

Each later run takes the messages back once their leases lapse, publishes what the outbox holds
and finds the committed ids processed; a last run in this process drains the queue.

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
from pathlib import Path
from typing import Any

import pytest
from kills import gone, kill_after_progress

from babelq.envelope import make
from babelq.pipelines.consume import consume, load_pipeline
from babelq.pipelines.consume.files import FilesSink
from babelq.pipelines.consume.sinks import open_sink
from babelq.pipelines.failpoints import ENV as FAILPOINT_ENV
from babelq.transports import Outgoing, open_transport

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

URN = "urn:babel:orders:created"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders_pipeline.py"
PARQUET_EXAMPLE = EXAMPLE.with_name("orders_parquet_pipeline.py")
VISIBILITY = 3.0


def _dlq_size(url: str, queue: str) -> int:
    transport = open_transport(url)
    try:
        return transport.size(f"{queue}.dlq")
    finally:
        transport.close()


def _sink_rows(path: Path) -> int:
    """Rows babelq committed to the sink so far (processed ids and outbox), 0 before its tables exist."""
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path, timeout=5) as conn:
            found = conn.execute(
                "SELECT (SELECT COUNT(*) FROM babelq_processed_ids) + (SELECT COUNT(*) FROM babelq_outbox)"
            ).fetchone()
            return int(found[0])
    except sqlite3.Error:
        return 0


def _kill_at(args: list[str], point: str) -> None:
    proc = subprocess.Popen(args, env={**os.environ, FAILPOINT_ENV: point},
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = proc.communicate(timeout=400)
    gone(proc.pid)
    assert proc.returncode == -signal.SIGKILL, f"{point} did not fire: {out[-3000:]!r}"
    # no wait for the dead run's leases: the next run takes its messages once they lapse


def test_a_consume_killed_at_each_window_and_at_random_reconciles(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    import random

    from babelq.pipelines.dlq import triage

    seed = int(os.environ.get("BABELQ_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    url, queue = f"sqlite://{tmp_path}/q.db", unique_queue
    shop = tmp_path / "shop.db"
    sink = f"sqlite://{shop}"
    n_orders, n_bad = 400, 24
    orders = [make(URN, {"order_id": n, "amount_cents": n, "currency": "AUD"}, queue=queue)
              for n in range(n_orders)]
    bad = [make(URN, {"order_id": f"bad-{n}", "currency": "AUD"}, queue=queue) for n in range(n_bad)]
    mixed = [*orders]
    for n, envelope in enumerate(bad):  # spread over the micro-batches, so each holds dead letters
        mixed.insert(n * (n_orders // n_bad), envelope)
    transport = open_transport(url)
    transport.publish_many(queue, [Outgoing(e.encode()) for e in mixed])
    transport.close()  # no connection of this process stays open across the kills
    args = [
        sys.executable, "-c", "import sys; from babelq.cli.main import main; sys.exit(main())",
        "consume", "--app", f"{EXAMPLE}:pipeline", "--broker", url, "--queue", queue, "--sink", sink,
        "--checkpoint", str(tmp_path / "ck"), "--micro-batch", "40", "--visibility-timeout", str(VISIBILITY),
        "--timeout", "240",
        "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:-DontCompileHugeMethods",
    ]
    log = [f"seed {seed}"]

    _kill_at(args, "consume.after_sink_commit")
    db = sqlite3.connect(shop)
    committed = db.execute("SELECT COUNT(*) FROM orders").fetchone()[0]
    db.close()
    assert 0 < committed < n_orders  # a partition committed, then the run died
    assert _dlq_size(url, queue) == 0  # ... before anything was published
    log.append(f"after_sink_commit: {committed} orders committed")

    _kill_at(args, "consume.after_outbox_publish")
    published = _dlq_size(url, queue)
    assert published > 0  # the broker took dead letters, then the run died before marking them
    log.append(f"after_outbox_publish: {published} dead letters on the DLQ")

    for _ in range(5):
        kill_after_progress(args, lambda: _sink_rows(shop), rng, log, within=1.0)

    run = consume(spark, load_pipeline(f"{EXAMPLE}:pipeline"), url=url, sink=sink, queue=queue,
                  checkpoint=tmp_path / "ck", visibility_timeout=VISIBILITY, timeout=240)
    assert run.drained, log
    db = sqlite3.connect(shop)
    rows, distinct = db.execute("SELECT COUNT(*), COUNT(DISTINCT order_id) FROM orders").fetchone()
    db.close()
    assert rows == distinct == n_orders, log
    transport = open_transport(url)
    try:
        dlq = triage(transport, f"{queue}.dlq")
        assert transport.size(queue) == 0 and transport.reserved(queue) == 0, log
    finally:
        transport.close()
    # each bad order dead-lettered; copies come only from a kill between a publish and its mark
    # (the second failpoint's on purpose, a random kill's by chance): at-least-once, as documented
    assert dlq.distinct_messages == n_bad, [*log, dlq.table()]
    opened = open_sink(sink)
    try:
        assert opened.counts() == (n_orders, n_bad, 0), log  # every outbox row published and marked
    finally:
        opened.close()


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
        "--checkpoint", str(checkpoint), "--micro-batch", "30", "--visibility-timeout", str(VISIBILITY),
        "--timeout", "240",
        "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:-DontCompileHugeMethods",
    ]
    _kill_at(args, point)


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
