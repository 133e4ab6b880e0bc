"""One side of ``bench_settle.py --baseline``: settle rounds in one tree's code, one per command.

``bench_settle.py`` starts this script twice, with ``PYTHONPATH`` naming the current tree's ``src``
and a git worktree's (an older revision's) ``src``, so each side runs its own code in its own
local[2] Spark session. For every ``round`` line on stdin it publishes the workload (a pickle of
``(bodies, expected postings)`` the parent wrote) to a fresh SQLite queue, runs that tree's
``babelq.pipelines.settle.settle`` with the tree's own defaults (micro-batch size, tasks) until the
queue is drained, checks the ledger and answers one line: ``ROUND`` and a JSON object of the settle
call's seconds, the messages it settled, the payments posted and whether it drained. Only names every
tree since settle became a streaming query (2026-11) shares are used. A ``quit`` line, or the end
of stdin, stops it.

Usage (by bench_settle.py): ``settle_runner.py PAYLOAD.pickle``.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    payload, expected = pickle.loads(Path(sys.argv[1]).read_bytes())

    from babelq.pipelines.ledger import open_ledger
    from babelq.pipelines.settle import settle
    from babelq.spark.session import get_session
    from bench_settle import fill_queue  # this script's directory is on sys.path

    spark = get_session("babelq-bench-settle-side", master="local[2]")
    for line in sys.stdin:
        if line.strip() != "round":
            break
        with tempfile.TemporaryDirectory(prefix="bench-settle-") as tmp:
            url = f"sqlite://{tmp}/q.db"
            fill_queue(url, payload)
            started = time.perf_counter()
            run = settle(spark, url=url, queue="payments", ledger=f"{tmp}/ledger.db", checkpoint=f"{tmp}/ck",
                         retry_delay_ms=50, timeout=1800)
            seconds = time.perf_counter() - started
            ledger = open_ledger(f"{tmp}/ledger.db")
            posted = ledger.totals()[0]
            ledger.close()
        answer = {"seconds": seconds, "messages": run.stats.messages, "posted": posted,
                  "expected": expected, "drained": run.drained}
        print("ROUND " + json.dumps(answer), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
