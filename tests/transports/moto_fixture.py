"""A session-wide moto SQS server on a free 127.0.0.1 port, over real HTTP.

The SQS transport is exercised through boto3 and HTTP exactly as against AWS; only the
endpoint differs. moto is slow here (tens of requests per second), so SQS tests stay few and
small. Import the fixtures into a test module with
``from transports.moto_fixture import sqs_endpoint, sqs_url  # noqa: F401``.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest

REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_listening(port: int, within: float = 20.0) -> None:
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"moto server did not start on port {port}")


@pytest.fixture(scope="session")
def sqs_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a moto server for this test session."""
    server_module = pytest.importorskip("moto.server")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    port = _free_port()
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    _wait_listening(port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sqs_url(sqs_endpoint: str) -> str:
    """The transport URL for the moto server (credentials are moto's dummies)."""
    return (
        f"sqs://?endpoint_url={sqs_endpoint}&region={REGION}"
        "&aws_access_key_id=testing&aws_secret_access_key=testing"
    )
