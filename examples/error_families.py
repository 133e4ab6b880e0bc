"""babelq's error families: what to catch, and what the worker does with each.

    python examples/error_families.py

Uses a throw-away SQLite broker. A wrong option is a ConfigurationError; the broker being
unusable (here: another process holds the database's write lock) is an UnavailableError raised
by the transport itself, with sqlite3's error as its cause; a handler whose own dependency is
down raises UnavailableError too, and the worker puts the message back without spending an
attempt. Every class is in babelq.errors (see docs/errors.md).
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from babelq.errors import BabelqError, ConfigurationError, UnavailableError
from babelq.runtime import App, Message
from babelq.transports import open_transport

URN = "urn:babel:orders:created"


def main() -> None:
    path = Path(tempfile.mkdtemp()) / "broker.db"

    try:
        open_transport(f"sqlite://{path}?busy_timout=1")  # misspelt option
    except ConfigurationError as wrong:
        print("configuration:", wrong)

    app = App(f"sqlite://{path}?busy_timeout=0", queue="orders", poll_timeout=0.05, unavailable_delay_ms=0)
    calls: list[int] = []

    @app.handler(URN)
    def on_created(message: Message) -> None:
        calls.append(message.attempts)
        if len(calls) == 1:  # this handler's own dependency is down: not the message's fault
            refused = ConnectionRefusedError(111, "Connection refused")
            raise UnavailableError("inventory service unreachable") from refused

    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing: the broker is unusable for now
    try:
        app.publish(URN, {"order_id": "A-1"})
    except UnavailableError as down:
        cause = type(down.__cause__).__name__
        print("unavailable:", cause, "| a BabelqError:", isinstance(down, BabelqError))
    holder.execute("ROLLBACK")
    holder.close()

    app.publish(URN, {"order_id": "A-1"})
    app.run_until_empty(timeout=10)
    counts = app.counters.snapshot()
    print("put back:", counts.get("unavailable", 0), "| retried:", counts.get("retried", 0))
    print("attempts seen by the handler:", calls)  # the put-back cost no attempt
    app.close()


if __name__ == "__main__":
    main()
