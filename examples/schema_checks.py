"""Schema checks in the runtime: bad data is refused at publish and dead-lettered at consume.

    python examples/schema_checks.py

Uses a throw-away SQLite broker. The producer's check refuses a bad publish with one line; a
message that reached the broker anyway (from a producer without the check) is dead-lettered
before the handler with the JSON path of each problem, never retried.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from babelq.envelope import decode, make
from babelq.runtime import App, Message
from babelq.schema import CheckSchema, CheckSchemaOnPublish, SchemaRegistry, SchemaViolationError

URN = "urn:babel:orders:created"
SCHEMA = {
    "type": "object",
    "required": ["order_id", "amount"],
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "integer", "minimum": 0},
    },
}


def main() -> None:
    registry = SchemaRegistry()
    registry.register(URN, SCHEMA)  # or registry.load("schemas/")

    broker = f"sqlite:///{Path(tempfile.mkdtemp()) / 'broker.db'}"
    app = App(
        broker,
        queue="orders",
        publish_middleware=[CheckSchemaOnPublish(registry)],  # before GDPR protect, if used
        middleware=[CheckSchema(registry)],  # after GDPR unprotect, if used
        poll_timeout=0.05,
    )

    @app.handler(URN)
    def on_created(message: Message) -> None:
        print("handled", dict(message.data))

    app.publish(URN, {"order_id": "A-1", "amount": 500})
    try:
        app.publish(URN, {"order_id": "A-2", "amount": -5})
    except SchemaViolationError as refused:
        print("refused:", refused)

    # a producer without the check (another service, an old version) gets bad data onto the queue
    app.transport.publish("orders", make(URN, {"order_id": "A-3", "amount": -5}, queue="orders").encode())

    app.run_until_empty(timeout=10)
    [dead] = app.transport.reserve("orders.dlq", max_messages=10)
    block = decode(dead.body).dead_letter or {}
    print("dead-lettered:", block["reason"], block["cause"], "|", block["error"])
    print("attempts when dead-lettered:", block["attempts"])
    print("stats:", {k: v for k, v in app.stats().items() if k in ("handled", "schema_invalid", "retried")})
    app.close()


if __name__ == "__main__":
    main()
