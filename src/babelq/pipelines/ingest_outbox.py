"""``babelq ingest FILE --outbox URL``: stage a bulk file's envelopes in a transactional outbox
(and ``babelq publish FILE --outbox URL``: :func:`stage_batch` stages any checked rows).

Publishing straight to a broker (:func:`babelq.pipelines.ingest.ingest`) needs the batch
journal to tell a finished batch from an interrupted one, and an interrupted one is published
again in full (consumers drop the copies). Staging in an outbox makes that question go away:
every valid payment's envelope is written to the outbox table **and**, in the same database
transaction, one row of ``<table>_ingest_batches`` records the batch (id, file, SHA-256, rows,
how many were staged). Either the batch is staged whole with its record, or nothing of it is.
A re-run that finds the record stages nothing and says so. A run killed halfway left nothing,
so running it again stages the batch once. ``babelq relay`` then publishes the rows, with the
outbox's guarantees (docs/outbox.md).

Validation, rejects and envelopes are the same Spark work as the direct publish. The envelopes
come to the driver (``toLocalIterator``, one partition at a time) and are written there, so
the outbox may be an SQLite file even when Spark runs on a cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from babelq.envelope import now_ms
from babelq.errors import ConfigurationError
from babelq.outbox import DEFAULT_TABLE, Outbox, init_schema
from babelq.outbox.schema import check_table, dialect_of
from babelq.outbox.target import close_quietly, connect
from babelq.pipelines.batch_runs import BatchResult, CheckedRows, default_batch_id
from babelq.pipelines.envelopes import EncodeSettings, with_schema_check
from babelq.pipelines.ingest import (
    DEFAULT_QUEUE,
    DEFAULT_TTL_SECONDS,
    IngestResult,
    check_columns,
    check_source,
    checked_payments,
    read_bulk,
)
from babelq.pipelines.ingest_rules import Limits, normalise, validate
from babelq.pipelines.journal import file_digest
from babelq.spark.cache import cache_uncompressed

log = logging.getLogger(__name__)

STAGED = "staged"  #: the batch was staged in the outbox now
ALREADY_STAGED = "already_staged"  #: an earlier run staged it: nothing staged now
RESTAGED = "restaged"  #: staged before, staged again on request (same meta.ids)

R = TypeVar("R", bound=BatchResult)

#: envelopes per insert batch (all in the one transaction)
CHUNK = 5_000


def batches_table(table: str) -> str:
    return f"{check_table(table)}_ingest_batches"


def _ddl(table: str, dialect: str) -> str:
    big = "INTEGER" if dialect == "sqlite" else "BIGINT"
    return (
        f"CREATE TABLE IF NOT EXISTS {batches_table(table)} (batch_id TEXT PRIMARY KEY, "
        f"source TEXT NOT NULL, digest TEXT NOT NULL, rows_in {big} NOT NULL, staged {big} NOT NULL, "
        f"rejected {big} NOT NULL, "
        f"queue TEXT NOT NULL, staged_at {big} NOT NULL)"
    )


def _record(conn: Any, table: str, batch: str, mark: str) -> tuple[Any, ...] | None:
    found = conn.execute(
        f"SELECT digest, source, staged, staged_at FROM {batches_table(table)} WHERE batch_id = {mark}",
        (batch,),
    ).fetchone()
    return None if found is None else tuple(found)


@dataclass(frozen=True, slots=True)
class StagePlan:
    """Which batch a file is, and whether the outbox already holds it (before any Spark work)."""

    path: Path
    batch_id: str
    digest: str
    staged: int | None  #: envelopes an earlier run staged, None if it never was


def _open(outbox_url: str, table: str) -> tuple[Any, str]:
    """A connection in implicit-transaction mode with both tables created, and its placeholder."""
    conn = connect(outbox_url, option="--outbox")
    try:
        dialect = dialect_of(conn)
        if dialect == "sqlite":
            conn.isolation_level = ""  # the module's implicit transactions: add() runs inside one
        init_schema(conn, table=table)
        conn.execute(_ddl(table, dialect))
        conn.commit()
    except BaseException:
        close_quietly(conn)
        raise
    return conn, "?" if dialect == "sqlite" else "%s"


def plan_staging(
    source: str | Path, outbox_url: str, *, batch_id: str | None = None, table: str = DEFAULT_TABLE,
    check: Callable[[str | Path], Path] = check_source, default_id: Callable[[str], str] = default_batch_id,
) -> StagePlan:
    """``check`` ``source`` (default: a bulk payments file), hash it, name its batch (``default_id``
    of the digest unless given) and look it up in the outbox's batch records."""
    path = check(source)
    digest = file_digest(path)
    batch = batch_id or default_id(digest)
    if not batch.strip() or "\n" in batch:
        raise ConfigurationError(f"--batch-id: {batch!r} must be a non-empty single line")
    conn, mark = _open(outbox_url, table)
    try:
        previous = _record(conn, table, batch, mark)
    finally:
        close_quietly(conn)
    if previous is not None and previous[0] != digest:
        raise ConfigurationError(
            f"--batch-id {batch}: already used for another file ({previous[1]}, "
            f"sha256 {previous[0][:12]}…); choose a new batch id for a new file"
        )
    return StagePlan(path, batch, digest, None if previous is None else int(previous[2]))


def stage_ingest(
    spark: Any,
    source: str | Path,
    *,
    outbox_url: str,
    queue: str = DEFAULT_QUEUE,
    rejects_path: str | Path,
    batch_id: str | None = None,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    limits: Limits | None = None,
    rejects_format: str = "parquet",
    table: str = DEFAULT_TABLE,
    restage: bool = False,
    plan: StagePlan | None = None,
) -> IngestResult:
    """Validate ``source`` and stage its valid payments in the outbox at ``outbox_url`` (module
    docstring). A batch already staged is not staged again unless ``restage``."""
    plan = plan or plan_staging(source, outbox_url, batch_id=batch_id, table=table)
    settings = EncodeSettings(queue, plan.batch_id, ttl_seconds, now_ms())

    def check() -> CheckedRows:
        from pyspark.sql import functions as sf

        bulk = read_bulk(spark, str(plan.path))
        check_columns(bulk, plan.path)
        rows = validate(normalise(bulk), limits)
        checked = cache_uncompressed(with_schema_check(rows, settings.validated_at))
        counts = checked.groupBy(sf.get("reasons", 0).alias("reason")).count().collect()
        by_reason = {r["reason"]: int(r["count"]) for r in counts if r["reason"] is not None}
        return checked_payments(checked, bulk, sum(int(r["count"]) for r in counts), by_reason, settings)

    target = StageTarget(outbox_url, table, queue, rejects_path, rejects_format)
    return stage_batch(spark, plan, target, check, restage=restage, what="ingest", result_type=IngestResult)


@dataclass(frozen=True, slots=True)
class StageTarget:
    """The outbox a batch is staged in, for which queue, and where its rejects are written."""

    outbox_url: str
    table: str
    queue: str
    rejects_path: str | Path
    rejects_format: str = "parquet"


def stage_batch(
    spark: Any, plan: StagePlan, target: StageTarget, check: Callable[[], CheckedRows], *, restage: bool,
    what: str, result_type: type[R],
) -> R:
    """Stage the envelopes of the batch ``check`` reads and checks (module docstring), and write its
    rejects; a batch already staged is not staged again unless ``restage``. ``what`` names the
    command in the log."""
    if plan.staged is not None and not restage:
        log.info("%s %s: already staged in the outbox (%d envelopes)", what, plan.batch_id, plan.staged)
        return result_type(plan.batch_id, 0, 0, 0, {}, str(target.rejects_path), ALREADY_STAGED, plan.digest)
    conn, mark = _open(target.outbox_url, target.table)
    try:
        checked = check()
        try:
            checked.write_rejects(spark, plan.path, target.rejects_path, target.rejects_format)
            staged = _stage(conn, plan, target, checked, mark=mark, replace=plan.staged is not None)
        finally:
            checked.rows.unpersist()
    finally:
        close_quietly(conn)
    log.info("%s %s: %d rows in, %d staged in the outbox for %s, %d rejected", what, plan.batch_id,
             checked.rows_in, staged, target.queue, checked.rejected)
    return result_type(plan.batch_id, checked.rows_in, staged, checked.rejected, checked.by_reason,
                       str(target.rejects_path), RESTAGED if plan.staged is not None else STAGED, plan.digest)


def _stage(conn: Any, plan: StagePlan, target: StageTarget, checked: CheckedRows, *, mark: str,
           replace: bool) -> int:
    """Insert the batch's record and its envelopes in one transaction; returns how many were staged."""
    table, batch = target.table, plan.batch_id
    bodies = checked.bodies()
    outbox = Outbox(table=table)
    staged = 0
    try:
        # the batch record first: a concurrent run of the same batch waits on (PostgreSQL) or
        # fails at (SQLite: locked, retried by the caller) this row, never stages it twice
        if replace:
            conn.execute(f"DELETE FROM {batches_table(table)} WHERE batch_id = {mark}", (batch,))
        conn.execute(
            f"INSERT INTO {batches_table(table)} (batch_id, source, digest, rows_in, staged, rejected, "
            f"queue, staged_at) VALUES ({', '.join([mark] * 8)})",
            (batch, str(plan.path), plan.digest, checked.rows_in, 0, checked.rejected, target.queue,
             now_ms()),
        )
        chunk: list[bytes] = []
        for row in bodies.toLocalIterator():
            chunk.append(bytes(row["body"]))
            if len(chunk) >= CHUNK:
                staged += len(outbox.add_many(conn, chunk, queue=target.queue))
                chunk = []
        if chunk:
            staged += len(outbox.add_many(conn, chunk, queue=target.queue))
        conn.execute(f"UPDATE {batches_table(table)} SET staged = {mark} WHERE batch_id = {mark}",
                     (staged, batch))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return staged
