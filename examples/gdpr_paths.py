"""Which marked fields are protected: the reference path grammar by default, every mark on request.

    python examples/gdpr_paths.py

The schema marks ``email`` through a ``$ref``, which other SDKs' path grammar does not reach.
By default babelq refuses to publish it (neither leaking it in clear nor handing other SDKs
ciphertext they never decrypt); an App whose producers and consumers are all babelq opts in
with ``paths="extended"``. A throw-away SQLite broker and a generated key (see docs/gdpr.md).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from babelq.gdpr import ProtectError, generate_key, load_cipher
from babelq.gdpr.middleware import ProtectFields, UnprotectFields
from babelq.runtime import App, Message
from babelq.schema import SchemaRegistry

URN = "urn:babel:customers:registered"
SCHEMA = {
    "$defs": {"contact": {"type": "string", "x-gdpr-sensitive": True}},
    "type": "object",
    "properties": {
        "email": {"$ref": "#/$defs/contact"},
        "name": {"type": "string", "x-gdpr-sensitive": True},  # in reach of every SDK
        "*": {"type": "string", "x-gdpr-sensitive": True},  # the property named "*", nothing else
        "plan": {"type": "string"},
    },
}
DATA = {"email": "ada@example.com", "name": "Ada", "*": "starred", "plan": "gold"}


def main() -> None:
    os.environ.setdefault("BABELQ_GDPR_KEYS", "2026-11:" + generate_key())  # for the demo only
    registry = SchemaRegistry()
    registry.register(URN, SCHEMA)
    cipher = load_cipher()
    db = Path(tempfile.mkdtemp()) / "broker.db"

    default = ProtectFields(registry, cipher)
    with App(f"sqlite:///{db}", queue="customers", publish_middleware=[default]) as app:
        try:
            app.publish(URN, DATA)
        except ProtectError as exc:
            print("default paths refuse:", exc.field)

    with App(
        f"sqlite:///{db}",
        queue="customers",
        publish_middleware=[ProtectFields(registry, cipher, paths="extended")],
        middleware=[UnprotectFields(registry, cipher, paths="extended")],
    ) as app:

        @app.handler(URN)
        def registered(message: Message) -> None:
            print("broker held:", {k: ("…" if v != DATA[k] else v) for k, v in message.envelope.data.items()})
            print("handler sees:", dict(message.data))

        app.publish(URN, DATA)
        app.drain(timeout=10)


if __name__ == "__main__":
    main()
