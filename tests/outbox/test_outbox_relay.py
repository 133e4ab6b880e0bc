"""The relay: batches, per-queue order, marks, refusals, outages (outbox SQLite/PostgreSQL x Redis/SQLite)."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from babelq.envelope import make
from babelq.errors import UnavailableError
from babelq.outbox import Relay
from babelq.transports import Outgoing, Transport, open_transport

from .support import REDIS, Target, envelopes, numbers, read_all

pytestmark = pytest.mark.live


def test_publishes_every_row_verbatim_in_order_per_queue(
    target: Target, broker: str, unique_queue: str
) -> None:
    other = unique_queue + "-b"
    conn = target.connect()
    expected: dict[str, list[bytes]] = {unique_queue: [], other: []}
    for i in range(230):  # interleaved queues, more rows than one batch
        queue = unique_queue if i % 3 else other
        env = make("urn:babel:orders:created", {"n": i}, queue=queue)
        target.outbox.add(conn, env)
        expected[queue].append(env.encode())
    conn.commit()
    conn.close()
    with Relay(target.url, broker, table=target.table, batch=40) as relay:
        done = relay.drain()
        got = {q: read_all(relay.transport, q) for q in expected}
        relay.transport.purge(other)
    assert (done.claimed, done.published, done.failed, done.batches) == (230, 230, 0, 6)
    assert got == expected  # same bytes, same order, per queue
    assert target.statuses() == {"published": 230}
    assert all(attempts == 0 and error is None for _, _, attempts, error in target.rows())


def test_delayed_rows_keep_their_delay(target: Target, broker: str, unique_queue: str) -> None:
    conn = target.connect()
    target.outbox.add(conn, make("urn:babel:orders:created", {"n": 0}), queue=unique_queue, delay_ms=1500)
    target.outbox.add(conn, make("urn:babel:orders:created", {"n": 1}), queue=unique_queue)
    conn.commit()
    conn.close()
    with Relay(target.url, broker, table=target.table) as relay:
        assert relay.drain().published == 2
        assert numbers(read_all(relay.transport, unique_queue)) == [1]
        time.sleep(1.8)
        assert numbers(read_all(relay.transport, unique_queue)) == [0]


def test_a_row_the_broker_refuses_is_marked_failed_and_the_rest_published(
    target: Target, unique_queue: str
) -> None:
    """Redis refuses a queue name that ends in a reserved suffix: that row's content (its queue)
    is the problem, so only it is marked failed, with the broker's error; its neighbours go out."""
    from conftest import require_service

    require_service("redis")
    bad = unique_queue + ":processing"
    conn = target.connect()
    target.outbox.add_many(conn, envelopes(3, unique_queue), queue=unique_queue)
    [bad_id] = target.outbox.add_many(conn, envelopes(1, bad, start=3), queue=bad)
    target.outbox.add_many(conn, envelopes(3, unique_queue, start=4), queue=unique_queue)
    conn.commit()
    conn.close()
    with Relay(target.url, REDIS, table=target.table, batch=100) as relay:
        done = relay.drain()
        assert numbers(read_all(relay.transport, unique_queue)) == [0, 1, 2, 4, 5, 6]
        assert relay.store.counts() == {"pending": 0, "published": 6, "failed": 1}
        [(row_id, queue, attempts, error)] = relay.store.failed_rows()
        assert (row_id, queue, attempts) == (bad_id, bad, 1)
        assert (
            error is not None
            and "reserved suffix" in error
            and error.startswith("ConfigurationError: queue:")
        )
        assert (done.published, done.failed) == (6, 1)
        # failed rows stay put until requeued, then they are tried again (and refused again)
        assert relay.drain().claimed == 0
        assert relay.store.requeue_failed() == 1
        again = relay.drain()
        assert (again.claimed, again.failed) == (1, 1)
        assert relay.store.failed_rows()[0][2] == 2


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_broker_down_leaves_rows_pending_then_they_go_out(
    target: Target, unique_queue: str, tmp_path: Path
) -> None:
    from conftest import require_service

    require_service("redis")
    target.add(envelopes(20, unique_queue), unique_queue)
    import redis

    from babelq.transports.redis import RedisTransport

    # opening a redis:// URL pings, so the relay gets a transport around a client of a closed port
    dead = RedisTransport(client=redis.Redis(host="127.0.0.1", port=_closed_port(), socket_connect_timeout=1))
    with Relay(target.url, dead, table=target.table, batch=8) as relay, pytest.raises(UnavailableError):
        relay.run_once()
    assert target.statuses() == {"pending": 20}
    assert all(attempts == 0 and error is None for _, _, attempts, error in target.rows())
    with Relay(target.url, REDIS, table=target.table, batch=8) as relay:
        assert relay.drain().published == 20
        assert numbers(read_all(relay.transport, unique_queue)) == list(range(20))
    assert target.statuses() == {"published": 20}


class Proxy:
    """A TCP forwarder to the live Redis that can be switched off (every connection cut, new
    ones refused) and on again on the same port: a broker outage without touching Redis."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = _closed_port()
        self.conns: list[socket.socket] = []
        self.listener: socket.socket | None = None
        self.lock = threading.Lock()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self.lock:
            if self.listener is not None:
                with contextlib.suppress(OSError):
                    self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
                self.listener.close()
                self.listener = None
            for c in self.conns:
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RDWR)
                c.close()
            self.conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    from conftest import require_service

    p = Proxy(require_service("redis"))
    p.up()
    yield p
    p.down()


def _wait(condition: object, within: float = 20.0) -> None:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if callable(condition) and condition():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_an_outage_while_running_backs_off_marks_nothing_failed_and_recovers(
    target: Target, unique_queue: str, proxy: Proxy
) -> None:
    url = f"redis://127.0.0.1:{proxy.port}/15?socket_connect_timeout=1&socket_timeout=2"
    relay = Relay(
        target.url, url, table=target.table, batch=10, poll_interval=0.05, backoff_first=0.05, backoff_cap=0.3
    )
    totals = {}
    thread = threading.Thread(target=lambda: totals.update(relay.run().as_dict()))
    thread.start()
    try:
        target.add(envelopes(10, unique_queue), unique_queue)
        _wait(lambda: target.statuses() == {"published": 10})
        proxy.down()
        target.add(envelopes(25, unique_queue, start=10), unique_queue)
        time.sleep(1.0)  # the relay keeps failing and backing off meanwhile
        assert target.statuses() == {"published": 10, "pending": 25}
        assert all(a == 0 and e is None for _, status, a, e in target.rows() if status == "pending")
        proxy.up()
        _wait(lambda: target.statuses() == {"published": 35})
    finally:
        relay.stop()
        thread.join(10)
        relay.close()
    assert totals["outages"] >= 2 and totals["failed"] == 0 and totals["published"] == 35
    t = open_transport("redis://127.0.0.1:6379/15")
    try:
        assert numbers(read_all(t, unique_queue)) == list(range(35))
    finally:
        t.close()


def test_sqlite_lease_keeps_a_dead_relays_rows_until_it_lapses(tmp_path: Path, unique_queue: str) -> None:
    """A relay that claimed rows and died (never marked or released them) holds them until its
    lease lapses; then another relay takes them."""
    from babelq.outbox import SQLiteRelayStore

    url = f"sqlite://{tmp_path}/app.db"
    target = Target("sqlite", url, "babelq_outbox")
    target.add(envelopes(5, unique_queue), unique_queue)
    dead = SQLiteRelayStore(url, lease_seconds=0.6)
    assert len(dead.claim(100).rows) == 5  # ...and the process dies here
    broker = f"sqlite://{tmp_path}/broker.db"
    with Relay(url, broker) as relay:
        assert relay.run_once().claimed == 0, "leased rows are not taken"
        time.sleep(0.8)
        assert relay.drain().published == 5
    dead.close()


def test_outbox_database_connection_lost_while_running(unique_queue: str) -> None:
    """PostgreSQL terminates the relay's connection: the relay backs off, reconnects and goes on."""
    from conftest import require_service

    require_service("postgres")
    require_service("redis")
    import uuid

    import psycopg

    from .support import PG

    target = Target("postgres", PG, f"t_outbox_{uuid.uuid4().hex[:10]}")
    relay = Relay(PG, REDIS, table=target.table, poll_interval=0.05, backoff_first=0.05, backoff_cap=0.2)
    thread = threading.Thread(target=relay.run)
    thread.start()
    try:
        target.add(envelopes(5, unique_queue), unique_queue)
        _wait(lambda: target.statuses() == {"published": 5})
        pid = relay.store.conn.info.backend_pid
        with psycopg.connect(PG, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        target.add(envelopes(5, unique_queue, start=5), unique_queue)
        _wait(lambda: target.statuses() == {"published": 10})
        assert relay.store.conn.info.backend_pid != pid
    finally:
        relay.stop()
        thread.join(10)
        assert numbers(read_all(relay.transport, unique_queue)) == list(range(10))
        relay.close()
        with psycopg.connect(PG, autocommit=True) as admin:
            admin.execute(f"DROP TABLE IF EXISTS {target.table}")


class _NoHeaders:
    """A third-party transport whose publish takes no headers (every babelq transport does)."""

    scheme = "sqlite"

    def __init__(self, inner: Transport) -> None:
        self.inner = inner

    def publish(self, queue: str, body: bytes, *, envelope: object = None, delay_ms: int = 0) -> None:
        self.inner.publish(queue, body, delay_ms=delay_ms)

    def publish_many(self, queue: str, messages: list[Outgoing]) -> None:
        self.inner.publish_many(queue, messages)


def test_rows_with_headers_go_out_without_them_on_a_transport_that_has_none(
    tmp_path: Path, unique_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    from babelq.outbox import Outbox
    from babelq.runtime.middleware import Publication, PublishNext

    def traced(publication: Publication, call_next: PublishNext) -> None:
        call_next(Publication(publication.queue, publication.envelope, 0, {"traceparent": "00-a-b-01"}))

    url = f"sqlite://{tmp_path}/app.db"
    Outbox.init(url)
    db = sqlite3.connect(tmp_path / "app.db")
    with db:
        Outbox(publish_middleware=[traced]).add_many(db, envelopes(3, unique_queue), queue=unique_queue)
    inner = open_transport(f"sqlite://{tmp_path}/broker.db")
    with Relay(url, _NoHeaders(inner)) as relay:  # type: ignore[arg-type]
        assert relay.drain().published == 3
    assert numbers(read_all(inner, unique_queue)) == [0, 1, 2]
    assert sum("carries no native headers" in r.message for r in caplog.records) == 1
    inner.close()
