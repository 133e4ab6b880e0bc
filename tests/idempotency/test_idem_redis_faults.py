"""RedisStore when the server misbehaves: outages and lost replies, through a TCP proxy."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from babelq.errors import UnavailableError
from babelq.idempotency.redis_store import RedisStore
from conftest import require_service
from runtime.faults import TcpProxy

pytestmark = pytest.mark.live

URL = "redis://127.0.0.1:6379/15"


@pytest.fixture
def prefix() -> Iterator[str]:
    require_service("redis")
    import redis

    value = f"t-idemf-{uuid.uuid4().hex[:12]}:"
    yield value
    client = redis.Redis.from_url(URL)
    keys = list(client.scan_iter(match=f"{value}*"))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    require_service("redis")
    with TcpProxy(("127.0.0.1", 6379)) as running:
        yield running


def test_an_outage_raises_unavailable_then_the_store_recovers(prefix: str, proxy: TcpProxy) -> None:
    import redis

    store = RedisStore(f"redis://127.0.0.1:{proxy.port}/15", prefix=prefix)
    assert store.claim("a")
    proxy.stop()
    with pytest.raises(UnavailableError) as caught:
        store.seen("a")
    assert isinstance(caught.value.__cause__, redis.RedisError)
    assert f"127.0.0.1:{proxy.port}" in str(caught.value)
    secret = RedisStore(f"redis://:s3cret@127.0.0.1:{proxy.port}/15", prefix=prefix)
    with pytest.raises(UnavailableError) as caught:
        secret.claim("b")
    assert "s3cret" not in str(caught.value) and "***" in str(caught.value)

    proxy.start()
    store.remember("a")  # the client reconnects by itself once the server is back
    assert store.seen("a")
    proxy.cut()
    assert store.seen("a"), "a dropped connection is retried once, transparently"
    store.close()


def test_a_claim_whose_reply_was_lost_is_recognised_as_ours(prefix: str, proxy: TcpProxy) -> None:
    store = RedisStore(f"redis://127.0.0.1:{proxy.port}/15", prefix=prefix)
    other = RedisStore(URL, prefix=prefix)
    assert not store.seen("warm-up")
    key = str(uuid.uuid4())
    proxy.lose_next_reply()
    assert store.claim(key), "SET NX took effect: the retry must find the claim ours"
    assert not other.claim(key)
    other.release(key)  # not its claim
    assert not other.claim(key)
    store.remember(key)
    assert other.seen(key)


def test_a_claim_held_when_the_connection_broke_is_reclaimed_on_retry(prefix: str, proxy: TcpProxy) -> None:
    store = RedisStore(f"redis://127.0.0.1:{proxy.port}/15", prefix=prefix)
    key = str(uuid.uuid4())
    assert store.claim(key)
    proxy.stop()
    with pytest.raises(UnavailableError):
        store.release(key)
    proxy.start()
    time.sleep(0.1)
    assert store.claim(key)
    assert not RedisStore(URL, prefix=prefix).claim(key)
