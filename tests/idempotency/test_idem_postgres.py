"""PostgresStore against the live server (a table per test, dropped afterwards)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from idem_contract import check_claim_lifecycle, check_seen_set, race

from babelq.errors import ConfigurationError
from babelq.idempotency import ClaimingStore, wrap
from babelq.idempotency.postgres_store import PostgresStore
from conftest import require_service

pytestmark = pytest.mark.live

DSN = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
def table() -> Iterator[str]:
    require_service("postgres")
    import psycopg

    name = f"t_idem_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(DSN, table=name)
    store.migrate()
    store.migrate()  # idempotent
    store.close()
    yield name
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{name}"')


def test_contract(table: str) -> None:
    store = PostgresStore(DSN, table=table)
    assert isinstance(store, ClaimingStore)
    check_seen_set(store)
    check_claim_lifecycle(store)
    store.close()


def test_done_ids_expire_with_ttl(table: str) -> None:
    store = PostgresStore(DSN, table=table, ttl_ms=150)
    store.remember("a")
    assert store.seen("a")
    time.sleep(0.3)
    assert not store.seen("a")
    assert store.claim("a"), "an expired done id can be claimed again"


def test_claims_expire(table: str) -> None:
    store = PostgresStore(DSN, table=table, claim_ttl_ms=150)
    assert store.claim("a")
    assert not store.claim("a")
    time.sleep(0.3)
    assert store.claim("a")


def test_shares_a_caller_connection(table: str) -> None:
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        store = PostgresStore(conn, table=table)
        store.remember("x")
        store.close()  # not ours: stays open
        assert not conn.closed
        assert conn.execute(f'SELECT state FROM "{table}" WHERE id = %s', ("x",)).fetchone() == ("done",)


def test_refuses_a_transactional_connection(table: str) -> None:
    import psycopg

    with psycopg.connect(DSN) as conn, pytest.raises(ConfigurationError):
        PostgresStore(conn, table=table)


def test_wrap_over_postgres(table: str) -> None:
    runs: list[int] = []
    handle = wrap(PostgresStore(DSN, table=table), lambda _m: runs.append(1))
    msg = {"meta": {"id": str(uuid.uuid4())}}
    assert handle(msg).ran
    assert handle(msg).skipped
    assert len(runs) == 1


def test_two_threads_racing_on_one_id(table: str) -> None:
    race(lambda: PostgresStore(DSN, table=table), threads=2, rounds=20)


@pytest.mark.parametrize("bad", ["x; DROP TABLE y", "1abc", 'a"b', ""])
def test_table_name_must_be_an_identifier(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        PostgresStore(DSN, table=bad)
