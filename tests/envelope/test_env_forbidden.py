"""Forbidden keys (docs/standard.md §2.2): decode warns, naming each as a JSON pointer; encode drops it."""

from __future__ import annotations

import json
import logging

import pytest

from babelq.envelope import decode, forbidden, make
from babelq.envelope.constants import FORBIDDEN_META, FORBIDDEN_TOP_LEVEL

KEYS = [f"/{k}" for k in sorted(FORBIDDEN_TOP_LEVEL)] + [f"/meta/{k}" for k in sorted(FORBIDDEN_META)]


def _with(pointer: str) -> bytes:
    doc = json.loads(make("urn:babel:orders:created", {"order_id": 1}, queue="orders").encode())
    parts = pointer.strip("/").split("/")
    (doc if len(parts) == 1 else doc["meta"])[parts[-1]] = 7
    return json.dumps(doc).encode()


@pytest.mark.parametrize("pointer", KEYS)
def test_every_forbidden_key_is_named_on_decode_and_dropped_on_encode(pointer: str) -> None:
    with forbidden.observed() as seen:
        env = decode(_with(pointer))
    assert seen == [pointer]
    again = json.loads(env.encode())
    where = again if pointer.count("/") == 1 else again["meta"]
    assert pointer.rsplit("/", 1)[1] not in where


def test_a_clean_envelope_says_nothing() -> None:
    with forbidden.observed() as seen:
        decode(make("urn:babel:orders:created", {"timestamp": 1, "ts": 2}, queue="orders").encode())
    assert seen == []  # keys inside data are the producer's own


def test_the_first_of_each_key_is_a_warning_and_later_ones_debug(caplog: pytest.LogCaptureFixture) -> None:
    body = _with("/meta/source")
    forbidden._warned.discard("/meta/source")
    with caplog.at_level(logging.DEBUG, logger="babelq.envelope"):
        decode(body)
        decode(body)
    levels = [r.levelno for r in caplog.records if "/meta/source" in r.getMessage()]
    assert levels == [logging.WARNING, logging.DEBUG]
