"""The manifest's envelope ``cases``: decode every fixture and hold babelq to the verdict.

Valid fixtures must be accepted and match ``expect`` (ids and times checked for shape
only); babelq's re-encoding of each must be canonical and validate against the suite's
envelope schema, and so must a fresh :func:`~babelq.envelope.make` of the same data.
Invalid fixtures must be rejected (by the decoder or by the consumer rules).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping
from typing import Any

from babelq.conformance.result import Recorder, canonical
from babelq.conformance.suite import Suite, SuiteError
from babelq.envelope import Envelope, annotate, decode, make
from babelq.envelope.data_bytes import compact, data_span
from babelq.errors import BabelqError, DecodeError
from babelq.schema.validation import errors_of

UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")
_EXPECT_READERS = {
    "urn": lambda env: env.urn,
    "data": lambda env: env.data,
    "attempts": lambda env: env.document().get("attempts"),
    "lang": lambda env: env.meta.get("lang"),
    "schema_version": lambda env: env.meta.get("schema_version"),
}


def run(suite: Suite, out: Recorder, cases: object) -> None:
    if not isinstance(cases, list):
        out.check("manifest", False, "'cases' must be a list")
        return
    for index, case in enumerate(cases):
        if not isinstance(case, Mapping) or not isinstance(case.get("name"), str):
            out.check(f"#{index}", False, "a case must be an object with a string 'name'")
            continue
        try:
            _run_case(suite, out, case)
        except SuiteError as exc:
            out.check(f"{case['name']}/fixture", False, str(exc))


def _run_case(suite: Suite, out: Recorder, case: Mapping[str, Any]) -> None:
    name: str = case["name"]
    body = suite.read(case.get("file"))
    valid = case.get("valid")
    if type(valid) is not bool:
        out.check(f"{name}/manifest", False, f"'valid' must be true or false, got {valid!r}")
        return
    env: Envelope | None
    try:
        env = decode(body)
        reason = env.rejection()
    except DecodeError as exc:
        env, reason = None, f"poison: {exc.reason}"
    if not valid:
        out.check(f"{name}/rejected", reason is not None, reason or "babelq accepted an invalid envelope")
        return
    if not out.check(f"{name}/accepted", env is not None and reason is None, reason or "") or env is None:
        return
    _check_expect(out, name, env, case.get("expect"))
    _check_shapes(out, name, env)
    reencoded = _check_canonical(out, name, env)
    _check_schema(suite, out, f"{name}/schema:re-encoded", json.loads(reencoded))
    _check_fresh_make(suite, out, name, env)


def _check_expect(out: Recorder, name: str, env: Envelope, expect: object) -> None:
    if not isinstance(expect, Mapping):
        out.check(f"{name}/expect", False, "a valid case needs an 'expect' object")
        return
    problems: list[str] = []
    for key, wanted in expect.items():
        if key == "dead_letter":
            problems.extend(_dead_letter_problems(env.dead_letter, wanted))
            continue
        reader = _EXPECT_READERS.get(key)
        if reader is None:
            problems.append(f"unknown expectation {key!r} (this runner cannot check it)")
            continue
        got = reader(env)
        if canonical(got) != canonical(wanted):
            problems.append(f"{key}: expected {canonical(wanted)}, got {canonical(got)}")
    out.check(f"{name}/expect", not problems, "; ".join(problems))


def _dead_letter_problems(block: Mapping[str, Any] | None, wanted: object) -> list[str]:
    if not isinstance(wanted, Mapping):
        return ["expect.dead_letter must be an object"]
    if block is None:
        return ["dead_letter: expected a dead_letter block, found none"]
    return [
        f"dead_letter.{key}: expected {canonical(value)}, got {canonical(block.get(key))}"
        for key, value in wanted.items()
        if canonical(block.get(key)) != canonical(value)
    ]


def _check_shapes(out: Recorder, name: str, env: Envelope) -> None:
    problems = []
    meta_id, trace_id = env.meta.get("id"), env.document().get("trace_id")
    if not (isinstance(meta_id, str) and UUID.match(meta_id)):
        problems.append(f"meta.id {meta_id!r} is not a UUID")
    if not (isinstance(trace_id, str) and UUID.match(trace_id)):
        problems.append(f"trace_id {trace_id!r} is not a UUID")
    if meta_id == trace_id:
        problems.append("meta.id must differ from trace_id")
    created_at = env.meta.get("created_at")
    if type(created_at) is not int or created_at < 0:
        problems.append(f"meta.created_at {created_at!r} is not Unix epoch milliseconds")
    elif created_at < 10**11:
        problems.append(f"meta.created_at {created_at} looks like seconds, not milliseconds")
    out.check(f"{name}/shapes", not problems, "; ".join(problems))


def _check_canonical(out: Recorder, name: str, env: Envelope) -> bytes:
    """Re-encode; the frame must be in the canonical form, ``data`` the producer's own tokens
    (compact), and the bytes stable through decode/encode."""
    body = env.encode()
    problems = []
    doc = dict(env.document())
    span = data_span(body)
    if span is None:
        problems.append("the re-encoded body has no data member a reader can find")
    elif "job" in doc:  # an 'urn' alias is renamed on re-encoding, so only 'job' docs compare 1:1
        frame = body[: span[0]] + b"null" + body[span[1] :]
        expected = json.dumps({**doc, "data": None}, ensure_ascii=False, separators=(",", ":")).encode()
        if frame != expected:
            problems.append(f"the re-encoded frame is not the canonical form: {frame!r} != {expected!r}")
        if compact(body) != body:
            problems.append("the re-encoded body has whitespace between tokens")
        if json.loads(body[span[0] : span[1]]) != json.loads(json.dumps(doc.get("data"))):
            problems.append("the re-encoded data does not read back as the received data")
    again = decode(body)
    if again.encode() != body:
        problems.append("decode(encode(x)) does not re-encode to the same bytes")
    if again.rejection() is not None:
        problems.append(f"the re-encoded body is rejected: {again.rejection()}")
    out.check(f"{name}/canonical-bytes", not problems, "; ".join(problems))
    return body


def _check_schema(suite: Suite, out: Recorder, check_name: str, document: Any) -> None:
    try:
        validator = suite.envelope_schema
    except SuiteError as exc:
        out.check(check_name, False, str(exc))
        return
    errors = errors_of(validator, document)
    out.check(check_name, not errors, "; ".join(errors))


def _check_fresh_make(suite: Suite, out: Recorder, name: str, env: Envelope) -> None:
    """A message babelq produces from the same data must validate too (dead-lettered likewise)."""
    check_name = f"{name}/schema:fresh-make"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fresh = make(env.urn, env.data, queue=env.queue or "default")
            block = env.dead_letter
            if block is not None:
                fresh = annotate(
                    fresh.with_attempts(env.attempts),
                    str(block.get("reason")),
                    original_queue=str(block.get("original_queue", fresh.queue)),
                    error=block.get("error") if isinstance(block.get("error"), str) else None,
                )
    except BabelqError as exc:
        out.check(check_name, False, f"babelq could not produce it: {exc}")
        return
    _check_schema(suite, out, check_name, json.loads(fresh.encode()))
