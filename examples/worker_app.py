"""A small worker application: handlers per URN, idempotency, a downstream message.

Run it against any broker (the app itself is not bound to one):

    babelq worker --broker sqlite:///tmp/orders.db --queue orders --app worker_app:app   # from examples/

or in-process, publishing a few orders first:

    python examples/worker_app.py
"""

from __future__ import annotations

import logging

from babelq.idempotency import MemoryStore
from babelq.idempotency.middleware import IdempotencyMiddleware
from babelq.runtime import App, Backoff, Message, MessageContextFilter, PermanentError

log = logging.getLogger("orders")

app = App(
    queue="orders",
    concurrency=4,
    max_attempts=5,
    backoff=Backoff(base_ms=500, cap_ms=60_000),
    unknown_urn="dead_letter",
    middleware=[IdempotencyMiddleware(MemoryStore())],  # use a Redis/PostgreSQL store for a fleet
)


@app.handler("urn:babel:orders:created")
def order_created(message: Message) -> None:
    amount = message.data.get("amount_cents")
    if not isinstance(amount, int) or amount <= 0:
        raise PermanentError(f"amount_cents must be a positive integer, got {amount!r}", cause="validation")
    log.info("order %s for %d cents (attempt %d)", message.data["order_id"], amount, message.attempts)
    # Downstream messages continue the trace (same trace_id, new meta.id).
    app.publish("urn:babel:shipping:requested", {"order_id": message.data["order_id"]}, queue="shipping")


@app.handler("urn:babel:orders:cancelled")
def order_cancelled(message: Message) -> None:
    log.info("order %s cancelled", message.data["order_id"])


def main() -> None:
    handler = logging.StreamHandler()
    handler.addFilter(MessageContextFilter())
    handler.setFormatter(logging.Formatter("%(levelname)s trace=%(trace_id)s id=%(message_id)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    app.bind("memory://")
    app.publish("urn:babel:orders:created", {"order_id": 1, "amount_cents": 1999})
    app.publish("urn:babel:orders:created", {"order_id": 2, "amount_cents": -5})
    app.publish("urn:babel:orders:cancelled", {"order_id": 3})
    app.run_until_empty()
    log.info("stats: %s", {k: v for k, v in app.stats().items() if v})


if __name__ == "__main__":
    main()
