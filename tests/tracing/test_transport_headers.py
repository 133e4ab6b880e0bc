"""Header carriage details the contract suite does not cover: SQLite databases made before the
``headers`` column, SQS's 10-attribute limit, the AMQP table as other clients see it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import make
from babelq.transports.sqlite import SQLiteTransport
from conftest import require_service

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

# the table as babelq made it before carried headers existed
_OLD_TABLE = """CREATE TABLE babelq_messages (
    id INTEGER PRIMARY KEY, queue TEXT NOT NULL, body BLOB NOT NULL, available_at INTEGER NOT NULL,
    lease INTEGER, delivery_count INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL)"""


def test_an_old_sqlite_database_gets_the_headers_column_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.execute(_OLD_TABLE)
    old.execute(
        "INSERT INTO babelq_messages (queue, body, available_at, created_at) VALUES ('q', ?, 0, 0)",
        (b'{"job":"urn:babel:t:old"}',),
    )
    old.commit()
    old.close()

    transport = SQLiteTransport(path)
    try:
        [waiting] = transport.reserve("q")
        assert waiting.body == b'{"job":"urn:babel:t:old"}'
        assert dict(waiting.carried_headers) == {}
        transport.ack(waiting)
        transport.publish("q", b"new", headers={"traceparent": TP})
        [fresh] = transport.reserve("q")
        assert dict(fresh.carried_headers) == {"traceparent": TP}
        transport.ack(fresh)
    finally:
        transport.close()
    columns = [row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(babelq_messages)")]
    assert columns[-1] == "headers"
    SQLiteTransport(path).close()  # a second open finds the column and adds nothing


def test_sqs_refuses_headers_beyond_its_attribute_limit_in_one_line(sqs_url: str, unique_queue: str) -> None:
    from babelq.transports import open_transport
    from babelq.transports.sqs import SQSError

    transport: Any = open_transport(sqs_url)
    try:
        body = make("urn:babel:t:many", {}, queue=unique_queue).encode()
        transport.publish(unique_queue, body, headers={f"h{i}": "v" for i in range(4)})  # 6 + 4 = 10
        with pytest.raises(SQSError, match=r"^headers: SQS carries at most 10 message attributes .* got 5$"):
            transport.publish(unique_queue, body, headers={f"h{i}": "v" for i in range(5)})
        [got] = transport.reserve(unique_queue, timeout=2)
        assert dict(got.carried_headers) == {f"h{i}": "v" for i in range(4)}
        assert {n for n in got.headers if n.startswith("bq-")} >= {"bq-job", "bq-trace-id", "bq-message-id"}
        transport.ack(got)
    finally:
        transport.purge(unique_queue)
        transport.close()


def test_amqp_headers_are_plain_long_strings_next_to_the_binding_headers(unique_queue: str) -> None:
    """Another AMQP client (pika) reads the traceparent as a string in the header table, and
    the binding's own x-* headers are still there with their native types."""
    require_service("rabbitmq")
    pika = pytest.importorskip("pika")
    from babelq.transports.amqp import AMQPTransport

    url = "amqp://guest:guest@127.0.0.1:5672/%2F"
    ours = AMQPTransport(url)
    envelope = make("urn:babel:t:amqp", {}, queue=unique_queue)
    try:
        headers = {"traceparent": TP, "x-attempts": "9"}
        ours.publish(unique_queue, envelope.encode(), envelope=envelope, headers=headers)
        connection = pika.BlockingConnection(pika.URLParameters(url))
        try:
            channel = connection.channel()
            for _ in range(50):
                method, props, body = channel.basic_get(unique_queue, auto_ack=True)
                if method is not None:
                    break
                connection.sleep(0.05)
            assert body == envelope.encode()
            assert props.headers["traceparent"] == TP
            assert props.headers["x-attempts"] == 0  # the binding wins a collision
            assert props.headers["x-schema-version"] == 1
        finally:
            connection.close()
    finally:
        ours.delete_queues(unique_queue)
        ours.close()
