"""Settle benchmark: settle as a Spark job next to the single-task settle it replaced, same run.

Each round publishes the same N payment messages (default 100k; a demo-like mix: 1% transient
core-banking failures, 0.2% closed accounts, 0.3% expired, 0.1% poison, 0.5% redelivered copies)
to a fresh SQLite queue, then runs :func:`babelq.pipelines.settle.settle` until the queue is
drained, on one local[2] Spark session:

* ``spark job``: the current code (decode and classification on the JVM, every read slot's task
  settling the rows it read, in parallel, ``--partitions`` tasks);
* ``single task (before)``: the same ``settle`` loop and source with the micro-batch code of
  commit ff5735d (``bench/settle_before.py``: ``coalesce(1)``, decode and classify in Python).

The two alternate, round after round (``--rounds``, default 3, after one warm-up round of each),
so load from neighbours on a shared machine hits both. Printed: per path the median and range of
messages/s over the whole ``settle`` call (query start to "drained"), and of the seconds spent
inside the micro-batch bodies (``foreachBatch``) versus the rest (the source's reservations and
acks, planning, triggers, the drain check); then the ratio of the medians.

``--baseline REV`` compares whole trees instead: the current tree's ``settle`` against the one of
git revision REV (a worktree; e.g. ``764372d``, the code of the day the settle speed target was
set, whose source the driver read and whose settle ran in one task), each in its own process and
Spark session (``bench/settle_runner.py``) with its own defaults, over the same workload, rounds
alternating; printed: each side's messages/s per round, the medians and their ratio.

Usage: ``python3 dev.py bench settle [--rows N] [--batch N] [--rounds N] [--partitions N]
[--baseline REV]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import timed_calls, tree_env, worktree_src


def bodies(n: int) -> tuple[list[bytes], int]:
    """The workload (same bytes every round) and how many distinct payments it should post."""
    from babelq.envelope import make, now_ms
    from babelq.pipelines import TRANSFER_URN

    out: list[bytes] = []
    expected = 0
    now = now_ms()
    for i in range(n):
        kind = i % 1000
        account = "12349999" if kind < 2 else "12340000" if kind < 12 else f"98765{kind:03d}"
        expire_at = now - 1 if 12 <= kind < 15 else now + 86_400_000
        if kind == 15:
            out.append(b"{not json " + str(i).encode())
            continue
        data = {
            "payment_reference": f"PAY-{i:08d}", "amount_cents": 1000 + i % 5000, "currency": "AUD",
            "debtor_bsb": "012-345", "debtor_account": f"{200000 + i % 700000}", "creditor_bsb": "033-001",
            "creditor_account": account,
            "validation_result": {"passed": True, "checks": ["reference_present", "schema"]},
        }
        out.append(make(TRANSFER_URN, data, queue="payments", correlation_id="bulk_bench",
                        expire_at=expire_at).encode())
        if 2 <= kind < 12 or kind > 15:  # not closed, not expired, not poison
            expected += 1
    copies = [out[i] for i in range(0, n, 200) if not out[i].startswith(b"{not")]
    return out + copies, expected


def fill_queue(url: str, payload: list[bytes]) -> None:
    """Publish the workload to queue ``payments`` at ``url``, 20,000 messages per call."""
    from babelq.transports import Outgoing, open_transport

    transport = open_transport(url)
    try:
        for start in range(0, len(payload), 20_000):
            transport.publish_many("payments", [Outgoing(b) for b in payload[start:start + 20_000]])
    finally:
        transport.close()


def one_round(spark: Any, payload: list[bytes], expected: int, *, before: bool, batch: int,
              partitions: int) -> tuple[float, int, float, dict[str, float]]:
    """(seconds of the settle call, messages settled, seconds inside foreachBatch, seconds per phase of
    the partitions' Python work summed over the tasks: the current code's profile)."""
    import babelq.pipelines.consume.query as engine
    import babelq.pipelines.settle.query as settle_module
    from babelq.pipelines.ledger import open_ledger

    busy: list[float] = []
    original, original_decoded = engine._process_batch, engine.decoded
    if before:  # the old micro-batch body, on the raw stream as before (it decodes in Python)
        import settle_before

        def old_body(df: Any, batch_id: int, *, config: Any, stats: Any, **_: Any) -> None:
            old = settle_before.SettleConfig(url=config.url, queue=config.queue, ledger=config.sink)
            settle_before.process_batch(df, batch_id, config=old, stats=stats)

        engine._process_batch = timed_calls(old_body, busy)  # type: ignore[assignment]
        engine.decoded = lambda df: df  # type: ignore[assignment]
    else:
        engine._process_batch = timed_calls(original, busy)  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-settle-") as tmp:
            url = f"sqlite://{tmp}/q.db"
            fill_queue(url, payload)
            run = settle_module.settle(
                spark, url=url, queue="payments", ledger=f"{tmp}/ledger.db", checkpoint=f"{tmp}/ck",
                retry_delay_ms=50, max_messages_per_batch=batch, num_partitions=1 if before else partitions,
                timeout=900,
            )
            ledger = open_ledger(f"{tmp}/ledger.db")
            entries = ledger.totals()[0]
            ledger.close()
            if not run.drained or entries != expected:
                raise SystemExit(f"round did not settle: drained={run.drained}, "
                                 f"posted {entries} of {expected}")
            return run.seconds, run.stats.messages, sum(busy), dict(run.stats.seconds)
    finally:
        engine._process_batch = original  # type: ignore[assignment]
        engine.decoded = original_decoded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100_000,
                        help="max messages per micro-batch (settle's own default on SQLite: 100,000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--baseline", help="a git revision whose whole settle to run next to the current "
                        "tree's (--batch and --partitions then do not apply: each tree's defaults)")
    args = parser.parse_args()
    if args.baseline:
        compare_trees(args.baseline, args.rows, args.rounds)
        return

    from pyspark import cloudpickle

    import settle_before
    from babelq.spark.session import get_session

    cloudpickle.register_pickle_by_value(settle_before)  # type: ignore[no-untyped-call]  # workers cannot import bench/
    spark = get_session("babelq-bench-settle", master="local[2]")
    payload, expected = bodies(args.rows)
    print(f"settle of {len(payload):,} messages ({args.rows:,} payments + copies), SQLite broker and ledger, "
          f"local[2], micro-batches of {args.batch:,}; {args.rounds} alternated rounds after a warm-up")
    paths = {"spark job": False, "single task (before)": True}
    results: dict[str, list[tuple[float, int, float, dict[str, float]]]] = {name: [] for name in paths}
    for round_no in range(args.rounds + 1):
        for name, before in paths.items():
            got = one_round(spark, payload, expected, before=before, batch=args.batch,
                            partitions=args.partitions)
            label = "warm-up" if round_no == 0 else f"round {round_no}"
            print(f"  {label:<8} {name:<22} {got[0]:6.2f} s  {got[1] / got[0]:9,.0f} msg/s  "
                  f"(foreachBatch {got[2]:5.2f} s, rest {got[0] - got[2]:5.2f} s)", flush=True)
            if round_no:
                results[name].append(got)
    print("summary (median [min - max])")
    medians: dict[str, float] = {}
    for name, runs in results.items():
        rates = [m / s for s, m, _, _ in runs]
        inside = [b for _, _, b, _ in runs]
        rest = [s - b for s, _, b, _ in runs]
        medians[name] = statistics.median(rates)
        print(f"  {name:<22} {medians[name]:9,.0f} msg/s [{min(rates):,.0f} - {max(rates):,.0f}]   "
              f"foreachBatch {statistics.median(inside):5.2f} s [{min(inside):.2f} - {max(inside):.2f}]   "
              f"rest {statistics.median(rest):5.2f} s [{min(rest):.2f} - {max(rest):.2f}]")
    phases = results["spark job"][0][3]
    if phases:
        print("  spark job, the partitions' Python work per phase (seconds summed over the tasks, median):")
        for phase in phases:
            values = [r[3].get(phase, 0.0) for r in results["spark job"]]
            middle = statistics.median(values)
            print(f"    {phase:<8} {middle:6.2f} s [{min(values):.2f} - {max(values):.2f}]")
    ratio = medians["spark job"] / medians["single task (before)"]
    print(f"  spark job / single task: {ratio:.2f}x (target: 5x)")
    spark.stop()


class _Side:
    """A settle_runner.py process running one tree's settle, a round per request."""

    def __init__(self, name: str, src: Path, payload_file: str, log_file: Any) -> None:
        env = tree_env(src)
        self.name = name
        runner = Path(__file__).resolve().parent / "settle_runner.py"
        self.process = subprocess.Popen([sys.executable, str(runner), payload_file], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=log_file, text=True, env=env)

    def round(self) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("round\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith("ROUND "):
                answer: dict[str, Any] = json.loads(line[len("ROUND "):])
                if not answer["drained"] or answer["posted"] != answer["expected"]:
                    raise SystemExit(f"{self.name}: round did not settle: {answer}")
                return answer
        raise SystemExit(f"{self.name}: the runner stopped (exit {self.process.wait()}); see its log above")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=120)


def compare_trees(revision: str, rows: int, rounds: int) -> None:
    """The current tree's whole settle against revision ``revision``'s, alternating rounds."""
    import pickle

    root = Path(__file__).resolve().parent.parent
    payload, expected = bodies(rows)
    with tempfile.TemporaryDirectory(prefix="bench-settle-trees-") as tmp:
        payload_file = f"{tmp}/payload.pickle"
        Path(payload_file).write_bytes(pickle.dumps((payload, expected)))
        print(f"settle of {len(payload):,} messages ({rows:,} payments + copies), SQLite broker and ledger, "
              f"local[2], each tree with its own defaults; {rounds} alternated rounds after a warm-up")
        with open(f"{tmp}/runners.log", "w") as log_file:
            sides = [_Side("current", root / "src", payload_file, log_file),
                     _Side(revision, worktree_src(revision), payload_file, log_file)]
            rates: dict[str, list[float]] = {side.name: [] for side in sides}
            try:
                for round_no in range(rounds + 1):
                    for side in sides:
                        got = side.round()
                        rate = got["messages"] / got["seconds"]
                        label = "warm-up" if round_no == 0 else f"round {round_no}"
                        print(f"  {label:<8} {side.name:<12} {got['seconds']:7.2f} s  {rate:9,.0f} msg/s",
                              flush=True)
                        if round_no:
                            rates[side.name].append(rate)
            except SystemExit:
                log_file.flush()
                print(Path(f"{tmp}/runners.log").read_text()[-4000:], file=sys.stderr)
                raise
            finally:
                for side in sides:
                    side.close()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    for name, values in rates.items():
        print(f"  {name:<12} {medians[name]:9,.0f} msg/s [{min(values):,.0f} - {max(values):,.0f}]")
    print(f"  current / {revision}: {medians['current'] / medians[revision]:.2f}x (target: 5x)")


if __name__ == "__main__":
    main()
