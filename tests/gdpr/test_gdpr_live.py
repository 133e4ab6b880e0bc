"""Cleartext scan: through the App with the GDPR middleware, the broker never stores marked values.

For Redis, RabbitMQ and SQLite: publish (single, batch, delayed where the broker keeps delayed
messages readably), read every stored byte the broker holds for the test's queues (Redis: the
value of every key under the test's prefix; RabbitMQ: a basic_get of each raw body before
consuming, then put back; SQLite: the database and WAL files and every row), look for the
cleartext of each marked field, find none; then consume, and the handler sees cleartext. A
failing message's dead letter is scanned the same way.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from babelq.gdpr.middleware import ProtectFields, UnprotectFields
from babelq.runtime import App, Backoff
from babelq.runtime.message import Message
from babelq.schema import SchemaRegistry
from conftest import require_service

from .support import CLEARTEXTS, DATA, SCHEMA, URN, cipher_for, key_b64

pytestmark = pytest.mark.live

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
POISONED = "urn:babel:customers:poisoned"  # its handler always fails -> dead letter


def redis_stored(prefix: str) -> bytes:
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=15)
    out: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}*"):
        kind = client.type(key).decode()
        out.append(key)
        if kind == "string":
            out.append(client.get(key) or b"")
        elif kind == "list":
            out.extend(client.lrange(key, 0, -1))
        elif kind == "zset":
            out.extend(client.zrange(key, 0, -1))
        elif kind == "hash":
            for k, v in client.hgetall(key).items():
                out.extend((k, v))
        elif kind == "set":
            out.extend(client.smembers(key))
        elif kind == "stream":
            for _, fields in client.xrange(key):
                for k, v in fields.items():
                    out.extend((k, v))
        else:
            raise AssertionError(f"unexpected Redis type {kind} at {key!r}")
    client.close()
    return b"\n".join(out)


def amqp_stored(queues: list[str]) -> bytes:
    """Raw bodies (and header values) of every ready message, read with basic_get and put back."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        channel = connection.channel()
        out: list[bytes] = []
        for queue in queues:
            while True:
                method, properties, body = channel.basic_get(queue, auto_ack=False)
                if method is None:
                    break
                out.append(body)
                out.append(repr(properties.headers).encode())
            channel.basic_nack(multiple=True, requeue=True) if out else None
        channel.close()
        return b"\n".join(out)
    finally:
        connection.close()


def sqlite_stored(db: Path) -> bytes:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT body, coalesce(headers, '') FROM babelq_messages").fetchall()
    files = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    return files + b"".join(bytes(b) + str(h).encode() for b, h in rows)


Broker = tuple[str, Callable[[list[str]], bytes]]


@pytest.fixture(params=["redis", "rabbitmq", "sqlite"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    if request.param == "redis":
        require_service("redis")
        prefix = f"gdpr-test-{uuid.uuid4().hex[:8]}:"
        yield f"redis://127.0.0.1:6379/15?prefix={prefix}", lambda queues: redis_stored(prefix)
        import redis

        client = redis.Redis(host="127.0.0.1", port=6379, db=15)
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()
    elif request.param == "rabbitmq":
        require_service("rabbitmq")
        created: list[str] = []

        def scan(queues: list[str]) -> bytes:
            created.extend(queues)
            return amqp_stored(queues)

        yield AMQP_URL, scan
        import pika

        connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        channel = connection.channel()
        for queue in set(created):
            channel.queue_delete(queue)
        connection.close()
    else:
        db = tmp_path / "q.db"
        yield f"sqlite:///{db}", lambda queues: sqlite_stored(db)


def leaked(stored: bytes) -> list[str]:
    return [c for c in CLEARTEXTS if c.encode() in stored]


def test_no_marked_cleartext_on_the_broker_and_handlers_see_cleartext(broker: Broker) -> None:
    url, scan = broker
    queue = f"gdpr-{uuid.uuid4().hex[:8]}"
    registry = SchemaRegistry()
    registry.register(URN, SCHEMA)
    registry.register(POISONED, SCHEMA)
    cipher = cipher_for(("2026-11", key_b64()))
    seen: list[dict[str, Any]] = []

    def poisoned(message: Message) -> None:
        seen.append(dict(message.data))
        raise RuntimeError("refused")

    with App(
        url,
        queue=queue,
        max_attempts=1,
        backoff=Backoff(base_ms=0, jitter=False),
        publish_middleware=[ProtectFields(registry, cipher)],
        middleware=[UnprotectFields(registry, cipher)],
    ) as app:
        app.register(URN, lambda m: seen.append(dict(m.data)))
        app.register(POISONED, poisoned)
        app.publish(URN, DATA)
        app.publish_many([(URN, DATA), (URN, DATA), (POISONED, DATA)])
        app.publish(URN, DATA, delay_ms=1500)  # held where the broker keeps delayed messages
        stored = scan([queue, f"{queue}.delay.1500.expiring"])
        assert stored.count(b"customer_id") >= 5, "the scan must see the stored bodies, delayed one included"
        assert leaked(stored) == []

        assert app.drain(timeout=30, wait_delayed=True) == 5
        assert seen == [DATA] * 5  # the handlers (the failing one too) saw cleartext
        dead = scan([f"{queue}.dlq"])
        assert dead.count(b"customer_id") >= 1 and b"dead_letter" in dead
        assert leaked(dead) == []


def test_the_scan_finds_cleartext_when_nothing_protects_it(broker: Broker) -> None:
    """The control: the same scan, without the publish middleware, does see every marked value."""
    url, scan = broker
    queue = f"gdpr-{uuid.uuid4().hex[:8]}"
    with App(url, queue=queue) as app:
        app.publish(URN, DATA)
        assert leaked(scan([queue])) == CLEARTEXTS
