"""GDPR field encryption end to end: the broker stores ciphertext, the handler reads cleartext.

    python examples/gdpr_fields.py

Uses a throw-away SQLite broker and a key generated for the run; in production the keys come
from BABELQ_GDPR_KEYS or BABELQ_GDPR_KEY_FILE (see docs/gdpr.md).
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

from babelq.gdpr import generate_key, load_cipher
from babelq.gdpr.middleware import ProtectFields, UnprotectFields
from babelq.runtime import App, Message
from babelq.schema import SchemaRegistry

URN = "urn:babel:customers:registered"
SCHEMA = {
    "type": "object",
    "required": ["customer_id", "email"],
    "properties": {
        "customer_id": {"type": "integer"},
        "email": {"type": "string", "x-gdpr-sensitive": True},
        "addresses": {"type": "array", "items": {"properties": {"line": {"x-gdpr-sensitive": True}}}},
    },
}


def main() -> None:
    os.environ.setdefault("BABELQ_GDPR_KEYS", "2026-11:" + generate_key())  # for the demo only
    registry = SchemaRegistry()
    registry.register(URN, SCHEMA)
    cipher = load_cipher()  # a missing or malformed key configuration fails here, at startup

    db = Path(tempfile.mkdtemp()) / "broker.db"
    app = App(
        f"sqlite:///{db}",
        queue="customers",
        publish_middleware=[ProtectFields(registry, cipher)],
        middleware=[UnprotectFields(registry, cipher)],
    )

    @app.handler(URN)
    def registered(message: Message) -> None:
        print("handler sees:", dict(message.data))

    with app:
        app.publish(
            URN, {"customer_id": 7, "email": "ada@example.com", "addresses": [{"line": "12 Byron St"}]}
        )
        with sqlite3.connect(db) as conn:
            [(body,)] = conn.execute("SELECT body FROM babelq_messages").fetchall()
        print("broker stores: ", bytes(body).decode())
        assert b"ada@example.com" not in bytes(body) and b"Byron" not in bytes(body)
        app.drain(timeout=5)


if __name__ == "__main__":
    main()
