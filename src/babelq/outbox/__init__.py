"""Transactional outbox (docs/standard.md §8): a message commits or rolls back with the business data.

Producers write messages into an outbox table with :meth:`Outbox.add`, on their own database
connection and inside their own transaction; a :class:`Relay` (library loop, or
``babelq relay --outbox URL --broker URL``) publishes committed rows to the broker in batches
and marks them. SQLite and PostgreSQL (psycopg 3) are supported; several relays share one
PostgreSQL table (``FOR UPDATE SKIP LOCKED``).

>>> import sqlite3
>>> from babelq.envelope import make
>>> from babelq.outbox import Outbox
>>> db = sqlite3.connect(":memory:")
>>> outbox = Outbox()
>>> outbox.init_schema(db)
>>> with db:
...     outbox.add(db, make("urn:babel:orders:created", {"order_id": 1}), queue="orders")
1

See docs/outbox.md.
"""

from babelq.outbox.relay import Relay, RelayResult
from babelq.outbox.relay_store import PostgresRelayStore, RelayStore, SQLiteRelayStore, open_relay_store
from babelq.outbox.schema import DEFAULT_TABLE, FAILED, PENDING, PUBLISHED, init_schema
from babelq.outbox.writer import Outbox

__all__ = [
    "DEFAULT_TABLE",
    "FAILED",
    "PENDING",
    "PUBLISHED",
    "Outbox",
    "PostgresRelayStore",
    "Relay",
    "RelayResult",
    "RelayStore",
    "SQLiteRelayStore",
    "init_schema",
    "open_relay_store",
]
