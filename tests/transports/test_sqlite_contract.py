"""The transport contract against ``sqlite://`` (a fresh database file per test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from babelq.transports.sqlite import SQLiteTransport
from transports.contract import MakeTransport, TransportContract


@pytest.fixture
def make_transport(tmp_path: Path) -> Iterator[MakeTransport]:
    made: list[SQLiteTransport] = []

    def make(*, visibility_timeout: float | None = None) -> SQLiteTransport:
        lease = TestSQLiteContract.visibility_timeout if visibility_timeout is None else visibility_timeout
        t = SQLiteTransport(tmp_path / "queue.db", visibility_timeout=lease)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


class TestSQLiteContract(TransportContract):
    slack = 0.5  # a local store: an expired lease is visible at once
