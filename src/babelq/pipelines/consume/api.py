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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from babelq.envelope import Envelope, check_urn
from babelq.errors import ConfigurationError

#: A handler: the message and a DB-API cursor in the sink's transaction; its return value is ignored.
Handler = Callable[["Message", Any], object]
#: A setup hook: runs once per run on a cursor of the sink, in a transaction of its own (DDL).
Setup = Callable[[Any], object]


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


class Pipeline:
    """A consume pipeline: the queue it reads, a handler per URN, optional schemas and setup hooks.

    Pickled to the executors with every task, so it holds plain data and functions only (the
    compiled schemas are built again in each process)."""

    def __init__(self, queue: str = "default", *, max_attempts: int = 3, retry_delay_ms: int = 1_000) -> None:
        if not isinstance(queue, str) or not queue:
            raise ConfigurationError(f"queue: must be a non-empty string, got {queue!r}")
        if type(max_attempts) is not int or max_attempts < 1:
            raise ConfigurationError(f"max_attempts: must be an integer >= 1, got {max_attempts!r}")
        if type(retry_delay_ms) is not int or retry_delay_ms < 0:
            raise ConfigurationError(f"retry_delay_ms: must be an integer >= 0, got {retry_delay_ms!r}")
        self.queue = queue
        self.max_attempts = max_attempts
        self.retry_delay_ms = retry_delay_ms
        self.handlers: dict[str, Handler] = {}
        self.schemas: dict[str, Mapping[str, Any] | bool] = {}
        self.setups: list[Setup] = []
        self._registry: Any = None

    def handler(
        self, urn: str, *, schema: Mapping[str, Any] | bool | None = None
    ) -> Callable[[Handler], Handler]:
        """Decorator: ``fn(message, tx)`` handles ``urn``; data breaking ``schema`` (a JSON Schema)
        is dead-lettered (reason ``failed``, cause ``schema``) without calling it."""
        check_urn(urn, stacklevel=2)
        if urn in self.handlers:
            raise ConfigurationError(f"handler: {urn!r} already has a handler")
        if schema is not None:
            from babelq.schema import compile_schema

            compile_schema(schema)  # a broken schema fails here, not in an executor

        def register(fn: Handler) -> Handler:
            if not callable(fn):
                raise ConfigurationError(f"handler {urn!r}: must be callable, got {type(fn).__name__}")
            self.handlers[urn] = fn
            if schema is not None:
                self.schemas[urn] = schema
            return fn

        return register

    def setup(self, fn: Setup) -> Setup:
        """Decorator: ``fn(tx)`` runs once per run on the sink before any message (create tables)."""
        if not callable(fn):
            raise ConfigurationError(f"setup: must be callable, got {type(fn).__name__}")
        self.setups.append(fn)
        return fn

    @property
    def urns(self) -> tuple[str, ...]:
        return tuple(self.handlers)

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
        return f"Pipeline(queue={self.queue!r}, urns={list(self.handlers)!r})"


def marks(tx: Any, n: int) -> str:
    """``n`` parameter placeholders for ``tx``'s driver, comma-separated: ``?`` for sqlite3, ``%s``
    for psycopg, so one handler writes to either sink."""
    mark = "?" if type(tx).__module__.startswith("sqlite3") else "%s"
    return ", ".join([mark] * n)
