"""Features: the feature middleware composed once, in the order the features are designed for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import decode, dlq_name, make
from babelq.errors import ConfigurationError
from babelq.features import Features
from babelq.gdpr import AesGcmCipher, Keyring, generate_key
from babelq.idempotency import MemoryStore
from babelq.runtime import App, Backoff
from babelq.runtime.message import Message
from babelq.schema import SchemaRegistry
from babelq.schema.errors import SchemaViolationError

URN = "urn:babel:customers:registered"
SCHEMA = {
    "type": "object",
    "required": ["email", "plan"],
    "properties": {
        # a format the ciphertext would fail: the check must see cleartext on both sides
        "email": {"type": "string", "format": "email", "pattern": "@", "x-gdpr-sensitive": True},
        "plan": {"type": "string", "enum": ["free", "pro"]},
    },
}


@pytest.fixture
def schemas() -> SchemaRegistry:
    reg = SchemaRegistry()
    reg.register(URN, SCHEMA)
    return reg


def _app(tmp_path: Path, features: Features) -> App:
    return features.install(App(f"sqlite:///{tmp_path}/q.db", queue="customers", backoff=Backoff(base_ms=0)))


def test_the_chains_are_built_in_the_designed_order(schemas: SchemaRegistry) -> None:
    cipher = AesGcmCipher(Keyring.parse("k1:" + generate_key()))
    features = Features(schemas=schemas, cipher=cipher, idempotency=MemoryStore())
    assert [type(m).__name__ for m in features.consume()] == [
        "IdempotencyMiddleware", "UnprotectFields", "CheckSchema"
    ]
    assert [type(m).__name__ for m in features.publish()] == ["CheckSchemaOnPublish", "ProtectFields"]
    assert Features().consume() == [] and Features().publish() == []


def test_protected_on_the_broker_checked_and_clear_in_the_handler(
    tmp_path: Path, schemas: SchemaRegistry
) -> None:
    cipher = AesGcmCipher(Keyring.parse("k1:" + generate_key()))
    seen: list[dict[str, Any]] = []
    with _app(tmp_path, Features(schemas=schemas, cipher=cipher, idempotency=MemoryStore())) as app:
        app.register(URN, lambda m: seen.append(dict(m.data)))
        app.publish(URN, {"email": "ada@example.com", "plan": "pro"})
        with pytest.raises(SchemaViolationError, match=r"\$\.plan"):
            app.publish(URN, {"email": "bob@example.com", "plan": "gold"})
        [held] = app.transport.reserve("customers")
        stored = decode(held.body)
        assert stored.data["plan"] == "pro" and "ada@example.com" not in held.body.decode()
        app.transport.release(held)
        # the same message again (a redelivered copy) is skipped by idempotency, not handled twice
        app.transport.publish("customers", held.body)
        app.drain(timeout=5)
    assert seen == [{"email": "ada@example.com", "plan": "pro"}]


def test_bad_data_from_elsewhere_is_dead_lettered_after_unprotect(
    tmp_path: Path, schemas: SchemaRegistry
) -> None:
    cipher = AesGcmCipher(Keyring.parse("k1:" + generate_key()))
    handled: list[Message] = []
    with _app(tmp_path, Features(schemas=schemas, cipher=cipher)) as app:
        app.register(URN, handled.append)
        # a foreign producer protected the email but sent a plan the schema refuses
        sealed = {"email": cipher.encrypt(b'"eve@example.com"'), "plan": "gold"}
        app.transport.publish("customers", make(URN, sealed, queue="customers").encode())
        app.drain(timeout=5)
        [dead] = app.transport.reserve(dlq_name("customers"))
    assert handled == []
    block = decode(dead.body).dead_letter or {}
    assert block.get("cause") == "schema" and "$.plan" in str(block.get("error"))
    assert "eve@example.com" not in dead.body.decode()


def test_a_cipher_without_schemas_is_refused() -> None:
    cipher = AesGcmCipher(Keyring.parse("k1:" + generate_key()))
    with pytest.raises(ConfigurationError, match="cipher: needs schemas"):
        Features(cipher=cipher)
