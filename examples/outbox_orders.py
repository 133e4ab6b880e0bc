"""Transactional outbox, end to end: an order and its event commit together, a relay publishes.

    python examples/outbox_orders.py                 # SQLite for the orders, the outbox and the broker
    python examples/outbox_orders.py postgresql://postgres@127.0.0.1:5432/test redis://127.0.0.1:6379/0

1. The shop saves an order and adds `urn:babel:orders:created` to the outbox in ONE transaction;
   a second order fails validation after its outbox add and is rolled back: no event exists.
2. The relay publishes what committed (a killed relay would publish it again: the consumer
   below deduplicates on meta.id, so the effect stays once).
3. A consumer reads the queue through babelq.idempotency.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from babelq.envelope import decode, make
from babelq.idempotency import MemoryStore, wrap
from babelq.outbox import Outbox, Relay

work = Path(tempfile.mkdtemp(prefix="outbox-example-"))
DB = sys.argv[1] if len(sys.argv) > 1 else f"sqlite://{work}/shop.db"
BROKER = sys.argv[2] if len(sys.argv) > 2 else f"sqlite://{work}/broker.db"
TABLE = "example_outbox"


MARK = "%s" if DB.startswith("postgresql://") else "?"  # the driver's parameter placeholder


def connect() -> Any:
    if DB.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(DB)
    return sqlite3.connect(DB.removeprefix("sqlite://"))


outbox = Outbox.init(DB, table=TABLE)  # same as: babelq outbox init URL --table example_outbox
db = connect()
db.execute("CREATE TABLE IF NOT EXISTS example_orders (id BIGINT PRIMARY KEY, total_cents BIGINT NOT NULL)")
db.execute("DELETE FROM example_orders")
db.commit()


def place_order(order_id: int, total_cents: int) -> None:
    """The business write and its event: both commit, or neither does."""
    try:
        db.execute(f"INSERT INTO example_orders VALUES ({MARK}, {MARK})", (order_id, total_cents))
        data = {"order_id": order_id, "total_cents": total_cents}
        event = make("urn:babel:orders:created", data, queue="orders")
        outbox.add(db, event)
        if total_cents <= 0:
            raise ValueError("an order must cost something")
        db.commit()
        print(f"order {order_id}: committed with its event {event.id}")
    except ValueError as exc:
        db.rollback()
        print(f"order {order_id}: rolled back ({exc}), its event with it")


place_order(1042, 12_990)
place_order(1043, 0)
place_order(1044, 4_500)

with Relay(DB, BROKER, table=TABLE, batch=100) as relay:  # or: babelq relay --outbox DB --broker BROKER
    print("relay:", relay.drain().as_dict())
    print("outbox:", relay.store.counts())

    effects: list[int] = []
    handle = wrap(MemoryStore(), lambda env: effects.append(env.data["order_id"]))
    while deliveries := relay.transport.reserve("orders", max_messages=10):
        for delivery in deliveries:
            handle(decode(delivery.body))
            relay.transport.ack(delivery)
    print("consumer handled orders:", effects)
    relay.store.prune(-1)  # leave the example's tables empty
db.execute("DROP TABLE example_orders")
db.commit()
db.close()
