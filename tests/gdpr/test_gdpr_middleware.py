"""The GDPR middleware in the App, on the SQLite transport (a real broker that needs no server)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import decode
from babelq.errors import ConfigurationError
from babelq.gdpr import ENV_KEY_FILE, ENV_KEYS, load_cipher
from babelq.gdpr.middleware import UNDECRYPTABLE, ProtectFields, UnprotectFields
from babelq.runtime import App, Backoff
from babelq.runtime.message import Message
from babelq.schema import SchemaRegistry

from .support import CLEARTEXTS, DATA, SCHEMA, URN, cipher_for, key_b64

OTHER_URN = "urn:babel:orders:created"


@pytest.fixture
def registry() -> SchemaRegistry:
    reg = SchemaRegistry()
    reg.register(URN, SCHEMA)
    return reg


def stored_bytes(db: Path) -> bytes:
    """Every body and header the SQLite broker holds, plus the raw database and WAL files."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT queue, body, coalesce(headers, '') FROM babelq_messages").fetchall()
    raw = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    return raw + b"".join(bytes(body) + str(h).encode() for _, body, h in rows)


def app_for(db: Path, registry: SchemaRegistry, publish_key: str, consume_keys: Any = None, **kw: Any) -> App:
    pub = cipher_for(("k1", publish_key))
    sub = pub if consume_keys is None else cipher_for(*consume_keys)
    kw.setdefault("backoff", Backoff(base_ms=0, jitter=False))
    return App(
        f"sqlite:///{db}",
        queue="customers",
        publish_middleware=[ProtectFields(registry, pub)],
        middleware=[UnprotectFields(registry, sub)],
        **kw,
    )


def test_handler_sees_cleartext_broker_stores_ciphertext(tmp_path: Path, registry: SchemaRegistry) -> None:
    db = tmp_path / "q.db"
    seen: list[Message] = []
    caller_data = json.loads(json.dumps(DATA))
    with app_for(db, registry, key_b64()) as app:
        app.register(URN, seen.append)
        app.publish(URN, caller_data)
        app.publish_many([(URN, DATA), (OTHER_URN, {"email": "no-schema@example.com"})])
        assert caller_data == DATA  # the caller's dict is not changed
        stored = stored_bytes(db)
        assert b"customer_id" in stored  # the scan sees the bodies
        assert not [c for c in CLEARTEXTS if c.encode() in stored]
        assert b"no-schema@example.com" in stored  # no schema, nothing marked: untouched
        app.register(OTHER_URN, lambda m: None)
        assert app.drain(timeout=10) == 3
    assert [dict(m.data) for m in seen] == [DATA, DATA]
    assert isinstance(seen[0].envelope.data["email"], str) and seen[0].envelope.data["email"] != DATA["email"]


def test_undecryptable_is_dead_lettered_once_with_reason(tmp_path: Path, registry: SchemaRegistry) -> None:
    db = tmp_path / "q.db"
    ran: list[Message] = []
    with app_for(db, registry, key_b64(), consume_keys=[("k2", key_b64()), ("k3", key_b64())]) as app:
        app.register(URN, ran.append)
        app.publish(URN, DATA)
        assert app.drain(timeout=10) == 1
        stats = app.stats()
        [body] = [b for _, b in _rows(db, "customers.dlq")]
    assert ran == [] and stats["dead_lettered"] == 1
    env = decode(body)
    block = env.to_dict()["dead_letter"]
    assert block["reason"] == "failed" and block["cause"] == UNDECRYPTABLE
    assert "any known key (tried 'k2', 'k3')" in block["error"] and block["error"].startswith("data.")
    assert not [c for c in CLEARTEXTS if c.encode() in body]


def test_retries_and_dead_letters_carry_ciphertext_only(tmp_path: Path, registry: SchemaRegistry) -> None:
    db = tmp_path / "q.db"
    attempts: list[Any] = []

    def failing(message: Message) -> None:
        attempts.append(message.data["email"])
        raise RuntimeError("downstream refused")

    with app_for(db, registry, key_b64(), max_attempts=3) as app:
        app.register(URN, failing)
        app.publish(URN, DATA)
        app.drain(timeout=20, wait_delayed=True)
        stored = stored_bytes(db)
        dlq = _rows(db, "customers.dlq")
    assert attempts == [DATA["email"]] * 3 and len(dlq) == 1
    assert not [c for c in CLEARTEXTS if c.encode() in stored]


def test_messages_published_from_a_handler_are_protected_too(
    tmp_path: Path, registry: SchemaRegistry
) -> None:
    db = tmp_path / "q.db"
    got: list[dict[str, Any]] = []
    with app_for(db, registry, key_b64()) as app:

        def forward(message: Message) -> None:
            if message.queue == "customers":
                app.send(message.child(URN, dict(message.data), queue="audit"))
            else:
                got.append(dict(message.data))

        app.register(URN, forward)
        app.publish(URN, DATA)
        app.drain(timeout=10)
        [(_, body)] = _rows(db, "audit")
        assert not [c for c in CLEARTEXTS if c.encode() in body]
        app.drain(timeout=10, queue="audit")
    assert got == [DATA]


def test_missing_or_bad_key_configuration_fails_at_startup(
    monkeypatch: pytest.MonkeyPatch, registry: SchemaRegistry
) -> None:
    monkeypatch.delenv(ENV_KEYS, raising=False)
    monkeypatch.delenv(ENV_KEY_FILE, raising=False)
    with pytest.raises(ConfigurationError, match=r"^no GDPR keys configured: set BABELQ_GDPR_KEYS"):
        UnprotectFields(registry, load_cipher())
    with pytest.raises(ConfigurationError, match=r"^cipher: must have encrypt"):
        ProtectFields(registry, object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^registry: must be a babelq.schema.SchemaRegistry"):
        UnprotectFields({URN: SCHEMA}, cipher_for(("k", key_b64())))  # type: ignore[arg-type]


def test_a_schema_registered_later_is_picked_up(tmp_path: Path) -> None:
    registry = SchemaRegistry()
    db = tmp_path / "q.db"
    with app_for(db, registry, key_b64()) as app:
        app.publish(URN, DATA)
        assert DATA["email"].encode() in stored_bytes(db)  # nothing marked yet
        registry.register(URN, SCHEMA)
        app.publish(URN, DATA)
        [_, (_, second)] = _rows(db, "customers")
        assert DATA["email"].encode() not in second


def _rows(db: Path, queue: str) -> list[tuple[str, bytes]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT queue, body FROM babelq_messages WHERE queue = ? ORDER BY id", (queue,))
        return [(q, bytes(b)) for q, b in rows.fetchall()]


BEYOND: dict[str, Any] = {
    "$defs": {"contact": {"type": "string", "x-gdpr-sensitive": True}},
    "properties": {
        "email": {"$ref": "#/$defs/contact"},
        "name": {"type": "string", "x-gdpr-sensitive": True},
    },
}
BEYOND_DATA = {"email": "ada.beyond@example.com", "name": "Ada Reachable"}


def _package_body(key: str) -> Any:
    """A body as the babelqueue package publishes BEYOND_DATA: ``name`` protected, ``email`` not."""
    import base64
    import copy

    from babelqueue import gdpr as bq_gdpr
    from babelqueue.codec import EnvelopeCodec

    from .support import ReferenceAesGcm

    theirs = copy.deepcopy(BEYOND_DATA)
    bq_gdpr.protect(theirs, BEYOND, ReferenceAesGcm(base64.b64decode(key)))
    assert theirs["email"] == BEYOND_DATA["email"] and theirs["name"] != BEYOND_DATA["name"]
    return decode(EnvelopeCodec.encode(EnvelopeCodec.make(URN, theirs, queue="customers")).encode())


def test_by_default_a_mark_beyond_the_reference_grammar_refuses_publish_and_reads_the_package(
    tmp_path: Path,
) -> None:
    from babelq.gdpr import ProtectError

    registry = SchemaRegistry()
    registry.register(URN, BEYOND)
    db, key = tmp_path / "q.db", key_b64()
    seen: list[Message] = []
    with App(f"sqlite:///{db}", queue="customers") as plain:
        plain.send(_package_body(key))
    with app_for(db, registry, key) as app:
        with pytest.raises(ProtectError, match=r"^data\.email: marked x-gdpr-sensitive through \$ref"):
            app.publish(URN, BEYOND_DATA)
        app.register(URN, seen.append)
        assert app.drain(timeout=10) == 1
        stats = app.stats()
    assert [dict(m.data) for m in seen] == [BEYOND_DATA] and stats["dead_lettered"] == 0
    assert [q for q, _ in _rows(db, "customers.dlq")] == []


def test_extended_paths_are_an_opt_in_on_both_middlewares(tmp_path: Path) -> None:
    from babelq.features import Features

    registry = SchemaRegistry()
    registry.register(URN, BEYOND)
    db, cipher = tmp_path / "q.db", cipher_for(("k1", key_b64()))
    seen: list[Message] = []
    with App(f"sqlite:///{db}", queue="customers",
             publish_middleware=[ProtectFields(registry, cipher, paths="extended")],
             middleware=[UnprotectFields(registry, cipher, paths="extended")]) as app:  # fmt: skip
        app.register(URN, seen.append)
        app.publish(URN, BEYOND_DATA)
        assert b"ada.beyond@example.com" not in stored_bytes(db)
        assert app.drain(timeout=10) == 1
    assert [dict(m.data) for m in seen] == [BEYOND_DATA]
    assert ProtectFields(registry, cipher).paths == UnprotectFields(registry, cipher).paths == "reference"
    extended = Features(schemas=registry, cipher=cipher, gdpr_paths="extended")
    assert [getattr(m, "paths", None) for m in extended.publish() + extended.consume()] == [
        None, "extended", "extended", None]  # fmt: skip
    with pytest.raises(ConfigurationError, match=r"^paths: must be 'reference' or 'extended', got 'all'$"):
        ProtectFields(registry, cipher, paths="all")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^paths: must be"):
        Features(schemas=registry, cipher=cipher, gdpr_paths="all")  # type: ignore[arg-type]
