"""RedisStore against the live server (unique key prefix per test)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from idem_contract import check_claim_lifecycle, check_seen_set, race

from babelq.errors import ConfigurationError
from babelq.idempotency import ClaimingStore, wrap
from babelq.idempotency.redis_store import RedisStore
from conftest import require_service

pytestmark = pytest.mark.live

URL = "redis://127.0.0.1:6379/15"


@pytest.fixture
def prefix() -> Iterator[str]:
    require_service("redis")
    import redis

    value = f"t-idem-{uuid.uuid4().hex[:12]}:"
    yield value
    client = redis.Redis.from_url(URL)
    keys = list(client.scan_iter(match=f"{value}*"))
    if keys:
        client.delete(*keys)
    client.close()


def test_contract(prefix: str) -> None:
    store = RedisStore(URL, prefix=prefix)
    assert isinstance(store, ClaimingStore)
    check_seen_set(store)
    check_claim_lifecycle(store)
    store.close()


def test_done_ids_expire_with_ttl(prefix: str) -> None:
    store = RedisStore(URL, prefix=prefix, ttl_ms=150)
    store.remember("a")
    assert store.seen("a")
    time.sleep(0.3)
    assert not store.seen("a")


def test_claims_expire(prefix: str) -> None:
    store = RedisStore(URL, prefix=prefix, claim_ttl_ms=150)
    assert store.claim("a")
    assert not store.claim("a")
    time.sleep(0.3)
    assert store.claim("a")


def test_keys_use_the_prefix(prefix: str) -> None:
    import redis

    store = RedisStore(URL, prefix=prefix)
    store.remember("m-1")
    assert redis.Redis.from_url(URL).get(f"{prefix}m-1") == b"done"


def test_decode_responses_client_works(prefix: str) -> None:
    import redis

    store = RedisStore(redis.Redis.from_url(URL, decode_responses=True), prefix=prefix)
    check_claim_lifecycle(store)


def test_wrap_over_redis(prefix: str) -> None:
    runs: list[int] = []
    handle = wrap(RedisStore(URL, prefix=prefix), lambda _m: runs.append(1))
    msg = {"meta": {"id": str(uuid.uuid4())}}
    assert handle(msg).ran
    assert handle(msg).skipped
    assert len(runs) == 1


def test_two_threads_racing_on_one_id(prefix: str) -> None:
    race(lambda: RedisStore(URL, prefix=prefix), threads=2, rounds=20)


def test_bad_ttl_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        RedisStore(URL, ttl_ms=0)
