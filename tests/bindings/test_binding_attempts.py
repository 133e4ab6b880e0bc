"""One rule for the attempts every binding projects (Kafka and Pulsar ``bq-attempts``, Artemis
``bq_attempts``, RabbitMQ ``x-attempts``), whatever the body holds.

The property mirrors the body's integer ``attempts``. An absent or null ``attempts`` projects 0:
seed 004 says the counter starts at 0, and the ``babelqueue`` package writes 0 then on every
broker. Any other value (a string, a float, a bool, an object) is no count at all: the property
is left out and the body stays authoritative, on every broker alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.bindings import artemis, kafka, pulsar, rabbitmq
from babelq.envelope import decode

ABSENT = object()


def _kafka(doc: Any) -> object:
    return {name: value.decode() for name, value in kafka.headers(doc)}.get("bq-attempts", ABSENT)


def _pulsar(doc: Any) -> object:
    return pulsar.project(doc).get("bq-attempts", ABSENT)


def _artemis(doc: Any) -> object:
    return artemis.project(doc)["application_properties"].get("bq_attempts", ABSENT)


def _rabbitmq(doc: Any) -> object:
    value = rabbitmq.project(doc)["headers"].get("x-attempts", ABSENT)
    return value if value is ABSENT else str(value)  # native integer there: compared as text


PROJECTIONS: dict[str, Callable[[Any], object]] = {
    "kafka": _kafka, "pulsar": _pulsar, "artemis": _artemis, "rabbitmq": _rabbitmq,
}  # fmt: skip


def _body(attempts: object) -> bytes:
    doc: dict[str, Any] = {
        "job": "urn:babel:orders:created",
        "trace_id": "t-1",
        "data": {},
        "meta": {"id": "m-1", "schema_version": 1, "lang": "php"},
    }
    if attempts is not ABSENT:
        doc["attempts"] = attempts
    return orjson.dumps(doc)


@pytest.mark.parametrize("broker", sorted(PROJECTIONS))
@pytest.mark.parametrize(
    ("attempts", "projected"),
    [
        (3, "3"),
        (0, "0"),
        (ABSENT, "0"),
        (None, "0"),
        ("3", ABSENT),
        ("abc", ABSENT),
        (2.0, ABSENT),
        (True, ABSENT),
        ({"n": 1}, ABSENT),
    ],
    ids=["int", "zero", "absent", "null", "digits", "text", "float", "bool", "object"],
)
def test_every_binding_projects_attempts_by_one_rule(
    broker: str, attempts: object, projected: object
) -> None:
    doc = decode(_body(attempts))
    assert PROJECTIONS[broker](doc) == projected
    assert PROJECTIONS[broker](doc.document()) == projected  # a mapping projects the same


@settings(max_examples=200, deadline=None)
@given(
    attempts=st.one_of(
        st.integers(0, 10**12),
        st.none(),
        st.booleans(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=5),
        st.just(ABSENT),
    )
)
def test_the_brokers_never_disagree(attempts: object) -> None:
    doc = decode(_body(attempts))
    assert len({str(project(doc)) for project in PROJECTIONS.values()}) == 1
