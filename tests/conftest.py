"""Shared fixtures.

Live services: a test that needs Redis, RabbitMQ, PostgreSQL... calls :func:`require_service`.
Locally an unreachable server skips the test with a loud reason; with ``BABELQ_REQUIRE_LIVE=1``
(set by ``.ci/run``) it fails instead, so CI proves every live test ran.

Spark: the ``spark`` fixture is one local SparkSession for the whole test session.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE_DIR = Path(__file__).resolve().parent / "conformance"
REQUIRE_LIVE = os.environ.get("BABELQ_REQUIRE_LIVE", "") not in ("", "0", "false", "no")

SERVICES = {
    "redis": ("127.0.0.1", 6379),
    "rabbitmq": ("127.0.0.1", 5672),
    "postgres": ("127.0.0.1", 5432),
}


def reachable(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_service(name: str) -> tuple[str, int]:
    """Skip (locally) or fail (CI) when the named service is not reachable."""
    host, port = SERVICES[name]
    if not reachable(host, port):
        message = f"LIVE SERVICE DOWN: {name} at {host}:{port} is not reachable"
        if REQUIRE_LIVE:
            pytest.fail(message + " (BABELQ_REQUIRE_LIVE is set, so this is a failure)")
        pytest.skip(message)
    return host, port


@pytest.fixture
def unique_queue(request: pytest.FixtureRequest) -> str:
    """A queue name no other test (or helper process) uses."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-").lower()
    return f"t-{stem}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession (local[2]) shared by every Spark test."""
    pytest.importorskip("pyspark")
    from babelq.spark.session import get_session

    session = get_session(app_name="babelq-tests", master="local[2]")
    yield session
    session.stop()
