"""MemoryStore: the seen-set and claiming contracts, TTLs, thread safety."""

from __future__ import annotations

import pytest
from idem_contract import check_claim_lifecycle, check_seen_set, race

from babelq.idempotency import ClaimingStore, IdempotencyStore, MemoryStore


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_implements_both_protocols() -> None:
    store = MemoryStore()
    assert isinstance(store, IdempotencyStore)
    assert isinstance(store, ClaimingStore)


def test_seen_set_contract() -> None:
    check_seen_set(MemoryStore())


def test_claim_contract() -> None:
    check_claim_lifecycle(MemoryStore())


def test_done_ids_expire_after_ttl() -> None:
    clock = FakeClock()
    store = MemoryStore(ttl=10, clock=clock)
    store.remember("a")
    clock.now += 9.9
    assert store.seen("a")
    clock.now += 0.2
    assert not store.seen("a")
    assert store.claim("a")


def test_without_ttl_done_ids_stay() -> None:
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    store.remember("a")
    clock.now += 10**9
    assert store.seen("a")


def test_a_crashed_claim_expires() -> None:
    clock = FakeClock()
    store = MemoryStore(claim_ttl=30, clock=clock)
    assert store.claim("a")
    clock.now += 29
    assert not store.claim("a")
    clock.now += 2
    assert store.claim("a")


def test_expired_entries_are_swept() -> None:
    clock = FakeClock()
    store = MemoryStore(ttl=1, clock=clock)
    for i in range(5000):
        store.remember(f"id-{i}")
    clock.now += 2
    for i in range(5000):
        store.remember(f"new-{i}")
    assert len(store) == 5000
    assert len(store._entries) < 10000  # the sweep dropped expired ids


@pytest.mark.parametrize("bad", [{"ttl": 0}, {"ttl": -1}, {"claim_ttl": 0}])
def test_rejects_non_positive_ttls(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        MemoryStore(**bad)


def test_threads_racing_on_one_id_run_it_once() -> None:
    shared = MemoryStore()
    race(lambda: shared, threads=4, rounds=50)
