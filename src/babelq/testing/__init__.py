"""Testing an App's handlers in-process: ``memory://``, drain, and what happened to each message.

>>> from babelq.testing import TestBroker
>>> with TestBroker(app) as broker:                  # app's transport swapped for memory://
...     broker.publish("urn:babel:orders:created", {"order_id": 1})
...     broker.drain()                                # handlers run, retries included, until empty
...     assert [r.fate for r in broker.records] == ["handled"]

The App runs unchanged (its handlers, middleware, retries and dead letters); only its broker is
an in-process one that records what the runtime asked of it: each message acked (``handled``),
retried with attempts+1 (``retried``), dead-lettered (``dead_lettered``, with the record's
reason, cause and error) or put back (``released``). Retries run at once unless
``real_backoff=True``, so a test of a handler that fails twice takes milliseconds. On exit the
App gets its own transport and policy back.

Messages written to a transactional outbox (:class:`babelq.outbox.Outbox`, the Django and
SQLAlchemy integrations) reach the test broker through :meth:`TestBroker.relay`, which does
what ``babelq relay`` does in production: what a rolled-back transaction wrote never arrives.

``pytest`` users get the fixture ``babelq_broker`` through the plugin ``babelq.testing.plugin``
(add ``pytest_plugins = ["babelq.testing.plugin"]`` to a ``conftest.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from babelq.envelope import Envelope, decode
from babelq.errors import DecodeError
from babelq.runtime import App
from babelq.runtime.backoff import Backoff
from babelq.transports.base import Delivery
from babelq.transports.memory import MemoryTransport

#: what the runtime did with a delivery
Fate = Literal["handled", "retried", "dead_lettered", "released"]


@dataclass(frozen=True, slots=True)
class Record:
    """What the runtime did with one delivery."""

    fate: Fate
    queue: str
    body: bytes  #: the bytes delivered
    envelope: Envelope | None  #: the delivered envelope; None for poison
    dead_letter: Mapping[str, Any] | None = None  #: the DLQ record's ``dead_letter`` block
    delay_ms: int = 0  #: of a retry or a release

    @property
    def urn(self) -> str | None:
        return self.envelope.urn if self.envelope is not None else None

    @property
    def data(self) -> Mapping[str, Any] | None:
        return self.envelope.data if self.envelope is not None else None

    @property
    def id(self) -> str | None:
        return self.envelope.id if self.envelope is not None else None

    @property
    def cause(self) -> str | None:
        return None if self.dead_letter is None else self.dead_letter.get("cause")


def _envelope(body: bytes) -> Envelope | None:
    try:
        return decode(body)
    except DecodeError:
        return None


class RecordingTransport(MemoryTransport):
    """``memory://`` that keeps a :class:`Record` of every settling call, in order."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.records: list[Record] = []
        self._record_lock = threading.Lock()

    def _record(self, record: Record) -> None:
        with self._record_lock:
            self.records.append(record)

    def ack(self, delivery: Delivery) -> None:
        super().ack(delivery)
        self._record(Record("handled", delivery.queue, delivery.body, _envelope(delivery.body)))

    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        super().retry(delivery, body, delay_ms=delay_ms)
        envelope = _envelope(delivery.body)
        self._record(Record("retried", delivery.queue, delivery.body, envelope, None, delay_ms))

    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        super().dead_letter(delivery, body, dlq=dlq)
        dead = _envelope(body)
        block = dead.dead_letter if dead is not None else None
        if dead is None:  # a poison record: read its block without the codec's checks
            import orjson

            block = orjson.loads(body).get("dead_letter")
        envelope = _envelope(delivery.body)
        self._record(Record("dead_lettered", delivery.queue, delivery.body, envelope, block))

    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        super().release(delivery, delay_ms=delay_ms)
        envelope = _envelope(delivery.body)
        self._record(Record("released", delivery.queue, delivery.body, envelope, None, delay_ms))

    def release_many(self, deliveries: Sequence[Delivery]) -> None:
        for delivery in deliveries:
            self.release(delivery)


class TestBroker:
    """Runs ``app`` against an in-process broker for the length of a ``with`` block."""

    __test__ = False  # not a pytest test class, whatever its name says

    def __init__(self, app: App, *, real_backoff: bool = False) -> None:
        self.app = app
        self.real_backoff = real_backoff
        self.transport = RecordingTransport()
        self._saved: tuple[Any, ...] | None = None

    def __enter__(self) -> TestBroker:
        app = self.app
        self._saved = (app._transport, app._owns_transport, app._url, app._broker, app.policy, app._sender)
        app._transport, app._owns_transport, app._url = self.transport, False, None
        app._broker = "memory://"
        app._sender = None
        if not self.real_backoff:
            app.policy = replace(app.policy, backoff=Backoff(base_ms=0, cap_ms=0, jitter=False))
        return self

    def __exit__(self, *exc: object) -> None:
        app = self.app
        app.router.close()
        if self._saved is not None:
            app._transport, app._owns_transport, app._url, app._broker, app.policy, app._sender = self._saved
            self._saved = None

    # -- acting ------------------------------------------------------------------------------------
    def publish(self, urn: str, data: Mapping[str, Any] | object | None = None, **options: Any) -> str:
        """``app.publish`` (same arguments); returns ``meta.id``."""
        return self.app.publish(urn, data, **options)

    def publish_body(self, body: bytes, *, queue: str | None = None) -> None:
        """Put raw bytes on a queue, as another SDK (or a broken producer) would."""
        self.transport.publish(queue or self.app.queue, body)

    def drain(self, *, queue: str | None = None, timeout: float = 10.0) -> int:
        """Run the handlers until the queue is empty, delayed retries included; returns deliveries."""
        return self.app.drain(queue=queue, timeout=timeout, wait_delayed=True)

    def relay(self, outbox: str, *, table: str | None = None) -> int:
        """Publish the committed, pending rows of the outbox database ``outbox`` (a URL, as
        ``babelq relay --outbox`` takes) into this broker, as the relay would, and mark them
        published; returns how many. Each row goes to the queue it names."""
        from babelq.outbox import DEFAULT_TABLE, Relay

        relay = Relay(outbox, self.transport, table=table or DEFAULT_TABLE)
        try:
            return relay.drain().published
        finally:
            relay.close()

    # -- looking -----------------------------------------------------------------------------------
    @property
    def records(self) -> list[Record]:
        """Every settled delivery, in order."""
        return list(self.transport.records)

    def with_fate(self, fate: Fate) -> list[Record]:
        return [r for r in self.transport.records if r.fate == fate]

    @property
    def handled(self) -> list[Record]:
        return self.with_fate("handled")

    @property
    def retried(self) -> list[Record]:
        return self.with_fate("retried")

    @property
    def dead_lettered(self) -> list[Record]:
        return self.with_fate("dead_lettered")

    def messages(self, queue: str) -> list[Envelope]:
        """The envelopes waiting on ``queue`` now (what handlers published downstream, say)."""
        return [e for e in (_envelope(b) for b in self.transport.peek_all(queue)) if e is not None]

    def dead_letters(self, queue: str | None = None) -> list[bytes]:
        """The bodies on ``queue``'s DLQ; a poison record's original bytes via
        :func:`babelq.envelope.original_bytes`."""
        return self.transport.peek_all(f"{queue or self.app.queue}.dlq")


__all__ = ["Fate", "Record", "RecordingTransport", "TestBroker"]
