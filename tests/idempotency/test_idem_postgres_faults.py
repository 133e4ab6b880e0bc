"""PostgresStore when the database misbehaves: killed backends, lost replies, outages, racing migrations.

Real server, real faults: ``pg_terminate_backend`` from another connection, and a TCP proxy
(``tests/runtime/faults.py``) that is stopped, started again, or made to swallow one reply.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from babelq.errors import UnavailableError
from babelq.idempotency.postgres_store import PostgresStore
from conftest import require_service
from runtime.faults import TcpProxy

pytestmark = pytest.mark.live

DSN = "postgresql://postgres@127.0.0.1:5432/test"


def terminate(application_name: str) -> int:
    """Kill every backend of ``application_name`` from another connection; returns how many."""
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchall()
    return len(rows)


@pytest.fixture
def table() -> Iterator[str]:
    require_service("postgres")
    import psycopg

    name = f"t_idem_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(DSN, table=name)
    store.migrate()
    store.close()
    yield name
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{name}"')


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    require_service("postgres")
    with TcpProxy(("127.0.0.1", 5432)) as running:
        yield running


def test_reconnects_after_its_backend_is_terminated(table: str) -> None:
    app_name = f"babelq-t-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(f"{DSN}?application_name={app_name}", table=table)
    store.remember("a")
    for round_ in range(3):
        assert terminate(app_name) == 1
        assert store.seen("a"), f"round {round_}: the store did not come back"
        assert store.claim(f"b{round_}")
    assert store.reconnects == 3
    store.close()


def test_a_claim_whose_reply_was_lost_is_recognised_as_ours(table: str, proxy: TcpProxy) -> None:
    store = PostgresStore(f"postgresql://postgres@127.0.0.1:{proxy.port}/test", table=table)
    other = PostgresStore(DSN, table=table)
    assert not store.seen("warm-up")  # the connection exists before the fault
    key = str(uuid.uuid4())
    proxy.lose_next_reply()
    assert store.claim(key), "the INSERT committed: retrying must find the claim ours, not 'elsewhere'"
    assert store.reconnects == 1
    assert not other.claim(key), "another worker still sees it claimed"
    other.release(key)  # not its claim: releasing changes nothing
    assert not other.claim(key)
    store.remember(key)
    assert other.seen(key)
    store.close()
    other.close()


def test_an_unreachable_database_raises_unavailable_then_recovers(table: str, proxy: TcpProxy) -> None:
    import psycopg

    proxy.stop()
    store = PostgresStore(f"postgresql://postgres:s3cret@127.0.0.1:{proxy.port}/test", table=table)
    with pytest.raises(UnavailableError) as caught:
        store.claim("a")
    assert "s3cret" not in str(caught.value)
    assert f"127.0.0.1:{proxy.port}" in str(caught.value)
    assert isinstance(caught.value.__cause__, psycopg.Error)

    proxy.start()
    end = time.monotonic() + 5
    while True:
        try:
            assert store.claim("a")
            break
        except UnavailableError:
            assert time.monotonic() < end, "the store did not reconnect once the database was back"
            time.sleep(0.05)
    proxy.cut()  # and a connection dropped mid-life is replaced
    store.remember("a")
    assert store.seen("a")
    store.close()


def test_a_claim_held_when_the_connection_broke_is_reclaimed_on_retry(table: str, proxy: TcpProxy) -> None:
    store = PostgresStore(f"postgresql://postgres@127.0.0.1:{proxy.port}/test", table=table)
    key = str(uuid.uuid4())
    assert store.claim(key)
    proxy.stop()
    with pytest.raises(UnavailableError):
        store.release(key)  # the handler failed, but the claim cannot be given back now
    proxy.start()
    time.sleep(0.6)  # past the store's reconnect pause
    assert store.claim(key), "this worker's redelivery must get its own claim back"
    store.close()


def test_a_message_id_postgres_cannot_store_is_not_an_outage(table: str) -> None:
    import psycopg

    store = PostgresStore(DSN, table=table)
    with pytest.raises(psycopg.DataError):
        store.claim("bad\x00id")
    store.close()


def test_forty_concurrent_migrations_all_succeed() -> None:
    require_service("postgres")
    import psycopg

    name = f"t_idem_mig_{uuid.uuid4().hex[:10]}"
    stores = [PostgresStore(DSN, table=name) for _ in range(40)]
    barrier = threading.Barrier(len(stores), timeout=20)
    errors: list[BaseException] = []

    def migrate(store: PostgresStore) -> None:
        try:
            barrier.wait()
            store.migrate()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=migrate, args=(s,)) for s in stores]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == [], f"{len(errors)} of 40 failed: {errors[:3]}"
        stores[0].remember("x")
        assert stores[1].seen("x")
    finally:
        for store in stores:
            store.close()
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{name}"')


def test_a_table_from_before_claim_owners_is_upgraded_by_migrate(table: str) -> None:
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{table}" DROP COLUMN owner')
    store = PostgresStore(DSN, table=table)
    with pytest.raises(UnavailableError, match=r"migrate\(\)"):
        store.claim("a")  # an upgraded worker before anyone migrated: put back, with the fix named
    store.migrate()
    assert store.claim("a")
    store.close()
