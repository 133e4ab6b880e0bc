"""What a user writes: a :class:`Pipeline` with a handler per URN, and the :class:`Message` a handler gets.

>>> pipeline = Pipeline(queue="orders")
>>> @pipeline.setup
... def tables(tx):
...     tx.execute("CREATE TABLE IF NOT EXISTS orders (order_id BIGINT PRIMARY KEY)")
>>> @pipeline.handler("urn:babel:orders:created", schema={"type": "object", "required": ["order_id"]})
... def created(message, tx):
...     tx.execute(f"INSERT INTO orders VALUES ({marks(tx, 1)})", (message.data["order_id"],))

The contract is the worker runtime's (:mod:`babelq.runtime`): a handler that returns has handled
its message; one that raises has failed this attempt (retried with backoff, then dead-lettered,
cause ``max_attempts``); :class:`~babelq.runtime.errors.PermanentError` dead-letters at once;
:class:`~babelq.errors.UnavailableError` says a dependency is down, never the message's fault:
the partition's transaction is rolled back and run again, and if the outage lasts the
micro-batch is delivered again. ``tx`` is a cursor in the sink's transaction (``sqlite3`` or
``psycopg``): the handler's writes commit together with babelq's processed id of the message,
so each message's effect lands once. A handler must not commit or roll back itself.

A batch handler (:meth:`Pipeline.batch_handler`) is the fast path: it gets a partition's
messages of its URN at once, as one Arrow record batch (or a pandas DataFrame), and returns a
:class:`Verdict` per row (:data:`DONE`, :func:`retry`, :func:`dead_letter`, :func:`unavailable`).
Its writes are all or nothing for the batch: write only the effects of the rows you call done
(the batch columns and the exact rules are in :meth:`Pipeline.batch_handler`). A verdict may
carry a ``label``, the cause the run counts the row under, and :func:`duplicate` says a row's
effect was already there (a business key met under another ``meta.id``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from babelq.envelope import Envelope, check_urn
from babelq.errors import ConfigurationError

#: A handler: the message and a DB-API cursor in the sink's transaction; its return value is ignored.
Handler = Callable[["Message", Any], object]
#: A batch handler: the batch (``pyarrow.RecordBatch`` or ``pandas.DataFrame``) and the cursor;
#: a verdict per row, in order, or None when every row is done.
BatchHandler = Callable[[Any, Any], "Sequence[Verdict | None] | None"]
#: A setup hook: runs once per run on a cursor of the sink, in a transaction of its own (DDL).
Setup = Callable[[Any], object]

#: The columns babelq adds to every row a files sink appends: the message's ``meta.id`` and the
#: micro-batch that committed the row (:meth:`Pipeline.table`).
FILE_COLUMNS = ("meta_id", "batch_id")
_TABLE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,99}\Z")


def check_table_name(name: object) -> str:
    """A files sink's table name: a directory readers do not skip (no leading ``_`` or ``.``)."""
    if not isinstance(name, str) or not _TABLE.match(name):
        raise ConfigurationError(
            f"table {name!r}: must start with a letter and hold only letters, digits and _")
    return name


class Message:
    """One message on its way to a handler: the envelope's fields and the reconciled ``attempts``."""

    __slots__ = ("_attempts", "_envelope", "_queue")

    def __init__(self, envelope: Envelope, attempts: int, queue: str) -> None:
        self._envelope = envelope
        self._attempts = attempts
        self._queue = queue

    @property
    def envelope(self) -> Envelope:
        return self._envelope

    @property
    def data(self) -> Mapping[str, Any]:
        """The payload, read-only: a retry publishes the envelope as received."""
        return MappingProxyType(self._envelope.data)

    @property
    def urn(self) -> str:
        return self._envelope.urn

    @property
    def id(self) -> str:
        """``meta.id`` (``""`` when the producer left it out)."""
        return self._envelope.id

    @property
    def attempts(self) -> int:
        """The body's attempts reconciled with the broker's count (docs/standard.md §4)."""
        return self._attempts

    @property
    def meta(self) -> Mapping[str, Any]:
        return MappingProxyType(self._envelope.meta)

    @property
    def trace_id(self) -> str:
        return self._envelope.trace_id

    @property
    def correlation_id(self) -> str | None:
        return self._envelope.correlation_id

    @property
    def queue(self) -> str:
        return self._queue

    def __repr__(self) -> str:
        return f"Message(urn={self.urn!r}, id={self.id!r}, attempts={self.attempts}, queue={self.queue!r})"


#: The columns of a batch handler's batch, in order (:meth:`Pipeline.batch_handler`).
BATCH_COLUMNS = ("meta_id", "attempts", "queue", "urn", "trace_id", "correlation_id", "data",
                 "processed_id", "now")

VerdictKind = Literal["done", "retry", "dead_letter", "unavailable", "duplicate"]
_KINDS = ("done", "retry", "dead_letter", "unavailable", "duplicate")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What became of one row of a batch: the outcome a per-message handler reaches by returning
    or raising. Build one with :data:`DONE`, :func:`retry`, :func:`dead_letter` or :func:`unavailable`."""

    kind: VerdictKind
    #: the dead letter's ``error``: a text, or an exception recorded as if the handler had raised it
    reason: str | BaseException | None = None
    cause: str | None = None
    #: the cause the run counts the row under (its outcome counts and metrics); None: the dead
    #: letter's cause, ``handler`` for a retry. A bounded set of labels whatever the causes are.
    label: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"Verdict: kind must be one of {', '.join(_KINDS)}, got {self.kind!r}")


#: The row is handled: its processed id commits with the batch's writes.
DONE = Verdict("done")


def retry(reason: str | BaseException, *, label: str | None = None) -> Verdict:
    """The row failed this attempt, as if a per-message handler had raised: retried with attempts
    + 1 after the backoff, or dead-lettered (cause ``max_attempts``) once the attempts ran out.
    An exception is recorded by its text and type, a string as the error alone. ``label``: the
    cause the retry is counted under (default ``handler``)."""
    if not isinstance(reason, str | BaseException):
        raise TypeError(f"retry: reason must be a str or an exception, got {type(reason).__name__}")
    _check_label("retry", label)
    return Verdict("retry", reason, label=label)


def dead_letter(
    reason: str | BaseException, *, cause: str | None = None, label: str | None = None
) -> Verdict:
    """Dead-letter the row now (reason ``failed``), as a per-message handler raising
    :class:`~babelq.runtime.errors.PermanentError` does; the cause is ``cause``, else a
    PermanentError's own, else ``rejected``. ``label``: the cause the row is counted under when
    it is not the record's (e.g. one label for every refusal whatever its cause)."""
    if not isinstance(reason, str | BaseException):
        raise TypeError(f"dead_letter: reason must be a str or an exception, got {type(reason).__name__}")
    _check_label("dead_letter", label)
    if cause is None:
        cause = getattr(reason, "cause", None) if isinstance(reason, BaseException) else None
    return Verdict("dead_letter", reason, cause, label)


def duplicate(cause: str = "already_done") -> Verdict:
    """The row's effect is already there (say, a business key written under another ``meta.id``):
    done, nothing written for it, its id recorded as processed; counted as ``duplicate`` with
    ``cause``."""
    _check_label("duplicate", cause)
    return Verdict("duplicate", cause=cause)


def _check_label(where: str, label: object) -> None:
    if label is not None and (not isinstance(label, str) or not label):
        raise TypeError(f"{where}: a label must be a non-empty str, got {label!r}")


def unavailable(reason: str = "a dependency is unavailable") -> Verdict:
    """A dependency is down, never the row's fault: as a handler raising
    :class:`~babelq.errors.UnavailableError`, the partition's whole transaction is rolled back and
    run again (one such row is enough)."""
    return Verdict("unavailable", reason)


class Pipeline:
    """A consume pipeline: the queue it reads, a handler per URN, optional schemas and setup hooks.

    Pickled to the executors with every task, so it holds plain data and functions only (the
    compiled schemas are built again in each process)."""

    def __init__(self, queue: str = "default", *, max_attempts: int = 3, retry_delay_ms: int = 1_000,
                 handled_as: str = "handled", prefix: str | None = None) -> None:
        if not isinstance(queue, str) or not queue:
            raise ConfigurationError(f"queue: must be a non-empty string, got {queue!r}")
        if not isinstance(handled_as, str) or not handled_as or handled_as.startswith("@"):
            raise ConfigurationError(f"handled_as: must be a non-empty name, got {handled_as!r}")
        if prefix is not None and not isinstance(prefix, str):
            raise ConfigurationError(f"prefix: must be a string, got {prefix!r}")
        if type(max_attempts) is not int or max_attempts < 1:
            raise ConfigurationError(f"max_attempts: must be an integer >= 1, got {max_attempts!r}")
        if type(retry_delay_ms) is not int or retry_delay_ms < 0:
            raise ConfigurationError(f"retry_delay_ms: must be an integer >= 0, got {retry_delay_ms!r}")
        self.queue = queue
        self.max_attempts = max_attempts
        self.retry_delay_ms = retry_delay_ms
        #: the outcome a message done by its handler is counted under (summary, metrics)
        self.handled_as = handled_as
        #: the prefix of babelq's tables in the sink (None: the run's, ``babelq_`` by default)
        self.prefix = prefix
        self.handlers: dict[str, Handler] = {}
        self.batch_handlers: dict[str, BatchHandler] = {}
        #: the URNs whose batch handler asked for a pandas DataFrame
        self.pandas_urns: set[str] = set()
        self.schemas: dict[str, Mapping[str, Any] | bool] = {}
        self.setups: list[Setup] = []
        #: files sinks: the declared schema (a ``pyarrow.Schema``) of each table
        self.tables: dict[str, Any] = {}
        self._registry: Any = None

    def handler(
        self, urn: str, *, schema: Mapping[str, Any] | bool | None = None
    ) -> Callable[[Handler], Handler]:
        """Decorator: ``fn(message, tx)`` handles ``urn``; data breaking ``schema`` (a JSON Schema)
        is dead-lettered (reason ``failed``, cause ``schema``) without calling it."""
        self._check_new(urn, schema)

        def register(fn: Handler) -> Handler:
            self._check_callable(urn, fn)
            self.handlers[urn] = fn
            self._keep_schema(urn, schema)
            return fn

        return register

    def batch_handler(
        self, urn: str, *, schema: Mapping[str, Any] | bool | None = None, as_pandas: bool = False
    ) -> Callable[[BatchHandler], BatchHandler]:
        """Decorator: ``fn(batch, tx)`` handles a partition's messages of ``urn`` at once.

        The consume rules, the duplicates and ``schema`` are applied per message first, as for
        :meth:`handler`; ``batch`` holds the rest, in the order read, as a ``pyarrow.RecordBatch``
        (a ``pandas.DataFrame`` with ``as_pandas``) of the columns :data:`BATCH_COLUMNS`:
        ``meta_id`` (``""`` when the producer left it out), ``attempts`` (reconciled with the
        broker's count), ``queue``, ``urn``, ``trace_id``, ``correlation_id`` (null without one)
        ``data``, the payload as JSON text (parse the fields you need, e.g. with
        ``pyarrow.json``: babelq does not guess column types, where one odd message would fail
        the whole batch's conversion), ``processed_id`` (the id babelq records the message as
        processed under: ``meta_id``, or ``sha256:`` and the body's digest without one) and
        ``now`` (the partition's time in ms: the latest time the broker handed one of its
        messages over, which the consume rules judged them by; the same on every row).

        ``fn`` returns a :class:`Verdict` (or None, done) per row, in order, or None when every
        row is done (:func:`duplicate`: done, its effect was already there). It runs in one
        savepoint of the partition's transaction with ``tx``: when it returns,
        its writes commit with the processed ids of the rows done and the retries and
        dead letters of the others, so write only the done rows' effects. When it raises, its
        writes are rolled back and every row failed this attempt, as each message would with a
        per-message handler raising the same exception (so :class:`~babelq.runtime.errors.PermanentError`
        dead-letters them all, :class:`~babelq.errors.UnavailableError` reruns the transaction).
        A result of the wrong length or holding something else than verdicts is the handler
        failing the same way, with a one-line error."""
        self._check_new(urn, schema)
        if not isinstance(as_pandas, bool):
            raise ConfigurationError(f"batch_handler {urn!r}: as_pandas must be a bool, got {as_pandas!r}")

        def register(fn: BatchHandler) -> BatchHandler:
            self._check_callable(urn, fn)
            self.batch_handlers[urn] = fn
            if as_pandas:
                self.pandas_urns.add(urn)
            self._keep_schema(urn, schema)
            return fn

        return register

    def _check_new(self, urn: str, schema: Mapping[str, Any] | bool | None) -> None:
        check_urn(urn, stacklevel=3)
        if urn in self.handlers or urn in self.batch_handlers:
            raise ConfigurationError(f"handler: {urn!r} already has a handler")
        if schema is not None:
            from babelq.schema import compile_schema

            compile_schema(schema)  # a broken schema fails here, not in an executor

    @staticmethod
    def _check_callable(urn: str, fn: object) -> None:
        if not callable(fn):
            raise ConfigurationError(f"handler {urn!r}: must be callable, got {type(fn).__name__}")

    def _keep_schema(self, urn: str, schema: Mapping[str, Any] | bool | None) -> None:
        if schema is not None:
            self.schemas[urn] = schema

    def setup(self, fn: Setup) -> Setup:
        """Decorator: ``fn(tx)`` runs once per run on the sink before any message (create tables)."""
        if not callable(fn):
            raise ConfigurationError(f"setup: must be callable, got {type(fn).__name__}")
        self.setups.append(fn)
        return fn

    def table(self, name: str, schema: Any) -> None:
        """Declare the columns of ``name``, a table of a files sink (``parquet://``): a
        ``pyarrow.Schema``. Every file of the table then has these columns, in this order, with
        babelq's ``meta_id`` and ``batch_id`` after them: rows missing a column get nulls, a
        value is cast to its column's type, a column the schema lacks fails the append. An
        undeclared table takes each file's columns from its rows."""
        import pyarrow as pa

        check_table_name(name)
        if not isinstance(schema, pa.Schema):
            got = type(schema).__name__
            raise ConfigurationError(f"table {name!r}: schema must be a pyarrow.Schema, got {got}")
        taken = [column for column in FILE_COLUMNS if column in schema.names]
        if taken:
            raise ConfigurationError(
                f"table {name!r}: {', '.join(taken)} is babelq's column, added to every row")
        self.tables[name] = schema

    @property
    def urns(self) -> tuple[str, ...]:
        return (*self.handlers, *self.batch_handlers)

    @property
    def functions(self) -> list[Callable[..., object]]:
        """Every function the pipeline runs: handlers of both shapes and setup hooks."""
        return [*self.handlers.values(), *self.batch_handlers.values(), *self.setups]

    def schema_errors(self, urn: str, data: Any) -> list[str]:
        """The errors of ``data`` against ``urn``'s schema (none without one)."""
        if urn not in self.schemas:
            return []
        if self._registry is None:
            from babelq.schema import SchemaRegistry

            registry = SchemaRegistry()
            for name, schema in self.schemas.items():
                registry.register(name, schema)
            self._registry = registry
        errors: list[str] = self._registry.validate(urn, data)
        return errors

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_registry"] = None  # compiled validators stay in the process that built them
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"Pipeline(queue={self.queue!r}, urns={list(self.urns)!r})"


def marks(tx: Any, n: int) -> str:
    """``n`` parameter placeholders for ``tx``'s driver, comma-separated: ``?`` for sqlite3, ``%s``
    for psycopg, so one handler writes to either sink."""
    mark = "?" if type(tx).__module__.startswith("sqlite3") else "%s"
    return ", ".join([mark] * n)
