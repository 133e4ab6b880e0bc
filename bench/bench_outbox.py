"""Outbox relay throughput: rows/s the relay publishes, next to a plain publish loop to the same broker.

Run: ``.venv/bin/python bench/bench_outbox.py [--rows N] [--batch B] [--rounds R] [--only sqlite-redis ...]``

For each outbox database (an SQLite file, the live PostgreSQL) and broker (the live Redis, an
SQLite queue file), in the same process run, rounds interleaved, best round kept:

* relay: N committed outbox rows published by :meth:`babelq.outbox.Relay.drain` in batches of B
  (claim -> ``publish_many`` -> mark published, one database transaction per batch);
* publish_many: the same N bodies published straight to the broker by ``publish_many`` in
  batches of B (what a producer without an outbox does, minus its own bookkeeping);
* publish loop: the same bodies, one ``publish`` call each.

The ratio columns say what the outbox's durability costs: relay rows/s over each plain rate.
The producer side (``Outbox.add_many`` of N rows in one business transaction) is shown too.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import BENCH_REDIS, format_rate, print_table
from babelq.envelope import Envelope, make
from babelq.outbox import Outbox, Relay
from babelq.transports import Outgoing, Transport, open_transport

PG = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = BENCH_REDIS


def _connect(url: str) -> Any:
    if url.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(url)
    return sqlite3.connect(url.removeprefix("sqlite://"))


def _fill(url: str, table: str, envelopes: list[Envelope], queue: str) -> float:
    """Commit every envelope into the outbox in one business transaction; returns the seconds."""
    outbox = Outbox(table=table)
    conn = _connect(url)
    try:
        started = time.perf_counter()
        outbox.add_many(conn, envelopes, queue=queue)
        conn.commit()
        return time.perf_counter() - started
    finally:
        conn.close()


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def bench_pair(outbox_url: str, broker_url: str, rows: int, batch: int, rounds: int) -> dict[str, float]:
    table = f"bench_outbox_{uuid.uuid4().hex[:8]}"
    queue = f"bench-outbox-{uuid.uuid4().hex[:8]}"
    Outbox.init(outbox_url, table=table)
    envelopes = [make("urn:babel:bench:outbox", {"n": i, "pad": "x" * 200}, queue=queue) for i in range(rows)]
    bodies = [e.encode() for e in envelopes]
    transport: Transport = open_transport(broker_url)
    relay = Relay(outbox_url, transport, table=table, batch=batch)
    best = {"add": float("inf"), "relay": float("inf"), "publish_many": float("inf"), "publish": float("inf")}

    def plain_many() -> None:
        for start in range(0, rows, batch):
            transport.publish_many(queue, [Outgoing(b) for b in bodies[start : start + batch]])

    def plain_loop() -> None:
        for b in bodies:
            transport.publish(queue, b)

    try:
        for _ in range(rounds):
            best["add"] = min(best["add"], _fill(outbox_url, table, envelopes, queue))
            seconds = _timed(relay.drain)
            assert transport.size(queue) == rows, "the relay published every row"
            best["relay"] = min(best["relay"], seconds)
            transport.purge(queue)
            relay.store.prune(-60_000)  # empty the table between rounds
            best["publish_many"] = min(best["publish_many"], _timed(plain_many))
            transport.purge(queue)
            best["publish"] = min(best["publish"], _timed(plain_loop))
            transport.purge(queue)
    finally:
        relay.close()
        transport.close()
        conn = _connect(outbox_url)
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.commit()
        conn.close()
    return {name: rows / seconds for name, seconds in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="pairs like sqlite-redis postgres-sqlite")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-outbox-"))
    outboxes = {"sqlite": f"sqlite://{tmp}/app.db", "postgres": PG}
    brokers = {"redis": REDIS, "sqlite": f"sqlite://{tmp}/broker.db"}
    table_rows = []
    for o_name, o_url in outboxes.items():
        for b_name, b_url in brokers.items():
            pair = f"{o_name}-{b_name}"
            if args.only and pair not in args.only:
                continue
            r = bench_pair(o_url, b_url, args.rows, args.batch, args.rounds)
            table_rows.append([
                f"outbox {o_name} -> broker {b_name}",
                format_rate(r["add"]),
                format_rate(r["relay"]),
                format_rate(r["publish_many"]),
                format_rate(r["publish"]),
                f"{r['relay'] / r['publish_many']:.2f}",
                f"{r['relay'] / r['publish']:.2f}",
            ])
    print(f"{args.rows} rows of ~300 bytes, batch {args.batch}, best of {args.rounds} rounds (rows/s)")
    print_table(
        ["pair", "add_many", "relay", "publish_many", "publish loop", "relay/many", "relay/loop"], table_rows
    )


if __name__ == "__main__":
    main()
