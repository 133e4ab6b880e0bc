"""Behaviour every claiming idempotency store must show; the store tests call these."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

from babelq.idempotency import ClaimedElsewhereError, ClaimingStore, wrap


def fresh_id() -> str:
    return str(uuid.uuid4())


def check_seen_set(store: ClaimingStore) -> None:
    key = fresh_id()
    assert not store.seen(key)
    store.remember(key)
    assert store.seen(key)
    store.forget(key)
    assert not store.seen(key)
    store.forget(key)  # forgetting an absent id is fine


def check_claim_lifecycle(store: ClaimingStore) -> None:
    key = fresh_id()
    assert store.claim(key)
    assert not store.claim(key), "a second claim must fail while the first holds"
    assert not store.seen(key), "a claimed id is not done"
    store.release(key)
    assert store.claim(key), "a released id can be claimed again"
    store.remember(key)
    assert store.seen(key)
    assert not store.claim(key), "a done id cannot be claimed"
    store.release(key)
    assert store.seen(key), "release never undoes a done id"
    store.forget(key)
    assert store.claim(key)


def _race_once(stores: list[ClaimingStore], key: str) -> tuple[list[int], list[str]]:
    barrier = threading.Barrier(len(stores), timeout=10)
    effects: list[int] = []
    outcomes: list[str] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        def handler(_message: dict[str, object]) -> None:
            with lock:
                effects.append(index)
            time.sleep(0.005)  # keep the claim held while the other thread arrives

        handle = wrap(stores[index], handler)
        barrier.wait()
        try:
            label = "ran" if handle({"meta": {"id": key}}).ran else "skipped"
        except ClaimedElsewhereError:
            label = "claimed-elsewhere"
        with lock:
            outcomes.append(label)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(len(stores))]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=20)
    return effects, outcomes


def race(make_store: Callable[[], ClaimingStore], *, threads: int = 2, rounds: int = 10) -> None:
    """Threads, each with its own store handle, deliver the same id at once: one effect per id."""
    stores = [make_store() for _ in range(threads)]
    for _ in range(rounds):
        key = fresh_id()
        effects, outcomes = _race_once(stores, key)
        assert len(effects) == 1, (effects, outcomes)
        assert outcomes.count("ran") == 1, outcomes
        assert len(outcomes) == threads, outcomes
        assert stores[0].seen(key)
