"""Fixtures of the outbox tests: ``target`` (SQLite file or PostgreSQL table) x ``broker`` (Redis, SQLite)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from babelq.transports import open_transport

from .support import Target, broker_url, outbox_target


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    yield from outbox_target(request.param, tmp_path)


@pytest.fixture(params=["redis", "sqlite"])
def broker(request: pytest.FixtureRequest, tmp_path: Path, unique_queue: str) -> Iterator[str]:
    url = broker_url(request.param, tmp_path)
    yield url
    t = open_transport(url)
    try:
        t.purge(unique_queue)
    finally:
        t.close()
