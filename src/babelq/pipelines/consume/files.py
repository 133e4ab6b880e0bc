"""A files sink: the rows handlers append, as Parquet (or ORC) files readers see only once committed.

``--sink parquet:///data/shop`` (``orc:///data/shop`` for ORC): a handler's ``tx`` is a
:class:`FilesTx`, and ``tx.append("orders", rows)`` adds rows to the table ``/data/shop/orders/``,
each with the message's ``meta_id`` and the ``batch_id`` of the micro-batch that committed it.
babelq's processed ids and outbox live in a state database beside the data, exactly as in an SQL
sink (:mod:`babelq.pipelines.consume.sink`): an SQLite file ``<dir>/_babelq/state.db`` by
default, or the database ``?state=postgresql://...`` names (the one choice on a cluster).

A partition commits as with an SQL sink, the rows riding on the state database's transaction:

1. the handlers run in one transaction of the state database, each message's id claimed in it;
   what they append is held in memory (a handler that raises loses its rows with its
   savepoint; a batch handler's rows of the messages it did not call done are dropped);
2. before the commit, each table's rows are written to one file under ``<table>/_staging/``,
   synced, and recorded in ``<prefix>files`` in the same transaction;
3. the commit: processed ids, outbox rows and file records at once;
4. after it, each file is renamed into ``<table>/`` (atomic on a POSIX filesystem) and its
   record marked published.

A crash before 3 leaves a staged file no record names: never visible (Spark's and pyarrow's
readers skip paths starting with ``_``), deleted by a later run once older than
:data:`STAGING_GRACE_SECONDS`. A crash between 3 and 4 leaves a recorded file in staging: the
next run renames it before its query starts, and a run renames any left before it says drained
(:meth:`FilesSink.flush_committed`); the messages, delivered again, are found processed. So every
message's rows are in its tables once, and a reader of a table sees committed rows only.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from babelq.errors import ConfigurationError, UnavailableError
from babelq.pipelines.consume.api import FILE_COLUMNS, check_table_name
from babelq.pipelines.consume.sink import DEFAULT_PREFIX, Sink, open_sql_sink
from babelq.pipelines.failpoints import failpoint
from babelq.urls import redact

log = logging.getLogger(__name__)

#: the files sinks' URL schemes, and their files' suffix
FORMATS = {"parquet": ".parquet", "orc": ".orc"}
#: where a partition writes its files before the commit, inside each table's directory
STAGING = "_staging"
#: where the default SQLite state database lives, inside the sink's directory
STATE_DIR = "_babelq"
#: a staged file no record names is deleted once this old: a transaction still running may
#: record a younger one
STAGING_GRACE_SECONDS = 3_600.0
META_ID, BATCH_ID = FILE_COLUMNS


@dataclass(frozen=True, slots=True)
class FilesTarget:
    """A files sink URL read: its format, its directory, its state database (None: SQLite inside)."""

    format: str
    directory: str
    state: str | None

    @property
    def shown(self) -> str:
        state = "" if self.state is None else f"?state={redact(self.state)}"
        return f"{self.format}://{self.directory}{state}"


def files_target(text: str) -> FilesTarget | None:
    """``parquet:///abs/dir`` (three slashes absolute, two relative, as ``sqlite://``), with an
    optional ``?state=URL``; None for any other scheme."""
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() not in FORMATS:
        return None
    directory, _, query = rest.partition("?")
    state: str | None = None
    if query:
        if not query.startswith("state=") or query == "state=":
            raise ConfigurationError(
                f"--sink: {scheme}://{directory}?...: the one option is ?state=URL, the SQL database of "
                "babelq's processed ids and outbox (postgresql://... or sqlite:///path.db)")
        state = query.removeprefix("state=")
        if files_target(state) is not None:
            raise ConfigurationError(f"--sink: ?state= must be an SQL database, got {redact(state)!r}")
    if not directory:
        raise ConfigurationError(f"--sink: {redact(text)!r} names no directory")
    return FilesTarget(scheme.lower(), directory, state)


def check_files_cluster(master: str | None, sink: str) -> None:
    """Refuse a files sink executors on a non-local ``master`` cannot share: a relative directory,
    or the default SQLite state (a lock file that is no lock across hosts)."""
    from babelq.spark.session import is_local_master

    target = files_target(sink)
    if target is None or not master or is_local_master(master):
        return
    if not os.path.isabs(target.directory):
        raise ConfigurationError(
            f"sink: {target.shown!r} is a relative directory; on master {master} every executor would "
            "write in its own working directory. Give an absolute path every host mounts")
    if target.state is None or not target.state.startswith(("postgresql://", "postgres://")):
        raise ConfigurationError(
            f"sink: {target.shown!r} keeps babelq's state in SQLite, which works in local mode only; on "
            f"master {master} add ?state=postgresql://user@host/db")


@dataclass(slots=True)
class _Appended:
    """Rows one handler call appended to one table (an Arrow table, ``meta_id`` last)."""

    table: str
    rows: Any
    view: FilesTx


@dataclass(frozen=True, slots=True)
class _Staged:
    """A file written in staging and recorded: its path and where it is published, both relative
    to the sink's directory."""

    staged: str
    final: str


class FilesTx:
    """What a handler gets as ``tx`` with a files sink: :meth:`append` rows to a table.

    The rows are appended when the partition commits, with the message's processed id; a handler
    that raises, or a row a batch handler did not call done, appends nothing."""

    __slots__ = ("_ids", "_per_message", "_sink")

    def __init__(self, sink: FilesSink, ids: Sequence[str], *, per_message: bool) -> None:
        self._sink = sink
        self._ids = ids
        self._per_message = per_message

    @property
    def directory(self) -> Path:
        """The sink's directory (a table is the directory of its name inside it)."""
        return self._sink.root

    def append(self, table: str, rows: object) -> None:
        """Append ``rows`` to ``table``: a ``pyarrow.Table`` or ``RecordBatch``, a
        ``pandas.DataFrame``, a sequence of dicts, or one dict. A per-message handler's rows get
        the message's ``meta_id``; a batch handler's must carry a ``meta_id`` column naming the
        batch row each comes from, so babelq keeps only the rows of the messages called done."""
        import pyarrow as pa

        check_table_name(table)
        if not self._ids:
            raise ValueError(f"tx.append({table!r}): rows are appended by handlers, for their messages")
        data = _to_arrow(rows, table)
        if BATCH_ID in data.column_names:
            raise ValueError(f"tx.append({table!r}): {BATCH_ID} is babelq's column, added to every row")
        n = data.num_rows
        if META_ID in data.column_names:
            ids = data.column(META_ID).cast(pa.string())
            unknown = set(ids.to_pylist()) - set(self._ids)
            if unknown:
                shown = ", ".join(repr(u) for u in sorted(unknown, key=str)[:3])
                raise ValueError(f"tx.append({table!r}): meta_id {shown} names no message of this call "
                                 "(each row's meta_id is the one of the message it comes from)")
            data = data.drop_columns([META_ID])
        elif self._per_message:
            ids = pa.chunked_array([pa.array([self._ids[0]] * n, pa.string())])
        else:
            raise ValueError(f"tx.append({table!r}): a batch handler's rows need a meta_id column, the "
                             "batch's meta_id of the message each row comes from")
        declared = self._sink.tables.get(table)
        if declared is not None:
            data = _conform(data, declared, table)
        self._sink.buffer(_Appended(table, data.append_column(META_ID, ids), self))

    def execute(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("a files sink's tx runs no SQL: append rows with tx.append(table, rows)")

    executemany = execute


def _to_arrow(rows: object, table: str) -> Any:
    """``rows`` as a ``pyarrow.Table``."""
    import pyarrow as pa

    if isinstance(rows, pa.Table):
        return rows
    if isinstance(rows, pa.RecordBatch):
        return pa.Table.from_batches([rows])
    if type(rows).__module__.startswith("pandas.") and type(rows).__name__ == "DataFrame":
        return pa.Table.from_pandas(rows, preserve_index=False)
    if isinstance(rows, Mapping):
        rows = [rows]
    if isinstance(rows, Iterable) and not isinstance(rows, str | bytes):
        listed = list(rows)
        if all(isinstance(row, Mapping) for row in listed):
            names = list(dict.fromkeys(name for row in listed for name in row))  # every row's keys, in order
            return pa.table({name: [row.get(name) for row in listed] for name in names})
    raise TypeError(f"tx.append({table!r}): rows must be a pyarrow Table or RecordBatch, a pandas "
                    f"DataFrame, a sequence of dicts or a dict, got {type(rows).__name__}")


def _conform(data: Any, schema: Any, table: str) -> Any:
    """``data`` with the declared ``schema``'s columns, in order, cast to their types."""
    import pyarrow as pa

    extra = [name for name in data.column_names if name not in schema.names]
    if extra:
        raise ValueError(f"tx.append({table!r}): {', '.join(extra)} not in the table's declared schema")
    columns = [data.column(f.name).cast(f.type) if f.name in data.column_names
               else pa.nulls(data.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _write(fmt: str, data: Any, path: Path) -> None:
    """Write ``data`` as a ``fmt`` file at ``path`` and sync it, so the record committed after it
    never names a file a machine's crash lost."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(data, str(path))
    else:
        from pyarrow import orc

        orc.write_table(data, str(path))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FilesSink(Sink):
    """Tables of files in a directory, with babelq's processed ids, outbox and file records in a
    state database (an SQL :class:`~babelq.pipelines.consume.sink.Sink` it wraps)."""

    def __init__(self, target: FilesTarget, *, prefix: str = DEFAULT_PREFIX) -> None:
        super().__init__(prefix)
        self.format = target.format
        self.suffix = FORMATS[target.format]
        self.root = Path(target.directory)
        if not self.root.parent.is_dir():
            raise ConfigurationError(f"sink: directory {self.root.parent} does not exist")
        try:
            self.root.mkdir(exist_ok=True)
            if target.state is None:
                (self.root / STATE_DIR).mkdir(exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(f"sink: cannot create {self.root}: {exc.strerror or exc}") from None
        state = target.state or f"sqlite://{(self.root / STATE_DIR / 'state.db').resolve()}"
        self.state = open_sql_sink(state, prefix=prefix)
        self.mark = self.state.mark
        self.t_files = f"{prefix}files"
        #: the pipeline's declared tables (:meth:`~babelq.pipelines.consume.Pipeline.table`)
        self.tables: Mapping[str, Any] = {}
        self.batch_id: int | None = None
        self._appended: list[_Appended] = []
        self._committed: list[_Staged] = []
        try:
            self.through_outages(self._create_records)
        except BaseException:
            self.state.close()
            raise

    # -- the state database ---------------------------------------------------------------
    def _create_records(self) -> None:
        with self.state.transaction() as cursor:
            if self.mark == "%s":  # concurrent CREATE ... IF NOT EXISTS race on PostgreSQL's catalog
                cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"babelq-sink:{self.t_files}",))
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {self.t_files} (staged TEXT PRIMARY KEY, final TEXT NOT NULL, "
                "table_name TEXT NOT NULL, batch_id BIGINT, row_count BIGINT NOT NULL, "
                "created_at BIGINT NOT NULL, published_at BIGINT)")

    def connect(self) -> None:
        self.state.connect()
        self._create_records()

    def is_outage(self, exc: BaseException) -> bool:
        return self.state.is_outage(exc)

    def close(self) -> None:
        self.state.close()

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """The state database's transaction; the rows appended in it are staged and recorded
        right before its commit."""
        self._appended = []
        staged: list[_Staged] = []
        try:
            with self.state.transaction() as cursor:
                yield cursor
                staged = self._stage(cursor)
        finally:
            # a failed commit's staged files stay: a commit may fail after it happened (a lost
            # connection), and the next run publishes them if recorded, deletes them if not
            self._appended = []
        self._committed.extend(staged)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        kept = len(self._appended)
        try:
            with self.state.savepoint():
                yield
        except BaseException:
            del self._appended[kept:]
            raise

    def run_setup(self, hooks: Sequence[Callable[[Any], object]]) -> None:
        """Setup hooks get a :class:`FilesTx` (its ``directory``); they append nothing."""
        for hook in hooks:
            def once(hook: Callable[[Any], object] = hook) -> None:
                with self.transaction():
                    hook(FilesTx(self, (), per_message=False))

            self.through_outages(once)

    # -- what handlers append -----------------------------------------------------------------
    def bind(self, tables: Mapping[str, Any], batch_id: int | None) -> None:
        self.tables = tables
        self.batch_id = batch_id

    def view(self, cursor: Any, ids: Sequence[str], *, per_message: bool) -> FilesTx:
        return FilesTx(self, list(ids), per_message=per_message)

    def buffer(self, appended: _Appended) -> None:
        self._appended.append(appended)

    def keep_rows(self, view: Any, done: set[str]) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        keep = pa.array(sorted(done), pa.string())
        for appended in self._appended:
            if appended.view is view:
                appended.rows = appended.rows.filter(pc.is_in(appended.rows.column(META_ID), value_set=keep))

    def _stage(self, cursor: Any) -> list[_Staged]:
        """Write each table's rows to a file in its staging directory and record it (in the
        transaction, before its commit)."""
        import pyarrow as pa

        by_table: dict[str, list[Any]] = {}
        for appended in self._appended:
            if appended.rows.num_rows:
                by_table.setdefault(appended.table, []).append(appended.rows)
        staged: list[_Staged] = []
        at = time.time_ns() // 1_000_000
        batch = "x" if self.batch_id is None else str(self.batch_id)
        m = self.mark
        for table, parts in by_table.items():
            # an undeclared table's appends may differ in columns: a column one lacks is null there
            data = pa.concat_tables(parts, promote_options="permissive")
            data = data.select([name for name in data.column_names if name != META_ID] + [META_ID])
            data = data.append_column(BATCH_ID, pa.array([self.batch_id] * data.num_rows, pa.int64()))
            name = f"part-{batch}-{uuid.uuid4().hex}{self.suffix}"
            item = _Staged(f"{table}/{STAGING}/{name}", f"{table}/{name}")
            path = self.root / item.staged
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                _write(self.format, data, path)
            except OSError as exc:
                raise UnavailableError(f"sink {self.root}: cannot write {item.staged}: {exc}") from exc
            cursor.execute(f"INSERT INTO {self.t_files} (staged, final, table_name, batch_id, row_count, "
                           f"created_at) VALUES ({m}, {m}, {m}, {m}, {m}, {m})",
                           (item.staged, item.final, table, self.batch_id, data.num_rows, at))
            staged.append(item)
        if staged:
            failpoint("consume.files_staged")
        return staged

    # -- after the commit -----------------------------------------------------------------------
    def publish_committed(self) -> int:
        """Rename the files this sink committed into their tables; how many."""
        committed, self._committed = self._committed, []
        return self._publish(committed)

    def _publish(self, items: Sequence[_Staged]) -> int:
        published: list[str] = []
        for item in items:
            staged, final = self.root / item.staged, self.root / item.final
            try:
                os.replace(staged, final)
            except FileNotFoundError:
                if not final.exists():
                    log.error("files sink %s: the committed file %s is gone from staging; its rows are lost",
                              self.root, item.staged)
            except OSError as exc:  # left recorded: the next flush renames it
                log.warning("files sink %s: cannot publish %s (%s)", self.root, item.staged, exc)
                continue
            published.append(item.staged)
        if published:
            when = time.time_ns() // 1_000_000

            def mark() -> None:
                with self.state.transaction() as cursor:
                    cursor.executemany(f"UPDATE {self.t_files} SET published_at = {self.mark} "
                                       f"WHERE staged = {self.mark}", [(when, key) for key in published])

            self.through_outages(mark)
        return len(published)

    def _recorded(self, staged: Sequence[str] | None) -> list[tuple[_Staged, bool]]:
        """The records of the ``staged`` paths (None: every unpublished one), and whether published."""
        def read() -> list[tuple[Any, ...]]:
            with self.state.transaction() as cursor:
                sql = f"SELECT staged, final, published_at FROM {self.t_files} WHERE "
                if staged is None:
                    cursor.execute(sql + "published_at IS NULL ORDER BY created_at")
                    return [tuple(r) for r in cursor.fetchall()]
                found: list[tuple[Any, ...]] = []
                for i in range(0, len(staged), 500):
                    chunk = list(staged[i : i + 500])
                    cursor.execute(sql + f"staged IN ({', '.join([self.mark] * len(chunk))})", chunk)
                    found += [tuple(r) for r in cursor.fetchall()]
                return found

        return [(_Staged(str(s), str(f)), p is not None) for s, f, p in self.through_outages(read)]

    def flush_committed(self) -> int:
        """Publish the files a crash left committed in staging; delete the staged files no record
        names once older than :data:`STAGING_GRACE_SECONDS` (an attempt that never committed)."""
        published = self._publish([item for item, _ in self._recorded(None)])
        cutoff = time.time() - STAGING_GRACE_SECONDS
        old: list[str] = []
        for staging in self.root.glob(f"*/{STAGING}/"):
            for path in staging.iterdir():
                try:
                    if path.is_file() and path.stat().st_mtime < cutoff:
                        old.append(path.relative_to(self.root).as_posix())
                except FileNotFoundError:
                    continue
        if old:
            recorded = self._recorded(old)
            published += self._publish([item for item, done in recorded if not done])
            known = {item.staged for item, _ in recorded}
            for rel in old:
                if rel not in known:
                    (self.root / rel).unlink(missing_ok=True)
                    log.info("files sink %s: deleted %s, staged by an attempt that never committed",
                             self.root, rel)
        if published:
            log.info("files sink %s: published %d files a crashed run had committed", self.root, published)
        return published

    def file_counts(self) -> tuple[int, int]:
        """(files recorded, of which unpublished)."""
        def read() -> tuple[int, int]:
            with self.state.transaction() as cursor:
                cursor.execute(f"SELECT COUNT(*), COUNT(*) - COUNT(published_at) FROM {self.t_files}")
                total, pending = cursor.fetchone()
                return int(total), int(pending or 0)

        return self.through_outages(read)


def open_files_sink(text: str, *, prefix: str = DEFAULT_PREFIX) -> FilesSink:
    """The files sink ``text`` names (``parquet:///dir``, ``orc:///dir``, ``?state=URL``)."""
    target = files_target(text)
    if target is None:
        raise ConfigurationError(f"--sink: {redact(text)!r} is no files sink (parquet:///dir or orc:///dir)")
    return FilesSink(target, prefix=prefix)
