"""The schema checks in the runtime: consume side dead-letters (cause schema, never retried),
publish side refuses before the broker; on SQLite (embedded) and live Redis."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import decode, make
from babelq.errors import ConfigurationError
from babelq.runtime import App, Backoff, Message
from babelq.schema import CheckSchema, CheckSchemaOnPublish, SchemaRegistry, SchemaViolationError
from babelq.transports import open_transport
from conftest import require_service

URN = "urn:babel:orders:created"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["order_id", "amount"],
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "integer", "minimum": 0},
        "email": {"type": "string", "format": "email", "x-gdpr-sensitive": True},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
    },
}


@pytest.fixture
def registry() -> SchemaRegistry:
    reg = SchemaRegistry()
    reg.register(URN, SCHEMA)
    return reg


@pytest.fixture(params=["sqlite", "redis"])
def broker(request: pytest.FixtureRequest, tmp_path: Path, unique_queue: str) -> Iterator[str]:
    if request.param == "redis":
        require_service("redis")
        url = "redis://127.0.0.1:6379/15"
    else:
        url = f"sqlite:///{tmp_path}/q.db"
    yield url
    if request.param == "redis":
        cleanup = open_transport(url)
        for q in (unique_queue, unique_queue + ".dlq"):
            cleanup.purge(q)
        cleanup.close()


def _app(broker: str, queue: str, registry: SchemaRegistry, seen: list[Message], **options: Any) -> App:
    app = App(
        broker,
        queue=queue,
        backoff=Backoff(base_ms=0, jitter=False),
        poll_timeout=0.05,
        middleware=[CheckSchema(registry, **options)],
    )
    app.register(URN, seen.append)
    return app


def test_consume_dead_letters_with_path_and_never_retries(
    broker: str, unique_queue: str, registry: SchemaRegistry
) -> None:
    seen: list[Message] = []
    app = _app(broker, unique_queue, registry, seen)
    producer = open_transport(broker)  # a producer without the check: bad data reaches the broker
    try:
        good = make(URN, {"order_id": "A1", "amount": 5}, queue=unique_queue)
        bad = make(URN, {"order_id": "A2", "amount": -5, "items": [{"sku": 7}]}, queue=unique_queue)
        for env in (good, bad):
            producer.publish(unique_queue, env.encode())
        app.run_until_empty(timeout=10)
        assert [m.id for m in seen] == [good.id]  # the handler never saw the bad data
        [dead] = producer.reserve(unique_queue + ".dlq", max_messages=10)
        record = decode(dead.body)
        block = record.dead_letter
        assert block is not None
        assert (block["reason"], block["cause"], block["exception"]) == (
            "failed",
            "schema",
            "babelq.errors.SchemaViolationError",
        )
        assert block["error"] == (
            "schema: $.amount: -5 is less than the minimum of 0; $.items[0].sku: 7 is not of type 'string'"
        )
        assert block["attempts"] == 0 and record.attempts == 0  # dead-lettered on the first run
        assert record.id == bad.id and record.data == bad.data  # the original envelope is kept
        stats = app.stats()
        assert (stats["schema_invalid"], stats["retried"], stats["handled"]) == (1, 0, 1)
        assert producer.size(unique_queue) == 0
    finally:
        app.close()
        producer.close()


def test_consume_never_quotes_a_marked_value(
    broker: str, unique_queue: str, registry: SchemaRegistry
) -> None:
    seen: list[Message] = []
    app = _app(broker, unique_queue, registry, seen)
    producer = open_transport(broker)
    try:
        producer.publish(unique_queue, make(URN, {"order_id": "A", "amount": 1, "email": 42}).encode())
        app.run_until_empty(timeout=10)
        [dead] = producer.reserve(unique_queue + ".dlq", max_messages=10)
        block = decode(dead.body).dead_letter
        assert block is not None and block["cause"] == "schema"
        assert block["error"] == 'schema: $.email: value not shown (x-gdpr-sensitive), fails "type": "string"'
    finally:
        app.close()
        producer.close()


def test_urn_without_schema_passes_unless_required(broker: str, unique_queue: str) -> None:
    other = "urn:babel:orders:noted"
    seen: list[Message] = []
    for required, handled in ((False, 1), (True, 0)):
        app = App(
            broker,
            queue=unique_queue,
            poll_timeout=0.05,
            middleware=[CheckSchema(SchemaRegistry(), required=required)],
        )
        app.register(other, seen.append)
        app.publish(other, {"anything": 1})
        app.run_until_empty(timeout=10)
        assert app.stats()["handled"] == handled
        app.close()
    transport = open_transport(broker)
    [dead] = transport.reserve(unique_queue + ".dlq", max_messages=10)
    block = decode(dead.body).dead_letter
    assert block is not None
    assert block["error"] == "schema: $: no schema is registered for 'urn:babel:orders:noted'"
    transport.close()


def test_publish_refuses_before_the_broker(broker: str, unique_queue: str, registry: SchemaRegistry) -> None:
    app = App(broker, queue=unique_queue, publish_middleware=[CheckSchemaOnPublish(registry)])
    try:
        with pytest.raises(SchemaViolationError) as refused:
            app.publish(URN, {"order_id": "A", "amount": -5})
        text = str(refused.value)
        assert text == (
            f"refused to publish {URN} to {unique_queue!r}: "
            "schema: $.amount: -5 is less than the minimum of 0"
        )
        assert "\n" not in text and refused.value.urn == URN
        # a batch is checked message by message before any is sent: nothing of it is published
        with pytest.raises(SchemaViolationError, match=r"\$: 'amount' is a required property"):
            app.publish_many([(URN, {"order_id": "B", "amount": 1}), (URN, {"order_id": "C"})])
        assert app.transport.size(unique_queue) == 0
        app.publish(URN, {"order_id": "D", "amount": 0})
        app.publish("urn:babel:orders:noted", {"free": "form"})  # no schema: passes
        assert app.transport.size(unique_queue) == 2
    finally:
        app.close()


def test_publish_error_hides_marked_values(registry: SchemaRegistry) -> None:
    app = App("memory://", queue="q", publish_middleware=[CheckSchemaOnPublish(registry)])
    with pytest.raises(SchemaViolationError) as refused:
        app.publish(URN, {"order_id": "A", "amount": 1, "email": "not an email address"})
    assert "not an email" not in str(refused.value)
    assert str(refused.value).endswith('$.email: value not shown (x-gdpr-sensitive), fails "format": "email"')


def test_long_error_lists_are_cut_to_one_line() -> None:
    err = SchemaViolationError(URN, [f"$.f{i}: bad" for i in range(5)])
    assert str(err) == "schema: $.f0: bad; $.f1: bad; $.f2: bad (and 2 more)"
    assert len(err.errors) == 5


def test_bad_registry_is_a_configuration_error() -> None:
    with pytest.raises(
        ConfigurationError, match=r"registry: must be a babelq\.schema\.SchemaRegistry, got dict"
    ):
        CheckSchema({URN: SCHEMA})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="registry:"):
        CheckSchemaOnPublish(None)  # type: ignore[arg-type]


def test_the_check_sees_what_earlier_middleware_passed_on(registry: SchemaRegistry, tmp_path: Path) -> None:
    """The agreed order: a decrypting middleware before the check, so the check sees cleartext."""

    def decrypt(message: Message, call_next: Any) -> Any:
        data = dict(message.data)
        data["amount"] = int(data["amount"].removeprefix("enc:"))
        return call_next(message.with_data(data))

    seen: list[Message] = []
    app = App(
        f"sqlite:///{tmp_path}/q.db",
        queue="q",
        poll_timeout=0.05,
        middleware=[decrypt, CheckSchema(registry)],
    )
    app.register(URN, seen.append)
    app.publish(URN, {"order_id": "A", "amount": "enc:5"})  # would break the schema as received
    app.publish(URN, {"order_id": "B", "amount": "enc:-1"})
    app.run_until_empty(timeout=10)
    assert [m.data["amount"] for m in seen] == [5]
    assert app.stats()["schema_invalid"] == 1
    app.close()


def test_agreed_order_with_gdpr_validates_cleartext_both_ways(tmp_path: Path) -> None:
    """publish: schema check -> protect; consume: unprotect -> schema check. The marked field is
    ``format: email``: its ciphertext would fail, so passing proves the check saw cleartext."""
    pytest.importorskip("cryptography")
    from babelq.gdpr import AesGcmCipher, Keyring, generate_key
    from babelq.gdpr.middleware import ProtectFields, UnprotectFields

    reg = SchemaRegistry()
    reg.register(URN, SCHEMA)
    cipher = AesGcmCipher(Keyring.parse("k1:" + generate_key()))
    seen: list[Message] = []
    url = f"sqlite:///{tmp_path}/q.db"
    app = App(
        url,
        queue="q",
        poll_timeout=0.05,
        publish_middleware=[CheckSchemaOnPublish(reg), ProtectFields(reg, cipher)],
        middleware=[UnprotectFields(reg, cipher), CheckSchema(reg)],
    )
    app.register(URN, seen.append)
    app.publish(URN, {"order_id": "A", "amount": 1, "email": "ann@example.org"})
    with pytest.raises(SchemaViolationError, match=r"\$\.email"):
        app.publish(URN, {"order_id": "B", "amount": 1, "email": "ann at example"})  # refused in cleartext
    [stored] = app.transport.reserve("q", max_messages=5)
    assert b"ann@example.org" not in stored.body  # the broker holds ciphertext
    app.transport.release(stored)
    app.run_until_empty(timeout=10)
    assert [m.data["email"] for m in seen] == ["ann@example.org"]
    assert app.stats().get("schema_invalid", 0) == 0 and app.stats()["handled"] == 1
    app.close()
