"""``babelq consume`` SIGKILLed right after a sink commit: the next run loses nothing, doubles nothing.

The command runs as a real process group (driver, JVM, Python workers) with the failpoint
``consume.after_sink_commit`` armed: the first partition to commit its handlers' rows, processed
ids and outbox rows kills the whole session before its dead letters are published and before any
ack. A second run, on the same checkpoint and sink, takes the messages back once their leases lapse,
publishes the committed dead letters from the outbox and finds the committed ids processed.
"""

from __future__ import annotations

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
from babelq.pipelines.consume.sink import open_sink
from babelq.pipelines.failpoints import ENV as FAILPOINT_ENV
from babelq.pipelines.failpoints import kill_session, session_pids
from babelq.transports import Outgoing, open_transport

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

URN = "urn:babel:orders:created"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders_pipeline.py"
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


def test_a_consume_killed_after_its_sink_commit_is_completed_by_the_next_run_each_order_once(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    url, queue, sink = f"sqlite://{tmp_path}/q.db", unique_queue, f"sqlite://{tmp_path}/shop.db"
    orders = [make(URN, {"order_id": n, "amount_cents": n, "currency": "AUD"}, queue=queue)
              for n in range(60)]
    bad = [make(URN, {"order_id": f"bad-{n}", "currency": "AUD"}, queue=queue) for n in range(6)]
    transport = open_transport(url)
    # the bad ones spread over the batches, so the killed partition holds dead letters to publish
    transport.publish_many(queue, [Outgoing(e.encode()) for e in [*bad[:3], *orders, *bad[3:]]])
    transport.close()  # no connection of this process stays open across the kill
    args = [
        sys.executable, "-c", "import sys; from babelq.cli.main import main; sys.exit(main())",
        "consume", "--app", f"{EXAMPLE}:pipeline", "--broker", url, "--queue", queue, "--sink", sink,
        "--checkpoint", str(tmp_path / "ck"), "--batch", "30", "--visibility-timeout", str(VISIBILITY),
        "--timeout", "240",
        "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:-DontCompileHugeMethods",
    ]
    proc = subprocess.Popen(args, env={**os.environ, FAILPOINT_ENV: "consume.after_sink_commit"},
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = proc.communicate(timeout=400)
    _gone(proc.pid)
    assert proc.returncode == -signal.SIGKILL, f"the failpoint did not fire: {out[-3000:]!r}"
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
