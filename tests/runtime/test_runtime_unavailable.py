"""Infrastructure failure is never the message's fault: put back, reconnect, go on.

A handler, a store or any dependency raising :class:`babelq.errors.UnavailableError` puts
the message back unchanged (released with a delay, no attempt counted, never dead-lettered).
The live tests break real PostgreSQL connections (``pg_terminate_backend``, a stopped TCP
proxy) under a running App.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from babelq.envelope import make
from babelq.errors import PublishNotConfirmedError, UnavailableError
from babelq.idempotency.middleware import IdempotencyMiddleware
from babelq.idempotency.postgres_store import PostgresStore
from babelq.runtime import App, Message
from babelq.transports.memory import MemoryTransport

from .faults import TcpProxy
from .support import RecordingTransport, dlq

URN = "urn:babel:jobs:run"
DSN = "postgresql://postgres@127.0.0.1:5432/test"


def publish(transport: MemoryTransport, n: int, queue: str = "q") -> list[bytes]:
    bodies = [make(URN, {"n": i}, queue=queue).encode() for i in range(n)]
    for body in bodies:
        transport.publish(queue, body)
    return bodies


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"{what}: not reached within {timeout} s"
        time.sleep(0.01)


@pytest.fixture
def pg_table() -> Iterator[str]:
    from conftest import require_service

    require_service("postgres")
    import psycopg

    name = f"t_rt_idem_{uuid.uuid4().hex[:10]}"
    store = PostgresStore(DSN, table=name)
    store.migrate()
    store.close()
    yield name
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{name}"')


# -- handlers and middleware -----------------------------------------------------------------------
def test_a_handler_raising_unavailable_puts_the_message_back_unchanged(
    transport: RecordingTransport, make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(max_attempts=1)  # any counted failure would dead-letter at once
    runs: list[int] = []

    def handler(message: Message) -> None:
        runs.append(message.attempts)
        raise UnavailableError("ledger database at postgresql://app:***@db/ledger is down")

    app.register(URN, handler)
    [body] = publish(transport, 1)
    with caplog.at_level(logging.INFO, logger="babelq"):
        assert app.drain() == 1
    assert runs == [0]
    assert transport.named("dead_letter") == [] and transport.named("retry") == []
    assert transport.named("release") == [5_000]
    assert transport.peek_all("q") == [body], "the same bytes: no attempt was counted"
    stats = app.stats()
    assert stats["unavailable"] == 1 and stats["released"] == 1
    assert stats["failed"] == 0 and stats["dead_lettered"] == 0
    lines = [r for r in caplog.records if "ledger database" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING and lines[0].exc_info is None


def _publish_not_confirmed_errors() -> list[type[Exception]]:
    from babelq.transports.amqp import AMQPPublishError
    from babelq.transports.artemis import ArtemisPublishError
    from babelq.transports.kafka import KafkaDeliveryError

    return [PublishNotConfirmedError, AMQPPublishError, ArtemisPublishError, KafkaDeliveryError]


@pytest.mark.parametrize("error", _publish_not_confirmed_errors(), ids=lambda cls: cls.__name__)
def test_a_publish_the_broker_did_not_confirm_puts_the_message_back_on_every_broker(
    error: type[Exception], transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    """A downstream publish that was refused or never confirmed is the broker's failure."""
    assert error is PublishNotConfirmedError and issubclass(error, UnavailableError)
    app = make_app(max_attempts=1)

    def handler(message: Message) -> None:
        raise error("the write to 'shipping' was not confirmed within 30.0s")

    app.register(URN, handler)
    [body] = publish(transport, 1)
    assert app.drain() == 1
    assert transport.named("dead_letter") == [] and transport.named("retry") == []
    assert transport.peek_all("q") == [body]
    assert app.stats()["unavailable"] == 1


def test_a_message_put_back_is_handled_once_the_dependency_is_back(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(max_attempts=1, unavailable_delay_ms=10)
    down = [3]
    handled: list[int] = []

    def handler(message: Message) -> None:
        if down[0]:
            down[0] -= 1
            raise UnavailableError("payments API unreachable")
        handled.append(message.attempts)

    app.register(URN, handler)
    publish(transport, 1)
    app.drain(wait_delayed=True, timeout=10)
    assert handled == [0]
    assert transport.named("release") == [10, 10, 10]
    assert app.stats()["unavailable"] == 3 and app.stats()["handled"] == 1
    assert dlq(transport) == []


def test_a_middleware_raising_unavailable_puts_the_message_back(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    def store_down(message: Message, call_next: Callable[[Message], object]) -> object:
        raise UnavailableError("schema registry unreachable")

    app = make_app(max_attempts=1, middleware=[store_down])
    app.register(URN, lambda message: None)
    publish(transport, 2)
    app.drain()
    assert app.stats()["unavailable"] == 2 and app.stats()["dead_lettered"] == 0
    assert transport.size("q") == 2


# -- a real store that goes away ---------------------------------------------------------------------
@pytest.mark.live
def test_a_store_outage_puts_messages_back_and_they_run_once_it_is_back(pg_table: str) -> None:
    with TcpProxy(("127.0.0.1", 5432)) as proxy:
        store = PostgresStore(f"postgresql://postgres@127.0.0.1:{proxy.port}/test", table=pg_table)
        transport = MemoryTransport()
        app = App(
            transport, queue="q", max_attempts=1, unavailable_delay_ms=50,
            middleware=[IdempotencyMiddleware(store)],
        )
        effects: Counter[int] = Counter()
        app.register(URN, lambda message: effects.update([message.data["n"]]))
        publish(transport, 50)
        assert not store.seen("warm-up")
        proxy.stop()
        app.drain(timeout=1.0)  # they keep coming back while the store is down
        assert sum(effects.values()) == 0, "nothing runs while the store cannot claim"
        assert dlq(transport) == []
        assert app.stats()["unavailable"] >= 50 and app.stats()["failed"] == 0
        assert app.stats()["received"] < 50 * 8, "fetching slowed down instead of cycling the queue"
        proxy.start()
        time.sleep(0.6)  # the store's pause between reconnect attempts
        app.drain(wait_delayed=True, timeout=20)
        assert effects == Counter(range(50))
        assert dlq(transport) == [] and transport.size("q") == 0
        store.close()


def _terminate(application_name: str) -> int:
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as admin:
        return len(
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                (application_name,),
            ).fetchall()
        )


@pytest.mark.live
@pytest.mark.slow
def test_6000_messages_survive_killed_store_connections_and_an_outage(
    pg_table: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Killed store connections and an outage cost no healthy message: none is dead-lettered or
    failed, each is handled exactly once."""
    n = 6_000
    app_name = f"babelq-rt-{uuid.uuid4().hex[:8]}"
    with TcpProxy(("127.0.0.1", 5432)) as proxy:
        store = PostgresStore(
            f"postgresql://postgres@127.0.0.1:{proxy.port}/test?application_name={app_name}", table=pg_table
        )
        transport = MemoryTransport()
        app = App(
            transport, queue="q", concurrency=4, max_attempts=3, unavailable_delay_ms=100,
            middleware=[IdempotencyMiddleware(store)],
        )
        effects: Counter[int] = Counter()
        lock = threading.Lock()

        def handler(message: Message) -> None:
            with lock:
                effects[message.data["n"]] += 1

        app.register(URN, handler)
        publish(transport, n)

        def handled() -> int:
            with lock:
                return len(effects)

        kills = 0

        def faults() -> None:
            nonlocal kills
            for at in (500, 1_500, 2_500):
                wait_for(lambda at=at: handled() >= at, 60, f"{at} handled")  # type: ignore[misc]
                kills += _terminate(app_name)
            wait_for(lambda: handled() >= 3_500, 60, "3500 handled")
            proxy.stop()  # the database is unreachable for a moment
            time.sleep(0.4)
            proxy.start()

        fault_thread = threading.Thread(target=faults, daemon=True)
        fault_thread.start()
        with caplog.at_level(logging.WARNING, logger="babelq"):
            app.drain(wait_delayed=True, timeout=60)
        fault_thread.join(5)
        stats = app.stats()
        print(f"\nkills={kills} reconnects={store.reconnects} stats={stats}")
        assert kills >= 3
        assert dlq(transport) == [], f"{len(dlq(transport))} dead letters"
        assert effects == Counter(range(n)), "every message handled exactly once"
        assert stats["dead_lettered"] == 0 and stats["failed"] == 0
        assert store.reconnects >= 4, "each killed connection and the outage were reconnected"
        assert stats["unavailable"] >= 1, "the outage put messages back"
        assert any("put back" in r.getMessage() for r in caplog.records)
        assert all(r.exc_info is None for r in caplog.records)
        store.close()

