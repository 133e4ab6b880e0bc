"""The re-emit blocks: ``roundtrip`` (unknown keys survive a retry's re-encode), ``data_shape``
(``data`` is always an object) and ``forbidden_keys`` (read with a warning, never re-emitted).

A retry, a dead letter, a redrive and a relay all decode a message and encode it again; these
blocks hold that chain to the standard with the suite's own fixtures.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from babelq.conformance.result import Recorder
from babelq.conformance.suite import Suite, SuiteError
from babelq.envelope import decode, make
from babelq.envelope import forbidden as forbidden_keys
from babelq.errors import BabelqError, DecodeError

_MISSING = object()


def pointer_value(doc: Any, pointer: str) -> Any:
    """The value at RFC 6901 ``pointer`` in ``doc``, or :data:`_MISSING`."""
    if pointer == "":
        return doc
    if not pointer.startswith("/"):
        return _MISSING
    node = doc
    for token in pointer[1:].split("/"):
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return _MISSING
    return node


def _cases(out: Recorder, block: object, name: str) -> list[Mapping[str, Any]]:
    cases = block.get("cases") if isinstance(block, Mapping) else None
    if not isinstance(cases, list) or not cases:
        out.check("manifest", False, f"the {name} block needs a non-empty 'cases' list")
        return []
    good = [case for case in cases if isinstance(case, Mapping) and isinstance(case.get("name"), str)]
    if len(good) != len(cases):
        out.check("manifest", False, f"every {name} case must be an object with a string 'name'")
    return good


def run_roundtrip(suite: Suite, out: Recorder, block: object) -> None:
    """decode -> attempts + 1 -> encode keeps every unknown key with its value and JSON type."""
    for case in _cases(out, block, "roundtrip"):
        name = case["name"]
        try:
            env = decode(suite.read(case.get("file")))
            again = json.loads(env.with_attempts(env.attempts + 1).encode())
        except (SuiteError, BabelqError) as exc:
            out.check(f"{name}/reencode", False, str(exc))
            continue
        out.equal(f"{name}/attempts", again.get("attempts"), case.get("expect_attempts"))
        preserved = case.get("expect_preserved")
        for pointer, wanted in (preserved.items() if isinstance(preserved, Mapping) else ()):
            got = pointer_value(again, pointer)
            if got is _MISSING:
                out.check(f"{name}{pointer}", False, f"{pointer} is missing after the re-encode")
            else:
                out.equal(f"{name}{pointer}", got, wanted)


def run_data_shape(suite: Suite, out: Recorder, block: object) -> None:
    """``encode`` cases: a fresh envelope's ``data`` text; ``decode`` cases: the core's verdict."""
    for case in _cases(out, block, "data_shape"):
        name, mode = case["name"], case.get("mode")
        if mode == "encode":
            try:
                body = make(str(case.get("urn")), case.get("data"), queue=str(case.get("queue"))).encode()
            except BabelqError as exc:
                out.check(name, False, f"make refused it: {exc}")
                continue
            data = json.loads(body)["data"]
            text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
            out.equal(name, text, case.get("expect_encoded_data_json"))
        elif mode == "decode":
            try:
                valid = decode(suite.read(case.get("file"))).rejection() is None
            except DecodeError:
                valid = False
            except SuiteError as exc:
                out.check(name, False, str(exc))
                continue
            out.equal(name, valid, case.get("valid"))
        else:
            out.check(name, False, f"mode must be 'encode' or 'decode', got {mode!r}")


def run_forbidden_keys(suite: Suite, out: Recorder, block: object) -> None:
    """Decoding warns, naming the key; re-encoding the message unchanged leaves the key out."""
    for case in _cases(out, block, "forbidden_keys"):
        name, key = case["name"], case.get("forbidden_key")
        try:
            raw = suite.read(case.get("file"))
            with forbidden_keys.observed() as seen:
                env = decode(raw)
            again = json.loads(env.encode())
        except (SuiteError, BabelqError) as exc:
            out.check(f"{name}/decode", False, f"decode must succeed with a warning: {exc}")
            continue
        out.check(f"{name}/warned", key in seen, f"no warning named {key!r} (saw {seen})")
        absent = case.get("expect_absent_after_reencode")
        for pointer in absent if isinstance(absent, list) else ():
            out.check(f"{name}/absent:{pointer}", pointer_value(again, str(pointer)) is _MISSING,
                      f"{pointer} was re-emitted")
