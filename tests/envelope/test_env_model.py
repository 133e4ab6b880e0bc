"""The Envelope object: accessors, the verdict, and changes that keep everything else intact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import accepts, decode, make, rejection, urn_of
from babelq.envelope.model import Envelope
from babelq.errors import EnvelopeError

CONFORMANCE = Path(__file__).resolve().parent.parent / "conformance"
MANIFEST = json.loads((CONFORMANCE / "manifest.json").read_text(encoding="utf-8"))

TRACE = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"
MID = "f1e2d3c4-b5a6-4789-90ab-cdef01234567"


def _made(**kwargs: Any) -> Envelope:
    return make("urn:babel:orders:created", {"order_id": 1042}, queue="orders", trace_id=TRACE,
                message_id=MID, created_at=1_749_132_727_000, **kwargs)


def test_made_envelope_accessors_and_wire_form() -> None:
    env = _made(correlation_id="batch-7", sharding_key="acct-1", deliver_at=10, expire_at=20, priority=9,
                transaction_id="tx-1", meta={"ext": {"acme": 1}})
    assert (env.urn, env.trace_id, env.id, env.queue, env.lang) == (
        "urn:babel:orders:created", TRACE, MID, "orders", "python")
    assert (env.schema_version, env.created_at) == (1, 1_749_132_727_000)
    assert (env.attempts, env.dead_letter) == (0, None)
    assert (env.correlation_id, env.sharding_key, env.deliver_at, env.expire_at, env.priority,
            env.transaction_id) == ("batch-7", "acct-1", 10, 20, 9, "tx-1")
    assert env.data == {"order_id": 1042}
    assert env.raw is None
    assert env.accepts() and env.rejection() is None
    assert env.encode() == (
        f'{{"job":"urn:babel:orders:created","trace_id":"{TRACE}","data":{{"order_id":1042}},'
        f'"meta":{{"id":"{MID}","queue":"orders","lang":"python","schema_version":1,"created_at":1749132727000,'
        '"correlation_id":"batch-7","sharding_key":"acct-1","deliver_at":10,"expire_at":20,"priority":9,'
        '"transaction_id":"tx-1","ext":{"acme":1}},"attempts":0}'
    ).encode()


def test_minted_ids_are_distinct_v4_uuids_and_time_is_now() -> None:
    import time
    import uuid

    before = time.time_ns() // 1_000_000
    envs = [make("urn:babel:orders:created", {}) for _ in range(200)]
    after = time.time_ns() // 1_000_000
    ids = {e.id for e in envs} | {e.trace_id for e in envs}
    assert len(ids) == 400
    for value in ids:
        parsed = uuid.UUID(value)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and str(parsed) == value
    assert all(before <= (e.created_at or 0) <= after for e in envs)
    assert make("urn:babel:orders:created", {}, trace_id=TRACE).trace_id == TRACE


def test_priority_defaults_and_expiry() -> None:
    env = _made(expire_at=1000)
    assert env.priority == 5
    assert not env.is_expired(999) and env.is_expired(1000)
    assert not _made().is_expired(10**15)


@pytest.mark.parametrize("case", MANIFEST["cases"], ids=lambda c: c["name"])
def test_conformance_cases(case: dict[str, Any]) -> None:
    body = (CONFORMANCE / case["file"]).read_bytes()
    env = decode(body)
    assert env.accepts() is case["valid"]
    if not case["valid"]:
        assert env.rejection()
        return
    expect = case["expect"]
    assert (env.urn, env.data, env.attempts, env.lang, env.schema_version) == (
        expect["urn"], expect["data"], expect["attempts"], expect["lang"], expect["schema_version"])
    if "dead_letter" in expect:
        assert env.dead_letter is not None
        assert expect["dead_letter"].items() <= env.dead_letter.items()
    again = decode(env.encode())
    assert again == env.with_attempts(env.attempts) and again.urn == expect["urn"]


UNKNOWN_KEYS = (
    b'{"job":"urn:babel:orders:created","x_first":{"k":[1,2.5,"\xc3\xa9"]},"trace_id":"t","data":{"a":1},'
    b'"meta":{"id":"m","queue":"orders","x_meta":true,"lang":"go","schema_version":1,"created_at":5,'
    b'"x_last":null},"attempts":2,"x_after":1e-07}'
)


def test_unknown_keys_survive_decode_with_attempts_encode_in_order() -> None:
    env = decode(UNKNOWN_KEYS)
    retried = env.with_attempts(3)
    assert retried.encode() == UNKNOWN_KEYS.replace(b'"attempts":2', b'"attempts":3')
    assert env.encode() == UNKNOWN_KEYS
    assert env.meta["x_meta"] is True and env.document()["x_first"] == {"k": [1, 2.5, "é"]}


def test_with_attempts_returns_a_new_envelope_and_leaves_the_original() -> None:
    for env in (_made(), decode(_made().encode())):
        before = env.encode()
        retried = env.with_attempts(4)
        assert retried is not env
        assert (env.attempts, retried.attempts) == (0, 4)
        assert env.encode() == before
        assert retried.encode() == before.replace(b'"attempts":0', b'"attempts":4')
        assert retried.id == env.id and retried.trace_id == env.trace_id


@pytest.mark.parametrize("bad", [-1, True, 1.0, "1", None])
def test_with_attempts_refuses_non_counts(bad: Any) -> None:
    with pytest.raises(EnvelopeError) as info:
        _made().with_attempts(bad)
    assert info.value.path == "attempts"


def test_urn_alias_decodes_and_re_encodes_as_job_in_place() -> None:
    body = (CONFORMANCE / "fixtures" / "urn-alias.json").read_bytes()
    env = decode(body)
    assert env.urn == "urn:babel:orders:created" and env.accepts()
    out = json.loads(env.with_attempts(1).encode())
    assert list(out) == ["job", "trace_id", "data", "meta", "attempts"] and "urn" not in out
    assert out["job"] == "urn:babel:orders:created"


@pytest.mark.parametrize(
    ("frame", "urn"),
    [
        ('"job":"urn:babel:a:b","urn":"urn:babel:c:d"', "urn:babel:a:b"),  # job wins
        ('"urn":"urn:babel:c:d","job":null', "urn:babel:c:d"),  # a null job is absent
    ],
)
def test_job_and_urn_together(frame: str, urn: str) -> None:
    rest = ',"trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}'
    env = decode(("{" + frame + rest).encode())
    assert env.urn == urn and env.accepts()
    out = json.loads(env.encode())
    assert out["job"] == urn and "urn" not in out and next(iter(out)) == "job"


@pytest.mark.parametrize("frame", ['"job":5,"urn":"urn:babel:c:d"', '"job":"  ","urn":"urn:babel:c:d"'])
def test_a_present_job_that_is_no_urn_is_not_saved_by_the_alias(frame: str) -> None:
    rest = ',"trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}'
    env = decode(("{" + frame + rest).encode())
    assert env.urn == "" and not env.accepts()


def test_forbidden_keys_are_not_re_emitted() -> None:
    body = (b'{"job":"urn:babel:a:b","timestamp":1,"trace_id":"t","data":{"timestamp":1,"ts":2},'
            b'"meta":{"id":"m","max_retries":3,"attempts":1,"source":"x","ts":4,"queue":"q","schema_version":1},'
            b'"attempts":0}')
    env = decode(body)
    assert env.accepts()
    assert env.encode() == (b'{"job":"urn:babel:a:b","trace_id":"t","data":{"timestamp":1,"ts":2},'
                            b'"meta":{"id":"m","queue":"q","schema_version":1},"attempts":0}')
    assert env.with_attempts(1).encode() == env.encode().replace(b'"attempts":0', b'"attempts":1')


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"job": None}, "no URN"),
        ({"job": ""}, "no URN"),
        ({"meta": []}, "meta is missing or not an object"),
        ({"meta": {"schema_version": 2}}, "meta.schema_version is 2"),
        ({"meta": {}}, "meta.schema_version is None"),
        ({"data": [1]}, "data is missing or not an object"),
        ({"attempts": True}, "attempts is bool"),
        ({"attempts": "0"}, "attempts is str"),
        ({"attempts": None}, "attempts is missing"),
        ({"trace_id": " "}, "trace_id"),
        ({"trace_id": 5}, "trace_id"),
    ],
)
def test_rejection_names_the_rule(change: dict[str, Any], reason: str) -> None:
    doc = {"job": "urn:babel:a:b", "trace_id": "t", "data": {}, "meta": {"schema_version": 1}, "attempts": 0}
    doc.update(change)
    env = decode(json.dumps(doc).encode())
    assert not env.accepts() and not accepts(doc)
    assert reason in (env.rejection() or "") and rejection(doc) == env.rejection()


def test_rejected_envelope_accessors_fall_back_to_empty_values() -> None:
    env = decode(b'{"job":7,"trace_id":[],"data":"x","meta":"y","attempts":"z"}')
    assert (env.urn, env.trace_id, env.data, env.meta, env.attempts, env.id, env.created_at) == (
        "", "", {}, {}, 0, "", None)
    assert urn_of(env.document()) == ""


def test_to_dict_is_a_deep_copy_and_equality_is_by_content() -> None:
    env = _made(meta={"ext": {"k": [1]}})
    copy = env.to_dict()
    copy["meta"]["ext"]["k"].append(2)
    copy["data"]["order_id"] = 0
    assert env.meta["ext"] == {"k": [1]} and env.data == {"order_id": 1042}
    assert decode(env.encode()) == env
    assert env != _made(meta={"ext": {"k": [2]}})
    assert env.__eq__(object()) is NotImplemented


def test_direct_construction_of_a_received_document() -> None:
    doc = {"urn": "urn:babel:a:b", "trace_id": "t", "data": {"f": 1e-5}, "meta": {"schema_version": 1},
           "attempts": 0}
    env = Envelope(doc)
    assert env.accepts()
    assert env.encode() == (b'{"job":"urn:babel:a:b","trace_id":"t","data":{"f":1e-05},'
                            b'"meta":{"schema_version":1},"attempts":0}')


def test_with_data_replaces_only_data_and_keeps_the_key_order() -> None:
    original = decode(b'{"job":"urn:babel:a:b","data":{"n":1},"meta":{"id":"x"},"attempts":2,"extra":true}')
    changed = original.with_data({"n": 2, "name": "\u00e9"})
    assert changed.data == {"n": 2, "name": "\u00e9"} and original.data == {"n": 1}
    assert json.loads(changed.encode()) == {
        "job": "urn:babel:a:b",
        "data": {"n": 2, "name": "\u00e9"},
        "meta": {"id": "x"},
        "attempts": 2,
        "extra": True,
    }
    assert list(json.loads(changed.encode())) == ["job", "data", "meta", "attempts", "extra"]


def test_with_data_refuses_what_json_cannot_carry() -> None:
    env = make("urn:babel:a:b", {"n": 1})
    with pytest.raises(EnvelopeError, match=r"data\.bad"):
        env.with_data({"bad": float("nan")})
