"""Outbox.add: a row commits with the business write, rolls back with it, and holds the canonical bytes."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import make, now_ms
from babelq.errors import ConfigurationError, EnvelopeError
from babelq.outbox import Outbox, Relay
from babelq.runtime.middleware import Publication, PublishNext
from babelq.transports import open_transport

from .support import REDIS, Target, envelopes, read_all

pytestmark = pytest.mark.live


def test_committed_row_holds_the_canonical_bytes(target: Target, unique_queue: str) -> None:
    env = make("urn:babel:orders:created", {"order_id": 1042, "name": "Zoë/€"}, queue="ignored")
    conn = target.connect()
    row = target.outbox.add(conn, env, queue=unique_queue)
    conn.commit()
    conn.close()
    [(row_id, queue, body, status, message_id)] = target.rows("id, queue, body, status, message_id")
    assert (row_id, queue, status, message_id) == (row, unique_queue, "pending", env.id)
    assert bytes(body) == env.encode()


def test_queue_defaults_to_meta_queue(target: Target, unique_queue: str) -> None:
    conn = target.connect()
    target.outbox.add(conn, make("urn:babel:orders:created", {}, queue=unique_queue))
    conn.commit()
    conn.close()
    assert target.rows("queue") == [(unique_queue,)]


def test_rolled_back_business_transaction_publishes_nothing(
    target: Target, broker: str, unique_queue: str, tmp_path: Path
) -> None:
    conn = target.connect()
    conn.execute(f"CREATE TABLE IF NOT EXISTS orders_{target.table} (id BIGINT PRIMARY KEY)")
    conn.commit()
    conn.execute(f"INSERT INTO orders_{target.table} VALUES (1)")
    target.outbox.add_many(conn, envelopes(5, unique_queue), queue=unique_queue)
    conn.rollback()  # the business write failed
    conn.execute(f"INSERT INTO orders_{target.table} VALUES (2)")
    target.outbox.add(conn, make("urn:babel:orders:created", {"n": 99}), queue=unique_queue)
    conn.commit()
    conn.execute(f"DROP TABLE orders_{target.table}")
    conn.commit()
    conn.close()
    with Relay(target.url, broker, table=target.table) as relay:
        done = relay.drain()
        bodies = read_all(relay.transport, unique_queue)
    assert (done.claimed, done.published) == (1, 1)
    assert [b for b in bodies if b'"n":99' not in b] == []
    assert len(bodies) == 1


def test_autocommit_connection_is_refused(target: Target, unique_queue: str) -> None:
    if target.kind == "sqlite":
        conn: Any = sqlite3.connect(target.url.removeprefix("sqlite://"), isolation_level=None)
    else:
        import psycopg

        conn = psycopg.connect(target.url, autocommit=True)
    try:
        with pytest.raises(ConfigurationError, match=r"^connection: not inside a transaction"):
            target.outbox.add(conn, make("urn:babel:orders:created", {}), queue=unique_queue)
        assert target.rows() == []
        # inside an explicit transaction the same connection is fine
        if target.kind == "sqlite":
            conn.execute("BEGIN")
            target.outbox.add(conn, make("urn:babel:orders:created", {}), queue=unique_queue)
            conn.execute("COMMIT")
        else:
            with conn.transaction():
                target.outbox.add(conn, make("urn:babel:orders:created", {}), queue=unique_queue)
        assert len(target.rows()) == 1
    finally:
        conn.close()


def test_bad_input_is_one_line_naming_the_field(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "a.db")
    outbox = Outbox()
    outbox.init_schema(db)
    env = make("urn:babel:orders:created", {})
    with pytest.raises(ConfigurationError, match=r"^connection: expected an sqlite3 or psycopg"):
        outbox.add(object(), env)
    with pytest.raises(ConfigurationError, match=r"^delay_ms: "):
        outbox.add(db, env, delay_ms=-1)
    with pytest.raises(ConfigurationError, match=r"^queue: "):
        outbox.add(db, env, queue="")
    with pytest.raises(EnvelopeError, match="not an envelope a consumer accepts"):
        outbox.add(db, b'{"job":"urn:babel:x:y","data":{}}')
    with pytest.raises(ConfigurationError, match=r"^table: "):
        Outbox(table="x; DROP TABLE y")
    with pytest.raises(ConfigurationError, match=r"^url: unsupported outbox URL 'mysql://u:\*\*\*@h/d'"):
        Outbox.init("mysql://u:secret@h/d")
    db.rollback()
    assert db.execute("SELECT COUNT(*) FROM babelq_outbox").fetchone() == (0,)


def test_bytes_are_accepted_and_stored_canonically(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "a.db")
    outbox = Outbox()
    outbox.init_schema(db)
    env = make("urn:babel:orders:created", {"a": 1}, queue="orders")
    with db:
        outbox.add(db, env.encode())
    assert db.execute("SELECT body, queue FROM babelq_outbox").fetchone() == (env.encode(), "orders")


def test_init_is_idempotent(target: Target) -> None:
    Outbox.init(target.url, table=target.table)
    Outbox.init(target.url, table=target.table)
    assert target.rows() == []


def test_delay_counts_from_the_add(target: Target, unique_queue: str) -> None:
    conn = target.connect()
    before = now_ms()
    target.outbox.add(conn, make("urn:babel:orders:created", {}), queue=unique_queue, delay_ms=5000)
    target.outbox.add(
        conn, make("urn:babel:orders:created", {}, deliver_at=before + 60_000), queue=unique_queue
    )
    conn.commit()
    conn.close()
    [(c1, d1), (_c2, d2)] = target.rows("created_at, deliver_at")
    assert d1 - c1 == 5000
    assert before + 60_000 - 50 <= d2 <= before + 60_000 + 50


def test_publish_middleware_runs_at_add_time_and_headers_reach_the_broker(
    tmp_path: Path, unique_queue: str
) -> None:
    """Whatever the publish chain makes (new data, native headers) is what the table holds
    and what the relay sends; the relay never re-encodes."""
    from conftest import require_service

    require_service("redis")

    def stamp(publication: Publication, call_next: PublishNext) -> None:
        env = publication.envelope.with_data({**publication.envelope.data, "stamped": True})
        call_next(Publication(publication.queue, env, publication.delay_ms, {"traceparent": "00-abc-def-01"}))

    def drop_secret(publication: Publication, call_next: PublishNext) -> None:
        if not publication.envelope.data.get("secret"):
            call_next(publication)

    url = f"sqlite://{tmp_path}/app.db"
    outbox = Outbox(publish_middleware=[drop_secret, stamp])
    Outbox.init(url)
    db = sqlite3.connect(tmp_path / "app.db")
    with db:
        kept = outbox.add(db, make("urn:babel:orders:created", {"n": 1}), queue=unique_queue)
        dropped = outbox.add(db, make("urn:babel:orders:created", {"secret": 1}), queue=unique_queue)
    assert kept is not None and dropped is None
    [(body, headers)] = db.execute("SELECT body, headers FROM babelq_outbox").fetchall()
    assert b'"stamped":true' in body and headers == '{"traceparent":"00-abc-def-01"}'
    with Relay(url, REDIS) as relay:
        assert relay.drain().published == 1
        [delivery] = relay.transport.reserve(unique_queue, max_messages=10)
        assert delivery.body == body
        assert delivery.headers.get("traceparent") == "00-abc-def-01"
        relay.transport.ack(delivery)
        open_transport(REDIS).purge(unique_queue)
