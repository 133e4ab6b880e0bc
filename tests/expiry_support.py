"""What the expiry tests share (tests/runtime/test_expiry_sweep.py, tests/cli/test_cli_expire.py):
reading a queue's bodies back (the brokers a sweep runs on: ``sweep_broker_url`` in tests/conftest.py)."""

from __future__ import annotations

from collections import Counter

import orjson

from babelq.transports.base import Transport


def drain(transport: Transport, queue: str) -> list[bytes]:
    """Every ready body of ``queue`` in delivery order (acked)."""
    bodies: list[bytes] = []
    while got := transport.reserve(queue, max_messages=100):
        bodies += [d.body for d in got]
        transport.ack_many(got)
    return bodies


def ids(bodies: list[bytes]) -> Counter[str]:
    return Counter(orjson.loads(b)["meta"]["id"] for b in bodies)
