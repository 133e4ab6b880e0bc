"""Helpers the outbox tests share: outbox databases, brokers, business connections, reading a queue back.

An outbox target is (url, table): an SQLite file in the test's directory, or a fresh table in
the live PostgreSQL ``test`` database (dropped afterwards). A broker is a URL: the live Redis,
or an SQLite queue file.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from babelq.envelope import Envelope, decode, make
from babelq.outbox import Outbox
from babelq.transports import Transport
from conftest import ROOT, require_service

PG = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/15"
BABELQ = [sys.executable, "-m", "babelq.cli.main"]


class Target:
    """An outbox database for one test."""

    def __init__(self, kind: str, url: str, table: str) -> None:
        self.kind = kind
        self.url = url
        self.table = table
        self.outbox = Outbox.init(url, table=table)

    def connect(self) -> Any:
        """A business connection, as an application would hold one (not autocommit)."""
        if self.kind == "sqlite":
            return sqlite3.connect(self.url.removeprefix("sqlite://"))
        import psycopg

        return psycopg.connect(self.url)

    def add(self, envelopes: list[Envelope], queue: str) -> list[int]:
        """Commit ``envelopes`` in one business transaction."""
        conn = self.connect()
        try:
            ids = self.outbox.add_many(conn, envelopes, queue=queue)
            conn.commit()
        finally:
            conn.close()
        return ids

    def rows(self, columns: str = "id, status, attempts, last_error") -> list[tuple[Any, ...]]:
        conn = self.connect()
        try:
            return [
                tuple(r) for r in conn.execute(f"SELECT {columns} FROM {self.table} ORDER BY id").fetchall()
            ]
        finally:
            conn.close()

    def statuses(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, status, *_ in self.rows():
            out[status] = out.get(status, 0) + 1
        return out


def outbox_target(kind: str, tmp_path: Path) -> Iterator[Target]:
    if kind == "sqlite":
        yield Target(kind, f"sqlite://{tmp_path}/app.db", "babelq_outbox")
        return
    require_service("postgres")
    import psycopg

    table = f"t_outbox_{uuid.uuid4().hex[:10]}"
    yield Target(kind, PG, table)
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def broker_url(kind: str, tmp_path: Path) -> str:
    if kind == "redis":
        require_service("redis")
        return REDIS
    return f"sqlite://{tmp_path}/broker.db"


def envelopes(n: int, queue: str, start: int = 0) -> list[Envelope]:
    return [make("urn:babel:orders:created", {"n": i}, queue=queue) for i in range(start, start + n)]


def read_all(transport: Transport, queue: str) -> list[bytes]:
    """Every body waiting on ``queue``, in order, taken off the queue."""
    out: list[bytes] = []
    while True:
        got = transport.reserve(queue, max_messages=500)
        if not got:
            return out
        out += [d.body for d in got]
        transport.ack_many(got)


def numbers(bodies: list[bytes]) -> list[int]:
    return [int(decode(b).data["n"]) for b in bodies]


def relay_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BABELQ, "relay", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
        env=env,
    )


def wait_for_start(proc: subprocess.Popen[str], within: float = 120.0) -> None:
    """Read the relay's stderr up to its start-up line (a relay signalled before it, still
    starting, would die without its summary)."""
    assert proc.stderr is not None
    end = time.monotonic() + within
    for line in proc.stderr:
        if "relay: publishing" in line:
            return
        assert time.monotonic() < end, "a relay did not start in time"
    raise AssertionError(f"a relay exited before it started (code {proc.wait()})")
