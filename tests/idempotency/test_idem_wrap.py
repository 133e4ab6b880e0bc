"""wrap(): keys, skip/run decisions, failure handling, claim semantics."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import pytest

from babelq.envelope import make
from babelq.idempotency import ClaimedElsewhereError, HandlerRun, MemoryStore, message_id, wrap


class SeenSet:
    """A store with only the three seen-set methods."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def seen(self, message_id: str) -> bool:
        return message_id in self.ids

    def remember(self, message_id: str) -> None:
        self.ids.add(message_id)

    def forget(self, message_id: str) -> None:
        self.ids.discard(message_id)


@dataclass
class RuntimeMessage:
    id: str


def test_default_key_reads_envelopes_objects_and_mappings() -> None:
    env = make("urn:babel:a:b", {})
    assert message_id(env) == env.id
    assert message_id(RuntimeMessage("m-1")) == "m-1"
    assert message_id({"meta": {"id": "m-2"}}) == "m-2"
    assert message_id({"meta": {"id": ""}}) is None
    assert message_id({"meta": {"id": "  "}}) is None
    assert message_id({"meta": {"id": 7}}) is None
    assert message_id({"meta": "x"}) is None
    assert message_id({}) is None
    assert message_id(object()) is None


@pytest.mark.parametrize("store_factory", [MemoryStore, SeenSet], ids=["claiming", "seen-set"])
def test_runs_once_and_returns_the_result(store_factory: type) -> None:
    calls: list[str] = []

    def handler(env: object) -> str:
        calls.append("x")
        return "charged"

    handle = wrap(store_factory(), handler)
    env = make("urn:babel:pay:charge", {"cents": 100})
    first, second = handle(env), handle(env)
    assert first == HandlerRun(True, "charged", env.id)
    assert second.skipped and second.result is None and second.key == env.id
    assert calls == ["x"]


@pytest.mark.parametrize("store_factory", [MemoryStore, SeenSet], ids=["claiming", "seen-set"])
def test_exception_leaves_the_id_unmarked(store_factory: type) -> None:
    store = store_factory()
    attempts: list[int] = []

    def handler(_env: object) -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("gateway timeout")

    handle = wrap(store, handler)
    env = make("urn:babel:pay:charge", {})
    for _ in range(2):
        with pytest.raises(RuntimeError):
            handle(env)
        assert not store.seen(env.id)
    assert handle(env).ran
    assert handle(env).skipped
    assert len(attempts) == 3


@pytest.mark.parametrize("store_factory", [MemoryStore, SeenSet], ids=["claiming", "seen-set"])
def test_missing_id_fails_open(store_factory: type) -> None:
    runs: list[int] = []
    handle = wrap(store_factory(), lambda _m: runs.append(1))
    for _ in range(3):
        outcome = handle({"meta": {}})
        assert outcome.ran and outcome.key is None
    assert len(runs) == 3


def test_custom_key() -> None:
    runs: list[str] = []
    handle = wrap(MemoryStore(), runs.append, key=lambda m: m.split(":")[0])
    handle("a:1")
    handle("a:2")
    handle("b:1")
    assert runs == ["a:1", "b:1"]


def test_forget_allows_a_rerun() -> None:
    store = MemoryStore()
    runs: list[int] = []
    handle = wrap(store, lambda _m: runs.append(1))
    msg = {"meta": {"id": "id-A"}}
    handle(msg)
    handle(msg)
    store.forget("id-A")
    handle(msg)
    assert len(runs) == 2


def test_in_flight_claim_elsewhere_raises_so_the_runtime_retries() -> None:
    store = MemoryStore()
    started, finish = threading.Event(), threading.Event()

    def slow(_m: object) -> None:
        started.set()
        assert finish.wait(10)

    first = threading.Thread(target=wrap(store, slow), args=({"meta": {"id": "id-A"}},))
    first.start()
    assert started.wait(10)
    with pytest.raises(ClaimedElsewhereError) as info:
        wrap(store, lambda _m: None)({"meta": {"id": "id-A"}})
    assert info.value.message_id == "id-A"
    finish.set()
    first.join(10)
    assert wrap(store, lambda _m: None)({"meta": {"id": "id-A"}}).skipped


class BrokenRemember(MemoryStore):
    def remember(self, message_id: str) -> None:
        raise ConnectionError("store down")


def test_a_failing_remember_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    handle = wrap(BrokenRemember(), lambda _m: "done")
    with caplog.at_level(logging.ERROR, logger="babelq.idempotency.wrap"):
        outcome = handle({"meta": {"id": "id-A"}})
    assert outcome.ran and outcome.result == "done"
    assert "failed to remember" in caplog.text


def test_base_exceptions_release_the_claim() -> None:
    store = MemoryStore()

    def interrupted(_m: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        wrap(store, interrupted)({"meta": {"id": "id-A"}})
    assert store.claim("id-A")
