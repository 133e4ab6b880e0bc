"""Redrive and replay end to end: a replayed message re-runs the handler's core, not its effects.

    python examples/replay_redrive.py

Uses a throw-away SQLite broker. Orders fail while the (pretend) warehouse is down and are
dead-lettered; after the fix, a dry run shows the plan, then a redrive puts them back marked as
replays: the handler books them again but does not email the customer a second time.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from babelq.pipelines.dlq import redrive_messages, selector
from babelq.runtime import App, Message
from babelq.runtime.replay import bypass_external_effects
from babelq.transports import open_transport

URN = "urn:babel:orders:created"


def main() -> None:
    broker = f"sqlite:///{Path(tempfile.mkdtemp()) / 'broker.db'}"
    warehouse_up = False
    booked: list[int] = []
    emails: list[int] = []

    app = App(broker, queue="orders", max_attempts=1, poll_timeout=0.05)

    @app.handler(URN)
    def on_created(message: Message) -> None:
        order = message.data["order_id"]
        if not message.is_replay():
            emails.append(order)  # the external effect fires before the failure below
        if not warehouse_up:
            raise RuntimeError("warehouse unreachable")
        booked.append(order)  # the idempotent core
        bypass_external_effects(lambda: print(f"  (first delivery of {order}: would notify the warehouse)"))

    for order in (1, 2):
        app.publish(URN, {"order_id": order})
    app.run_until_empty(timeout=10)
    print("after the outage: booked", booked, "emails sent", emails)

    transport = open_transport(broker)
    plan = redrive_messages(transport, "orders.dlq", selector(), dry_run=True)
    print("\n".join(plan.lines("orders.dlq")))

    warehouse_up = True
    done = redrive_messages(transport, "orders.dlq", selector())
    print("\n".join(done.lines("orders.dlq")))
    app.publish(URN, {"order_id": 3})  # a new order, not a replay
    app.run_until_empty(timeout=10)
    print("after the redrive: booked", sorted(booked), "emails sent", emails)
    transport.close()
    app.close()


if __name__ == "__main__":
    main()
