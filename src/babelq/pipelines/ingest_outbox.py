"""``babelq ingest FILE --outbox URL``: stage a bulk file's envelopes in a transactional outbox.

Publishing straight to a broker (:func:`babelq.pipelines.ingest.ingest`) needs the batch
journal to tell a finished batch from an interrupted one, and an interrupted one is published
again in full (consumers drop the copies). Staging in an outbox makes that question go away:
every valid payment's envelope is written to the outbox table **and**, in the same database
transaction, one row of ``<table>_ingest_batches`` records the batch (id, file, SHA-256, rows,
how many were staged). Either the batch is staged whole with its record, or nothing of it is.
A re-run that finds the record stages nothing and says so. A run killed halfway left nothing,
so running it again stages the batch once. ``babelq relay`` then publishes the rows, with the
outbox's guarantees (docs/outbox.md).

Validation, rejects and envelopes are the same Spark work as the direct ingest. The envelopes
come to the driver (``toLocalIterator``, one partition at a time) and are written there, so
the outbox may be an SQLite file even when Spark runs on a cluster.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from babelq.envelope import now_ms
from babelq.errors import ConfigurationError
from babelq.outbox import DEFAULT_TABLE, Outbox, init_schema
from babelq.outbox.schema import check_table, dialect_of
from babelq.outbox.target import close_quietly, connect
from babelq.pipelines.batch_runs import default_batch_id
from babelq.pipelines.envelopes import EncodeSettings, encode_transfers, with_schema_check
from babelq.pipelines.ingest import (
    DEFAULT_QUEUE,
    DEFAULT_TTL_SECONDS,
    IngestResult,
    check_columns,
    check_source,
    header_fields,
    read_bulk,
    with_record_errors,
    write_rejects,
)
from babelq.pipelines.ingest_rules import FIELD_COUNT_MISMATCH, Limits, normalise, validate
from babelq.pipelines.journal import file_digest
from babelq.spark.cache import cache_uncompressed

log = logging.getLogger(__name__)

STAGED = "staged"  #: the batch was staged in the outbox now
ALREADY_STAGED = "already_staged"  #: an earlier run staged it: nothing staged now
RESTAGED = "restaged"  #: staged before, staged again on request (same meta.ids)

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
    source: str | Path, outbox_url: str, *, batch_id: str | None = None, table: str = DEFAULT_TABLE
) -> StagePlan:
    """Check ``source``, hash it, name its batch and look it up in the outbox's batch records."""
    path = check_source(source)
    digest = file_digest(path)
    batch = batch_id or default_batch_id(digest)
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
    if plan.staged is not None and not restage:
        log.info("ingest %s: already staged in the outbox (%d envelopes)", plan.batch_id, plan.staged)
        return IngestResult(plan.batch_id, 0, 0, 0, {}, str(rejects_path), ALREADY_STAGED, plan.digest)
    conn, mark = _open(outbox_url, table)
    try:
        result = _stage(spark, conn, path=plan.path, batch=plan.batch_id, digest=plan.digest, mark=mark,
                        queue=queue, rejects_path=rejects_path, ttl_seconds=ttl_seconds, limits=limits,
                        rejects_format=rejects_format, table=table, replace=plan.staged is not None)
    finally:
        close_quietly(conn)
    if plan.staged is not None:
        result.status = RESTAGED
    return result


def _stage(
    spark: Any, conn: Any, *, path: Path, batch: str, digest: str, mark: str, queue: str,
    rejects_path: str | Path, ttl_seconds: int, limits: Limits | None, rejects_format: str, table: str,
    replace: bool,
) -> IngestResult:
    from pyspark.sql import functions as sf

    settings = EncodeSettings(queue, batch, ttl_seconds, now_ms())
    bulk = read_bulk(spark, str(path))
    check_columns(bulk, path)
    checked = cache_uncompressed(with_schema_check(validate(normalise(bulk), limits), settings.validated_at))
    try:
        counts = checked.groupBy(sf.get("reasons", 0).alias("reason")).count().collect()
        rows_in = sum(int(r["count"]) for r in counts)
        by_reason = {r["reason"]: int(r["count"]) for r in counts if r["reason"] is not None}
        rejected = sum(by_reason.values())
        rejects = with_record_errors(spark, checked.filter(sf.size("reasons") > 0), path, header_fields(bulk),
                                     by_reason.get(FIELD_COUNT_MISMATCH, 0))
        write_rejects(rejects, str(rejects_path), rejects_format, drop=("amount",))
        bodies = encode_transfers(checked.filter(sf.size("reasons") == 0), settings)
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
                (batch, str(path), digest, rows_in, 0, rejected, queue, now_ms()),
            )
            chunk: list[bytes] = []
            for row in bodies.toLocalIterator():
                chunk.append(bytes(row["body"]))
                if len(chunk) >= CHUNK:
                    staged += len(outbox.add_many(conn, chunk, queue=queue))
                    chunk = []
            if chunk:
                staged += len(outbox.add_many(conn, chunk, queue=queue))
            conn.execute(f"UPDATE {batches_table(table)} SET staged = {mark} WHERE batch_id = {mark}",
                         (staged, batch))
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
    finally:
        checked.unpersist()
    log.info("ingest %s: %d rows in, %d staged in the outbox for %s, %d rejected", batch, rows_in, staged,
             queue, rejected)
    return IngestResult(batch, rows_in, staged, rejected, by_reason, str(rejects_path), STAGED, digest)
