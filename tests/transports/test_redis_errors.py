"""What the Redis transport says when Redis is unreachable, refuses our password, or goes away.

An outage must be told apart from a bad message (the runtime puts a message back on
:class:`~babelq.errors.UnavailableError` instead of retrying it towards the DLQ), and a person
must get one line that names the target without its password. The wrong-password and
outage cases run against a throwaway ``redis-server`` on a free port started here, so the
machine's Redis on 6379 is never touched.
"""

from __future__ import annotations

import pickle
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from babelq.errors import ConfigurationError, UnavailableError
from babelq.transports import open_transport
from babelq.transports.redis import CONNECT_TIMEOUT, RedisTransport
from babelq.transports.redis_laravel import RedisLaravelTransport
from conftest import REQUIRE_LIVE, reachable, require_service

pytestmark = pytest.mark.live

PASSWORD = "n0t-for-your-eyes"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ThrowawayRedis:
    """A private ``redis-server`` (no persistence) on a free port; ``stop()`` is an outage."""

    def __init__(self, directory: Path, password: str | None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            message = "redis-server is not installed: cannot start a throwaway server"
            if REQUIRE_LIVE:
                pytest.fail(message)
            pytest.skip(message)
        self.port = _free_port()
        command = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", str(directory)]
        if password is not None:
            command += ["--requirepass", password]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 10
        while not reachable("127.0.0.1", self.port, timeout=0.2):
            if time.monotonic() > end or self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"throwaway redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


@pytest.fixture
def guarded_redis(tmp_path: Path) -> Iterator[ThrowawayRedis]:
    server = ThrowawayRedis(tmp_path, PASSWORD)
    yield server
    server.stop()


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


def test_unreachable_redis_fails_at_open_with_one_redacted_line() -> None:
    with pytest.raises(UnavailableError) as caught:
        open_transport(f"redis://:{PASSWORD}@127.0.0.1:1/15")
    text = _one_line(caught.value)
    assert "redis://:***@127.0.0.1:1/15" in text and PASSWORD not in text
    assert "Connection refused" in text  # the driver's reason, kept
    assert isinstance(caught.value.__cause__, redis.ConnectionError)


def test_a_wrong_password_is_a_configuration_error(guarded_redis: ThrowawayRedis) -> None:
    url = f"redis://:wrong-{PASSWORD}@127.0.0.1:{guarded_redis.port}/15"
    with pytest.raises(ConfigurationError) as caught:
        open_transport(url)
    text = _one_line(caught.value)
    assert PASSWORD not in text and f"redis://:***@127.0.0.1:{guarded_redis.port}/15" in text
    assert "authentication" in text
    assert isinstance(caught.value.__cause__, redis.AuthenticationError)


def test_a_missing_password_is_a_configuration_error(guarded_redis: ThrowawayRedis) -> None:
    with pytest.raises(ConfigurationError, match="authentication"):
        RedisTransport(f"redis://127.0.0.1:{guarded_redis.port}/15")


def test_losing_redis_mid_run_raises_unavailable_with_the_driver_error_as_cause(
    guarded_redis: ThrowawayRedis,
) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{guarded_redis.port}/15"
    transport = RedisTransport(url)
    try:
        transport.publish("orders", b"one")
        [held] = transport.reserve("orders")
        guarded_redis.stop()
        calls: dict[str, Callable[[], object]] = {
            "publish": lambda: transport.publish("orders", b"two"),
            "reserve": lambda: transport.reserve("orders", timeout=0.2),
            "ack": lambda: transport.ack(held),
            "size": lambda: transport.size("orders"),
        }
        for name, call in calls.items():
            with pytest.raises(UnavailableError) as caught:
                call()
            text = _one_line(caught.value)
            assert name in text and PASSWORD not in text, text
            assert isinstance(caught.value.__cause__, redis.ConnectionError), name
    finally:
        transport.close()


def test_given_client_errors_name_its_address_without_the_password() -> None:
    client = redis.Redis.from_url(f"redis://:{PASSWORD}@127.0.0.1:1/15")
    transport = RedisTransport(client=client)  # a given client is the caller's: not pinged
    with pytest.raises(UnavailableError) as caught:
        transport.publish("orders", b"x")
    text = _one_line(caught.value)
    assert "127.0.0.1:1" in text and PASSWORD not in text
    transport.close()
    client.close()


def test_the_laravel_layout_follows_the_same_connection_rules() -> None:
    """Both layouts connect through babelq.transports.redis_connection: the same open-time
    error, given-client address, pickling refusal and use-after-close."""
    with pytest.raises(UnavailableError) as caught:
        open_transport(f"redis://:{PASSWORD}@127.0.0.1:1/15?laravel=1")
    text = _one_line(caught.value)
    assert "redis://:***@127.0.0.1:1/15" in text and PASSWORD not in text
    assert isinstance(caught.value.__cause__, redis.ConnectionError)
    client = redis.Redis.from_url(f"redis://:{PASSWORD}@127.0.0.1:1/15")
    transport = RedisLaravelTransport(client=client)
    with pytest.raises(UnavailableError) as caught:
        transport.purge("orders")
    assert "127.0.0.1:1" in str(caught.value) and PASSWORD not in str(caught.value)
    with pytest.raises(TypeError, match="a RedisLaravelTransport built around a given client"):
        pickle.dumps(transport)
    transport.close()
    with pytest.raises(ConfigurationError, match="used after close"):
        transport.publish("orders", b"x")
    client.close()


def test_a_connect_timeout_is_set_unless_the_url_gives_one() -> None:
    """A blackholed host must not hang an open for the OS's minutes-long connect timeout."""
    host, port = require_service("redis")
    for query, expected in (("", CONNECT_TIMEOUT), ("?socket_connect_timeout=2.5", 2.5)):
        transport = open_transport(f"redis://{host}:{port}/15{query}")
        try:
            assert isinstance(transport, RedisTransport)
            assert transport.client.connection_pool.connection_kwargs["socket_connect_timeout"] == expected
        finally:
            transport.close()
