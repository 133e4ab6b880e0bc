"""A broker that is down surfaces from the transport itself as babelq's UnavailableError.

Each transport translates its client's errors where it calls the client, so the runtime (and
any caller) tells an outage from a bug without importing redis-py, botocore or sqlite3. A TCP
proxy in front of the real broker plays the outage: ``stop()`` cuts every connection and
refuses new ones.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from babelq.errors import ConfigurationError, SQSError, UnavailableError
from babelq.runtime.outage import is_unavailable
from babelq.transports import open_transport
from babelq.transports.base import Transport
from babelq.transports.sqlite import SQLiteTransport
from conftest import require_service
from runtime.faults import TcpProxy


@pytest.fixture
def queue() -> str:
    return f"outage-{uuid.uuid4().hex[:12]}"


def _down_then_unavailable(transport: Transport, proxy: TcpProxy, queue: str) -> UnavailableError:
    """Publish once through ``proxy``, stop it, and return what the next publish raises."""
    transport.publish(queue, b'{"n":1}')
    proxy.stop()
    with pytest.raises(UnavailableError) as caught:
        transport.publish(queue, b'{"n":2}')
    assert "\n" not in str(caught.value) and is_unavailable(caught.value)
    return caught.value


@pytest.fixture
def redis_proxy() -> Iterator[TcpProxy]:
    pytest.importorskip("redis")
    with TcpProxy(require_service("redis")) as proxy:
        yield proxy


@pytest.mark.live
def test_redis_down_is_unavailable(redis_proxy: TcpProxy, queue: str) -> None:
    import redis

    transport = open_transport(f"redis://127.0.0.1:{redis_proxy.port}/15")
    try:
        error = _down_then_unavailable(transport, redis_proxy, queue)
        assert isinstance(error.__cause__, redis.ConnectionError)
        with pytest.raises(UnavailableError):  # refused outright at open, too
            open_transport(f"redis://127.0.0.1:{redis_proxy.port}/15")
    finally:
        redis_proxy.start()
        transport.purge(queue)
        transport.close()


@pytest.mark.live
def test_rabbitmq_down_is_unavailable(queue: str) -> None:
    with TcpProxy(require_service("rabbitmq")) as proxy:
        transport = open_transport(f"amqp://guest:guest@127.0.0.1:{proxy.port}/?retry_delay=0")
        try:
            error = _down_then_unavailable(transport, proxy, queue)
            assert not isinstance(error, ConfigurationError)
            with pytest.raises(UnavailableError):
                transport.reserve(queue, timeout=0.1)
        finally:
            transport.close()
    cleanup = open_transport("amqp://guest:guest@127.0.0.1:5672/")
    cleanup.delete_queues(queue)  # type: ignore[attr-defined]
    cleanup.close()


@pytest.mark.live
def test_sqs_down_is_unavailable_not_a_botocore_error(sqs_endpoint: str, queue: str) -> None:
    botocore = pytest.importorskip("botocore.exceptions")
    port = int(sqs_endpoint.rsplit(":", 1)[1])
    with TcpProxy(("127.0.0.1", port)) as proxy:
        transport = open_transport(
            f"sqs://?endpoint_url=http://127.0.0.1:{proxy.port}&region=eu-west-1"
            "&aws_access_key_id=testing&aws_secret_access_key=testing"
        )
        try:
            error = _down_then_unavailable(transport, proxy, queue)
            assert isinstance(error.__cause__, botocore.EndpointConnectionError)
            assert f"127.0.0.1:{proxy.port}" in str(error)
            with pytest.raises(UnavailableError):
                transport.reserve(queue)
        finally:
            proxy.start()
            transport.delete_queues([queue])  # type: ignore[attr-defined]
            transport.close()


@pytest.mark.live
def test_sqs_refusing_a_request_is_an_sqs_error_with_its_code(sqs_url: str, queue: str) -> None:
    """A queue deleted behind the transport's back: SQS says no, which is neither an outage nor
    a setting of ours, so it counts as a failed attempt."""
    botocore = pytest.importorskip("botocore.exceptions")
    transport = open_transport(sqs_url)
    other = open_transport(sqs_url)
    try:
        transport.publish(queue, b'{"n":1}')
        other.delete_queues([queue])  # type: ignore[attr-defined]
        with pytest.raises(SQSError) as caught:
            transport.size(queue)
        assert not is_unavailable(caught.value)
        assert "NonExistentQueue" in caught.value.code or "QueueDoesNotExist" in caught.value.code
        assert isinstance(caught.value.__cause__, botocore.ClientError)
    finally:
        transport.close()
        other.close()


def test_sqlite_locked_by_another_process_mid_run_is_unavailable(tmp_path: Path, queue: str) -> None:
    """SQLite has no server to lose: its outage is another process holding the write lock."""
    transport = SQLiteTransport(tmp_path / "q.db", busy_timeout=0)
    holder = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    try:
        transport.publish(queue, b'{"n":1}')
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(UnavailableError, match="locked") as caught:
            transport.publish(queue, b'{"n":2}')
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        assert "\n" not in str(caught.value)
    finally:
        holder.close()
        transport.close()
