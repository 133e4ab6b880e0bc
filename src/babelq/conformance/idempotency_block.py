"""The ``idempotency`` block: the dedupe key and the delivery sequences.

Every sequence is replayed twice through :func:`babelq.idempotency.wrap` over a
:class:`~babelq.idempotency.MemoryStore`: once using its atomic claim (the path a fleet
takes) and once as a plain seen-set (``[seen-set]``), so both code paths honour the contract.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from babelq.conformance.result import Recorder
from babelq.conformance.suite import Suite, SuiteError
from babelq.envelope import Envelope, decode, uuid4
from babelq.idempotency import IdempotencyStore, MemoryStore, message_id, wrap

_BASE_DOCUMENT: dict[str, Any] = {
    "job": "urn:babel:conformance:idempotency.checked",
    "trace_id": "00000000-0000-4000-8000-000000000000",
    "data": {},
    "meta": {"id": "", "queue": "conformance", "lang": "python", "schema_version": 1, "created_at": 0},
    "attempts": 0,
}


class _ThrownError(Exception):
    """The handler outcome 'throw'."""


class _SeenSetOnly:
    """A MemoryStore seen only through the three seen-set methods (no claim)."""

    def __init__(self) -> None:
        self._inner = MemoryStore()

    def seen(self, message_id: str) -> bool:
        return self._inner.seen(message_id)

    def remember(self, message_id: str) -> None:
        self._inner.remember(message_id)

    def forget(self, message_id: str) -> None:
        self._inner.forget(message_id)


def _delivery(meta_id: object) -> Envelope:
    """An accepted envelope whose meta.id is ``meta_id`` (key left out when it is None), as bytes in."""
    doc = json.loads(json.dumps(_BASE_DOCUMENT))
    if meta_id is None:
        del doc["meta"]["id"]
    else:
        doc["meta"]["id"] = meta_id
    return decode(json.dumps(doc).encode("utf-8"))


def _replay(store: IdempotencyStore, case: Mapping[str, Any]) -> list[str]:
    """Replay one sequence; returns the problems found."""
    deliveries = case.get("deliveries")
    if not isinstance(deliveries, list) or not deliveries:
        return ["'deliveries' must be a non-empty list"]
    outcome = {"next": "ok"}
    runs = 0

    def handler(_message: Envelope) -> None:
        nonlocal runs
        runs += 1
        if outcome["next"] == "throw":
            raise _ThrownError

    handle = wrap(store, handler)
    problems: list[str] = []
    for index, delivery in enumerate(deliveries):
        if not isinstance(delivery, Mapping):
            problems.append(f"delivery {index} is not an object")
            continue
        meta_id = delivery.get("meta_id")
        if delivery.get("forget_before") and isinstance(meta_id, str) and meta_id:
            store.forget(meta_id)
        outcome["next"] = str(delivery.get("outcome", "ok"))
        before = runs
        with contextlib.suppress(_ThrownError):
            handle(_delivery(meta_id))
        effect = "run" if runs > before else "skip"
        if effect != delivery.get("expect_effect"):
            wanted = delivery.get("expect_effect")
            problems.append(f"delivery {index} ({meta_id!r}): expected {wanted}, got {effect}")
    expected = case.get("expected_effects")
    if runs != expected:
        problems.append(f"expected_effects {expected!r}, handler ran {runs} times")
    return problems


def _sequences(out: Recorder, block: Mapping[str, Any]) -> None:
    cases = block.get("cases")
    if not isinstance(cases, list) or not cases:
        out.check("sequences/cases", False, "'sequences.cases' must be a non-empty list")
        return
    for index, case in enumerate(cases):
        if not isinstance(case, Mapping):
            out.check(f"sequences/#{index}", False, "a sequence must be an object")
            continue
        name = case.get("name", f"#{index}")
        for label, store in (("", MemoryStore()), ("[seen-set]", _SeenSetOnly())):
            problems = _replay(store, case)
            out.check(f"sequences/{name}{label}", not problems, "; ".join(problems))


def _dedup_key(suite: Suite, out: Recorder, block: Mapping[str, Any]) -> None:
    key_field = block.get("key_field")
    if key_field != "meta.id":
        asked = f"babelq deduplicates on meta.id; the suite asks for {key_field!r}"
        out.check("dedup_key/key_field", False, asked)
        return
    raw = suite.read(block.get("envelope_file"))
    env = decode(raw)
    out.equal("dedup_key/key", message_id(env), block.get("expected_key"))
    key_is_trace = message_id(env) == env.trace_id
    out.check("dedup_key/not-trace-id", not key_is_trace, "the key equals trace_id" if key_is_trace else "")
    runs: list[str] = []

    def handler(message: Envelope) -> None:
        runs.append(message.id)

    handle = wrap(MemoryStore(), handler)
    handle(decode(raw))
    handle(decode(raw))  # the byte-identical redelivery
    out.check("dedup_key/redelivery-one-effect", len(runs) == 1, f"handler ran {len(runs)} times, expected 1")
    doc = json.loads(raw)
    doc["meta"]["id"] = uuid4()  # same trace, another message
    handle(decode(json.dumps(doc)))
    ran = f"handler ran {len(runs)} times, expected 2"
    out.check("dedup_key/same-trace-distinct-ids", len(runs) == 2, ran)


def run(suite: Suite, out: Recorder, block: object) -> None:
    if not isinstance(block, Mapping):
        out.check("manifest", False, "the idempotency block must be an object")
        return
    for key, sub in block.items():
        if key == "description":
            continue
        if not isinstance(sub, Mapping):
            out.check(f"{key}/manifest", False, f"idempotency.{key} must be an object")
        elif key == "dedup_key":
            try:
                _dedup_key(suite, out, sub)
            except SuiteError as exc:
                out.check("dedup_key/fixture", False, str(exc))
        elif key == "sequences":
            _sequences(out, sub)
        else:
            unknown = f"unknown idempotency sub-block {key!r}: this runner cannot check it"
            out.check(f"{key}/unknown", False, unknown)
