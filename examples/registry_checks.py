"""A schema registry (registry.json) in a service: its schemas checked at publish and consume,
its personal-data marks encrypted on the broker, and a schema change checked before it ships.

    python examples/registry_checks.py

Reads examples/registry/registry.json (the registry format the other SDKs read) and uses a
throw-away SQLite broker and a key made for the run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from babelq.envelope import decode
from babelq.gdpr import AesGcmCipher, Keyring, generate_key
from babelq.gdpr.middleware import ProtectFields, UnprotectFields
from babelq.runtime import App, Message
from babelq.schema import CheckSchema, CheckSchemaOnPublish, SchemaRegistry, SchemaViolationError
from babelq.schema.compat import breaking_changes
from babelq.schema.masking import mask

REGISTRY = Path(__file__).resolve().parent / "registry"


def main() -> None:
    registry = SchemaRegistry.from_manifest(REGISTRY / "registry.json")
    entry = registry.entry("urn:babel:users:registered")
    print("loaded:", ", ".join(registry), "| users owned by", entry.owner if entry else None)

    cipher = AesGcmCipher(Keyring.parse(f"run:{generate_key()}"))
    broker = f"sqlite:///{Path(tempfile.mkdtemp()) / 'broker.db'}"
    app = App(
        broker,
        queue="users",
        publish_middleware=[CheckSchemaOnPublish(registry), ProtectFields(registry, cipher)],
        middleware=[UnprotectFields(registry, cipher), CheckSchema(registry)],
        poll_timeout=0.05,
    )

    @app.handler("urn:babel:users:registered")
    def on_registered(message: Message) -> None:
        print("handled:", mask(dict(message.data), registry.get(message.urn) or {}))

    user = {"user_id": 7, "email": "ann@example.org", "profile": {"full_name": "Ann Smith"}}
    app.publish("urn:babel:users:registered", user)
    try:
        app.publish("urn:babel:users:registered", {"user_id": "seven"})
    except SchemaViolationError as refused:
        print("refused:", refused)

    [waiting] = app.transport.reserve("users", max_messages=1)
    on_the_broker = decode(waiting.body).data["email"]
    print("email on the broker is ciphertext:", on_the_broker != user["email"])
    app.transport.release(waiting)  # back on the queue for the worker
    app.run_until_empty(timeout=10)

    current = registry.get("urn:babel:orders:created") or {}
    proposed = {**current, "required": [*current.get("required", []), "currency"]}
    for change in breaking_changes(current, proposed):
        print("breaking:", change)


if __name__ == "__main__":
    main()
