"""``babelq demo``: the whole payment flow on local Spark, reconciled to the row.

Generate a bulk file with known defects -> ingest (validate, reject aside, publish) -> inject
poison bodies as a misbehaving producer would -> settle (stream, dedupe, DLQ, retry, post)
-> triage the DLQ -> reconcile: every file row is posted, rejected or dead-lettered, every
injected poison body is dead-lettered, and the ledger holds each valid payment exactly once.
The verdict is the exit code; an HTML report with inline SVG charts is written beside the data.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from babelq.envelope import dlq_name, uuid4
from babelq.pipelines.dlq import Triage, triage
from babelq.pipelines.generator import GeneratedFile, generate_bulk_file, poison_bodies
from babelq.pipelines.ingest import IngestResult, ingest
from babelq.pipelines.ledger import open_ledger
from babelq.pipelines.report import write_report
from babelq.pipelines.settle import SettleRun, SettleStats, settle
from babelq.pipelines.stages import StageClock
from babelq.transports import Outgoing, open_transport
from babelq.urls import redact

log = logging.getLogger("babelq.pipelines")

MARKER = ".babelq-demo"

#: Spark settings of the session the demo starts for itself. The demo is a short run of small
#: jobs on a fresh JVM, where the C2 JIT compiler would burn more CPU compiling Spark than it
#: saves (measured: about half of ingest's CPU time went to C2 compiler threads); C1 alone
#: compiles quickly and is fast enough for 100k rows. The setting replaces get_session's default
#: ``-XX:-DontCompileHugeMethods``, so it is repeated: without it the JIT never compiles Spark's
#: generated code for decode's wide projection (over 8000 bytes), which settle runs on every
#: message, and those methods stay interpreted.
DEMO_SPARK_CONF = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:-DontCompileHugeMethods"}


@dataclass(slots=True)
class Check:
    name: str
    expected: int
    actual: int

    @property
    def ok(self) -> bool:
        return self.expected == self.actual


@dataclass(slots=True)
class DemoResult:
    out: Path
    broker: str
    queue: str
    generated: GeneratedFile
    ingest: IngestResult
    settle: SettleRun
    triage: Triage
    ledger_entries: int
    ledger_references: int
    doubles: list[tuple[str, int]]
    clock: StageClock
    checks: list[Check] = field(default_factory=list)
    report: Path | None = None
    seconds: float = 0.0
    ledger: str = ""  #: the ledger (redacted) and, for one the demo did not create, its tables' prefix

    @property
    def balanced(self) -> bool:
        return all(c.ok for c in self.checks) and not self.doubles

    def reconciliation_lines(self) -> list[tuple[str, int]]:
        by_cause = self.dlq_by_cause()
        lines = [("rows in (bulk file)", self.generated.rows)]
        lines += [
            (f"  rejected at ingest: {r}", n) for r, n in sorted(self.ingest.rejected_by_reason.items())
        ]
        lines.append(("  posted to the ledger", self.ledger_entries))
        lines += [
            (f"  dead-lettered: {c}", n)
            for c, n in sorted(by_cause.items())
            if c not in ("poison", "unsupported")
        ]
        lines.append(("poison bodies injected", self.injected_poison))
        lines += [
            (f"  dead-lettered: {c}", n)
            for c, n in sorted(by_cause.items())
            if c in ("poison", "unsupported")
        ]
        return lines

    @property
    def injected_poison(self) -> int:
        return max(1, self.generated.rows // 1000)

    def dlq_by_cause(self) -> dict[str, int]:
        """Failed messages per cause, each counted once (copies of one dead letter are one)."""
        out: dict[str, int] = {}
        for (reason, cause, *_), n in self.triage.messages.items():
            key = cause or reason
            out[key] = out.get(key, 0) + n
        return out


class Heartbeat:
    """A progress line every ``every`` seconds while settle runs.

    The first micro-batch of a 100k demo takes most of settle's time, so "messages settled"
    alone would sit at 0; the line also shows how many messages still wait on the queue and
    how many are reserved (being settled, or held by a killed run): ``depth`` returns both.
    """

    def __init__(self, depth: Callable[[], tuple[int, int | None]], every: float = 5.0) -> None:
        self.depth = depth
        self.every = every
        self.started = self.last = time.monotonic()

    def __call__(self, stats: SettleStats) -> None:
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        with stats.lock:
            done, batches = stats.messages, stats.batches
        waiting, reserved = self.depth()
        log.info(
            "settle: %.0f s, %d messages settled in %d micro-batches, %d waiting on the queue, %s reserved",
            now - self.started,
            done,
            batches,
            waiting,
            "?" if reserved is None else reserved,
        )


def _fresh_dir(out: Path) -> None:
    if out.exists():
        if not (out / MARKER).exists() and any(out.iterdir()):
            raise FileExistsError(f"{out} exists and is not a babelq demo directory; choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("created by babelq demo; deleted by the next run\n", encoding="utf-8")


def run_demo(
    *,
    rows: int = 100_000,
    out: str | Path = "out/demo",
    broker: str | None = None,
    spark: Any = None,
    seed: int = 42,
    max_messages_per_batch: int = 100_000,
    retry_delay_ms: int = 200,
    timeout: float = 900.0,
    ledger: str | None = None,
    master: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
) -> DemoResult:
    """Run the demo end to end; returns the result (``.balanced`` decides the exit code).

    ``ledger`` defaults to a fresh SQLite file in ``out`` (local mode only); any other ledger
    (PostgreSQL on a cluster) gets tables of this run's own (prefix ``demo_<run>_``), so the
    reconciliation counts this run's postings and nothing a previous run left there. ``master``
    and ``spark_conf`` go to :func:`babelq.spark.session.get_session` when no ``spark`` is given.
    """
    from babelq.pipelines.cluster_checks import check_cluster_targets

    started = time.perf_counter()
    out_dir = Path(out).resolve()
    _fresh_dir(out_dir)
    url = broker or f"sqlite://{out_dir}/queue.db"
    ledger_target: str | Path = ledger or out_dir / "ledger.db"
    ledger_prefix = "" if ledger is None else f"demo_{uuid4()[:8]}_"
    queue = "payments" if url.startswith("sqlite") else f"payments-demo-{uuid4()[:8]}"
    if ledger is not None:  # an unreachable or malformed --ledger fails now, not after ingest
        open_ledger(ledger_target, prefix=ledger_prefix).close()
    clock = StageClock()
    with clock.stage("generate") as st:
        generated = generate_bulk_file(out_dir / "payments.csv", rows, seed=seed)
        st.rows = rows
    if spark is None:
        from babelq.spark.session import get_session

        with clock.stage("spark.start"):
            spark = get_session("babelq-demo", master=master, **{**DEMO_SPARK_CONF, **(spark_conf or {})})
        try:  # the master Spark gave (spark-defaults.conf...) may be a cluster the targets do not suit
            check_cluster_targets(spark.sparkContext.master, broker=url, ledger=ledger_target)
        except Exception:
            spark.stop()
            raise
    else:
        check_cluster_targets(spark.sparkContext.master, broker=url, ledger=ledger_target)
    result_ingest = ingest(
        spark,
        generated.path,
        url=url,
        queue=queue,
        rejects_path=out_dir / "rejects",
        batch_id=f"bulk_demo_{seed:04d}",
        clock=clock,
    )
    transport = open_transport(url)
    try:
        with clock.stage("inject.poison") as st:
            poison = poison_bodies(max(1, rows // 1000))
            transport.publish_many(queue, [Outgoing(b) for b in poison])
            st.rows = len(poison)
        with clock.stage("settle") as st:
            run = settle(
                spark,
                url=url,
                queue=queue,
                ledger=ledger_target,
                ledger_prefix=ledger_prefix,
                checkpoint=out_dir / "checkpoint",
                retry_delay_ms=retry_delay_ms,
                max_messages_per_batch=max_messages_per_batch,
                timeout=timeout,
                on_poll=Heartbeat(lambda: (transport.size(queue), transport.reserved(queue))),
            )
            st.rows = run.stats.messages
        with clock.stage("dlq.triage") as st:
            dlq = triage(transport, dlq_name(queue))
            st.rows = dlq.total
    finally:
        transport.close()
    book = open_ledger(ledger_target, prefix=ledger_prefix)
    try:
        entries, refs, _ids = book.totals()
        doubles = book.references_posted_more_than_once()
    finally:
        book.close()
    result = DemoResult(
        out_dir, url, queue, generated, result_ingest, run, dlq, entries, refs, doubles, clock
    )
    result.ledger = redact(str(ledger_target)) + (f" (tables {ledger_prefix}*)" if ledger_prefix else "")
    result.checks = _checks(result)
    result.seconds = time.perf_counter() - started
    result.report = _report(result)
    return result


def _checks(r: DemoResult) -> list[Check]:
    g = r.generated
    by_cause = r.dlq_by_cause()
    dead_payments = sum(n for c, n in by_cause.items() if c not in ("poison", "unsupported"))
    return [
        Check(
            "rows in = rejected + posted + dead-lettered",
            g.rows,
            r.ingest.rejected + r.ledger_entries + dead_payments,
        ),
        Check(
            "poison injected = poison dead-lettered",
            r.injected_poison,
            by_cause.get("poison", 0) + by_cause.get("unsupported", 0),
        ),
        Check("rejected at ingest (expected from the generator)", g.expected_rejected, r.ingest.rejected),
        Check("posted (each valid payment)", g.expected_posted, r.ledger_entries),
        Check("ledger: distinct references = entries", r.ledger_entries, r.ledger_references),
        Check("dead-lettered expired", g.defects["expired"], by_cause.get("expired", 0)),
        Check(
            "dead-lettered after max attempts", g.defects["closed_account"], by_cause.get("max_attempts", 0)
        ),
        Check("queue drained (settle stopped on an empty queue)", 1, int(r.settle.drained)),
    ]


def _report(r: DemoResult) -> Path:
    stages = [(s.name, s.seconds, s.rows) for s in r.clock.stages if s.rows]
    summary: list[tuple[str, object]] = [
        ("broker", redact(r.broker)),
        ("ledger", r.ledger),
        ("queue", r.queue),
        ("rows", r.generated.rows),
        ("total seconds", f"{r.seconds:.1f}"),
        ("settle micro-batches", r.settle.stats.batches),
        ("retries", r.settle.stats.count("retried")),
        ("duplicates dropped", r.settle.stats.count("duplicate")),
    ]
    checks = [
        (f"{'ok ' if c.ok else 'FAIL'} {c.name}", f"{c.actual} (expected {c.expected})") for c in r.checks
    ]
    return write_report(
        r.out / "report.html",
        title=f"babelq demo: {r.generated.rows:,} payments",
        balanced=r.balanced,
        summary=summary,
        stages=stages,
        dlq_reasons=sorted(r.dlq_by_cause().items()),
        reconciliation=[*r.reconciliation_lines(), *checks],
        triage_text=r.triage.table(),
    )


def render_text(r: DemoResult) -> str:
    """The reconciliation table and stage timings, for the terminal."""
    width = max(len(label) for label, _ in r.reconciliation_lines()) + 2
    lines = ["", "RECONCILIATION"]
    lines += [f"  {label:<{width}}{n:>10,}" for label, n in r.reconciliation_lines()]
    lines += ["", "CHECKS"]
    lines += [
        f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.actual:,} (expected {c.expected:,})" for c in r.checks
    ]
    if r.doubles:
        lines.append(f"  [FAIL] references posted more than once: {r.doubles}")
    lines += ["", "STAGES"]
    lines += [
        f"  {s.name:<18}{s.seconds:>8.2f} s  {s.rows:>9,} rows  {s.rate:>10,.0f} rows/s"
        for s in r.clock.stages
    ]
    lines += [
        "",
        f"total {r.seconds:.1f} s; report: {r.report}",
        *([f"ledger: {r.ledger}"] if r.ledger else []),
        "BALANCED" if r.balanced else "NOT BALANCED",
        "",
    ]
    return "\n".join(lines)
