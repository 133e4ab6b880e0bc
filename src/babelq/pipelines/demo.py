"""``babelq demo``: the whole payment flow on local Spark, reconciled to the row.

Generate a bulk file with known defects -> ingest (validate, reject aside, publish) -> inject
poison bodies as a misbehaving producer would -> settle (stream, dedupe, DLQ, retry, post)
-> triage the DLQ -> reconcile: every file row is posted, rejected or dead-lettered, every
injected poison body is dead-lettered, and the ledger holds each valid payment exactly once.
The verdict is the exit code; an HTML report with inline SVG charts is written beside the data
(:mod:`babelq.pipelines.report`), and a PNG or PDF of it when Chromium is there (:mod:`.report.export`).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from babelq.envelope import dlq_name, uuid4
from babelq.pipelines.demo_result import POISON_CAUSES, Check, DemoResult
from babelq.pipelines.dlq import triage
from babelq.pipelines.generator import generate_bulk_file, poison_bodies
from babelq.pipelines.ingest import ingest
from babelq.pipelines.ledger import open_ledger
from babelq.pipelines.money import Tally, format_minor
from babelq.pipelines.progress import Progress, SettleProgress, queue_depth
from babelq.pipelines.report import write_report
from babelq.pipelines.report.export import ExportError, export_report, missing_note, resolve_export
from babelq.pipelines.settle import SettleQuery, prepare_settle
from babelq.pipelines.stages import StageClock
from babelq.pipelines.value_reconciliation import ValueLine
from babelq.spark.session import DRIVER_JVM_FLAGS
from babelq.transports import Outgoing, open_transport
from babelq.urls import redact

log = logging.getLogger("babelq.pipelines")
T = TypeVar("T")

MARKER = ".babelq-demo"

#: Spark settings of the session the demo starts for itself on a file of fewer than
#: :data:`QUICK_JIT_BELOW` rows. Such a demo is a short run of small jobs on a fresh JVM, where the
#: C2 JIT compiler spends more CPU compiling Spark's generated code than a short run earns back;
#: C1 alone compiles quickly and is fast enough. The setting replaces get_session's default
#: driver options, so they are repeated (:data:`DRIVER_JVM_FLAGS`): without
#: ``-XX:-DontCompileHugeMethods`` the JIT never compiles Spark's generated code for decode's wide
#: projection (over 8000 bytes), which settle runs on every message, and without the heap growth
#: setting the driver's heap grows further for no gain in time. Adaptive query execution is off
#: too: on 2 cores with 4 shuffle partitions it has nothing to coalesce, and each shuffle it
#: re-plans is a Spark job of its own, a cost only a short run notices.
DEMO_SPARK_CONF = {
    "spark.driver.extraJavaOptions": f"-XX:TieredStopAtLevel=1 {DRIVER_JVM_FLAGS}",
    "spark.sql.adaptive.enabled": "false",
}
#: From this many rows the demo runs long enough for C2's faster code to repay its compiling: it
#: keeps get_session's settings.
QUICK_JIT_BELOW = 600_000


def demo_spark_conf(rows: int) -> dict[str, str]:
    """The Spark settings the demo starts its session with for a file of ``rows`` payments."""
    return dict(DEMO_SPARK_CONF) if rows < QUICK_JIT_BELOW else {}


def _in_background(name: str, work: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
    """``work(*args, **kwargs)`` in a thread of its own named ``name``; the caller goes on."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
    try:
        return pool.submit(work, *args, **kwargs)
    finally:
        pool.shutdown(wait=False)


def _launch_jvm(master: str | None, conf: Mapping[str, str]) -> Future[None]:
    """:func:`babelq.spark.session.launch_jvm` in a thread of its own: the launch mostly waits on
    the child process, so the caller's Python work goes on meanwhile."""
    from babelq.spark.session import launch_jvm

    return _in_background("babelq-jvm-launch", launch_jvm, master, **conf)


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
    retry_delay_ms: int = 10,
    timeout: float = 900.0,
    ledger: str | None = None,
    master: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    export: str = "auto",
    progress: Progress | None = None,
) -> DemoResult:
    """Run the demo end to end; returns the result (``.balanced`` decides the exit code).

    ``ledger`` defaults to a fresh SQLite file in ``out`` (local mode only); any other ledger
    (PostgreSQL on a cluster) gets tables of this run's own (prefix ``demo_<run>_``), so the
    reconciliation counts this run's postings and nothing a previous run left there. ``master``
    and ``spark_conf`` go to :func:`babelq.spark.session.get_session` when no ``spark`` is given.
    ``export``: ``auto`` (a PNG of the report when Chromium is found, else a log line), ``png``,
    ``pdf`` (a one-line ConfigurationError at once when there is no Chromium) or ``none``.
    ``progress`` shows the stages while they run (:mod:`babelq.pipelines.progress`; default: off).
    ``retry_delay_ms`` is the base of the retries' backoff: short, so that the transient failures'
    retries come back in the next micro-batch: a longer base lets their jitter spread them over
    several small micro-batches, each paying a Spark job's fixed cost.
    """
    from babelq.pipelines.cluster_checks import check_cluster_targets

    started = time.perf_counter()
    started_at = time.time()
    export_format = resolve_export(export)
    out_dir = Path(out).resolve()
    _fresh_dir(out_dir)
    url = broker or f"sqlite://{out_dir}/queue.db"
    ledger_target: str | Path = ledger or out_dir / "ledger.db"
    ledger_prefix = "" if ledger is None else f"demo_{uuid4()[:8]}_"
    queue = "payments" if url.startswith("sqlite") else f"payments-demo-{uuid4()[:8]}"
    if ledger is not None:  # an unreachable or malformed --ledger fails now, not after ingest
        open_ledger(ledger_target, prefix=ledger_prefix).close()
    clock = StageClock(progress=progress or Progress.off())
    conf = {**demo_spark_conf(rows), **(spark_conf or {})}
    # the JVM starts while the file is written: one core generates, the other launches Spark
    launching = _launch_jvm(master, conf) if spark is None else None
    try:
        with clock.stage("generate") as st:
            generated = generate_bulk_file(out_dir / "payments.csv", rows, seed=seed)
            st.rows = rows
    except BaseException:
        if launching is not None:
            launching.exception()  # a JVM half-launched when generating failed: let it finish, then fail
        raise
    if launching is not None:
        from babelq.spark.session import get_session

        with clock.stage("spark.start"):  # what is left of the start once the file is written
            launching.result()
            spark = get_session("babelq-demo", master=master, **conf)
        try:  # the master Spark gave (spark-defaults.conf...) may be a cluster the targets do not suit
            check_cluster_targets(spark.sparkContext.master, broker=url, ledger=ledger_target)
        except Exception:
            spark.stop()
            raise
    else:
        check_cluster_targets(spark.sparkContext.master, broker=url, ledger=ledger_target)
    # settle's query is prepared (ledger, decode's expressions, the source) while ingest runs: the
    # driver's Python mostly waits for ingest's Spark jobs meanwhile
    preparing = _in_background(
        "babelq-settle-prepare", prepare_settle, spark, url=url, queue=queue, ledger=ledger_target,
        ledger_prefix=ledger_prefix, retry_delay_ms=retry_delay_ms,
        max_messages_per_batch=max_messages_per_batch)
    try:
        result_ingest = ingest(
            spark,
            generated.path,
            url=url,
            queue=queue,
            rejects_path=out_dir / "rejects",
            batch_id=f"bulk_demo_{seed:04d}",
            clock=clock,
        )
    except BaseException:
        preparing.exception()  # let the preparation finish before the caller stops the session
        raise
    transport = open_transport(url)
    try:
        with clock.stage("inject.poison", unit="messages") as st:
            poison = poison_bodies(max(1, rows // 1000))
            transport.publish_many(queue, [Outgoing(b) for b in poison])
            st.rows = len(poison)
        with clock.stage("settle", total=result_ingest.published + len(poison), unit="messages") as st:
            watch = SettleProgress(st.progress, lambda: queue_depth(transport, queue))
            prepared: SettleQuery = preparing.result()
            run = prepared.run(out_dir / "checkpoint", timeout=timeout, on_poll=watch)
            watch.finish(run)
            st.rows = run.stats.settled
        with clock.stage("dlq.triage", unit="messages") as st:
            dlq = triage(transport, dlq_name(queue))
            st.rows = dlq.total
    finally:
        transport.close()
    book = open_ledger(ledger_target, prefix=ledger_prefix)
    try:
        entries, refs, _ids = book.totals()
        doubles = book.references_posted_more_than_once()
        posted = book.totals_by_currency()
    finally:
        book.close()
    result = DemoResult(
        out_dir, url, queue, generated, result_ingest, run, dlq, entries, refs, doubles, clock
    )
    result.ledger = redact(str(ledger_target)) + (f" (tables {ledger_prefix}*)" if ledger_prefix else "")
    result.master = str(spark.sparkContext.master)
    result.posted_by_currency = posted
    result.started_at = started_at
    result.checks = _checks(result)
    result.seconds = time.perf_counter() - started
    result.finished_at = started_at + result.seconds
    result.report = write_report(result, out_dir / "report.html")
    _export(result, export, export_format)
    return result


def _export(result: DemoResult, choice: str, fmt: str | None) -> None:
    """The report's PNG/PDF; a failure is noted (and logged), never the demo's failure (the CLI
    exits 2 when the format was asked for by name)."""
    assert result.report is not None
    if fmt is None:
        result.export_note = "not exported (export: none)" if choice == "none" else missing_note()
        log.info("report %s: %s", result.report.name, result.export_note)
        return
    try:
        result.exported = export_report(result.report, fmt)
    except ExportError as exc:
        result.export_note = str(exc)
        log.warning("report %s: %s", result.report.name, exc)
        return
    log.info("report %s: exported %s", result.report.name, result.exported)


def _checks(r: DemoResult) -> list[Check]:
    g = r.generated
    by_cause = r.dlq_by_cause()
    dead_payments = sum(n for c, n in by_cause.items() if c not in POISON_CAUSES)
    return [
        Check("Every row of the file is rejected, posted or dead-lettered", g.rows,
              r.ingest.rejected + r.ledger_entries + dead_payments),
        Check("Every poison body injected is dead-lettered", r.injected_poison,
              by_cause.get("poison", 0) + by_cause.get("unsupported", 0)),
        Check("Ingest rejects the rows the generator made invalid", g.expected_rejected, r.ingest.rejected),
        Check("Each valid payment is posted", g.expected_posted, r.ledger_entries),
        Check("Each ledger entry has a payment reference of its own", r.ledger_entries, r.ledger_references),
        Check("Each expired payment is dead-lettered as expired", g.defects["expired"],
              by_cause.get("expired", 0)),
        Check("Each payment to a closed account is dead-lettered after its last attempt",
              g.defects["closed_account"], by_cause.get("max_attempts", 0)),
        Check("Settle stopped on an empty queue", 1, int(r.settle.drained), yes_no=True),
        Check("Lines of the value table that add up (file = posted + rejected + dead-lettered)",
              len(r.value_lines()), sum(1 for line in r.value_lines() if line.ok)),
    ]


def render_text(r: DemoResult) -> str:
    """The reconciliation table and stage timings, for the terminal."""
    width = max(len(label) for label, _ in r.reconciliation_lines()) + 2
    lines = ["", "RECONCILIATION"]
    lines += [f"  {label:<{width}}{n:>10,}" for label, n in r.reconciliation_lines()]
    lines += ["", "VALUE BY CURRENCY: file = posted + rejected + dead-lettered, amount (rows)"]
    lines += [_value_text(v) for v in r.value_lines()]
    lines += ["", "CHECKS"]
    lines += [
        f"  [{'ok' if c.ok else 'FAIL'}] {c.said()}" for c in r.checks
    ]
    if r.doubles:
        lines.append(f"  [FAIL] references posted more than once: {r.doubles}")
    lines += ["", "STAGES"]
    lines += [
        f"  {s.name:<18}{s.seconds:>8.2f} s  {s.rows:>9,} {s.unit:<8}  {s.rate:>10,.0f} {s.unit}/s"
        for s in r.clock.stages
    ]
    lines += [
        "",
        f"total {r.seconds:.1f} s; report: {r.report}",
        f"report export: {r.exported or r.export_note}",
        *([f"ledger: {r.ledger}"] if r.ledger else []),
        f"core banking: {r.settle.bank}",
        "BALANCED" if r.balanced else "NOT BALANCED",
        "",
    ]
    return "\n".join(lines)


def _value_text(v: ValueLine) -> str:
    """``AUD  1,234.56 (10) = 1,000.00 (8) + 200.00 (1) + 34.56 (1)  [ok]``: file = posted + rejected +
    dead-lettered, amount (payments)."""
    status = "ok" if v.ok else "FAIL"
    if v.currency is None:
        return (f"  {'no amount':<10}{v.file.count:,} rows = {v.posted.count:,} + {v.rejected.count:,} + "
                f"{v.dead.count:,}  [{status}]")
    code = v.currency

    def part(t: Tally) -> str:
        return f"{format_minor(t.minor, code)} ({t.count:,})"

    note = "  (amount out of range)" if v.part else "" if v.iso else "  (not ISO 4217: minor units)"
    return (f"  {code or '(blank)':<10}{part(v.file)} = {part(v.posted)} + {part(v.rejected)} + "
            f"{part(v.dead)}  [{status}]{note}")
