"""The RabbitMQ projection as a foreign consumer sees it: read back from the live broker with raw pika.

The conformance manifest's ``rabbitmq`` block fixes the AMQP properties and the native-typed
headers every producing SDK must emit; a Go or PHP consumer reads them without babelq, so
this test reads them without babelq too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from babelq.envelope import decode, make
from babelq.transports.amqp import AMQPTransport
from conftest import CONFORMANCE_DIR, require_service

pika = pytest.importorskip("pika")

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
pytestmark = pytest.mark.live


@pytest.fixture
def manifest_block() -> dict[str, Any]:
    manifest = json.loads((CONFORMANCE_DIR / "manifest.json").read_text(encoding="utf-8"))
    block: dict[str, Any] = manifest["rabbitmq"]["property_projection"]
    return block


@pytest.fixture
def transport(unique_queue: str) -> Iterator[AMQPTransport]:
    require_service("rabbitmq")
    transport = AMQPTransport(URL)
    yield transport
    transport.delete_queues(unique_queue)
    transport.close()


def _raw_get(queue: str) -> tuple[Any, Any, bytes]:
    """One message from ``queue`` through plain pika (no babelq code on the read side)."""
    connection = pika.BlockingConnection(pika.URLParameters(URL))
    try:
        channel = connection.channel()
        method, props, body = channel.basic_get(queue, auto_ack=True)
        assert method is not None, f"nothing on {queue}"
        return method, props, body
    finally:
        connection.close()


@pytest.mark.parametrize("pass_envelope", [False, True], ids=["decoded-from-body", "envelope-given"])
def test_properties_and_headers_equal_the_manifest(
    transport: AMQPTransport, unique_queue: str, manifest_block: dict[str, Any], pass_envelope: bool
) -> None:
    body = (CONFORMANCE_DIR / manifest_block["envelope_file"]).read_bytes()
    transport.publish(unique_queue, body, envelope=decode(body) if pass_envelope else None)

    _, props, got = _raw_get(unique_queue)

    assert got == body  # the body is never touched
    for name, expected in manifest_block["properties"].items():
        assert getattr(props, name) == expected, name
    assert props.delivery_mode == 2
    assert props.headers == manifest_block["headers"]
    for name, expected in manifest_block["headers"].items():
        assert type(props.headers[name]) is type(expected), f"{name} must stay {type(expected).__name__}"
    assert props.priority is None  # meta.priority is not set in the fixture


def test_priority_is_projected_when_meta_priority_is_set(transport: AMQPTransport, unique_queue: str) -> None:
    envelope = make("urn:babel:orders:created", {"order_id": 1}, queue=unique_queue, priority=9)
    transport.publish(unique_queue, envelope.encode(), envelope=envelope)

    _, props, _ = _raw_get(unique_queue)

    assert props.priority == 9
    assert props.headers["x-attempts"] == 0


def test_retry_projects_the_new_body(transport: AMQPTransport, unique_queue: str) -> None:
    envelope = make("urn:babel:orders:created", {"order_id": 2}, queue=unique_queue)
    getter = AMQPTransport(URL, reserve_mode="get")  # basic.get: nothing else is prefetched
    try:
        getter.publish(unique_queue, envelope.encode(), envelope=envelope)
        [delivery] = getter.reserve(unique_queue, timeout=5)
        getter.retry(delivery, envelope.with_attempts(3).encode(), delay_ms=0)
    finally:
        getter.close()

    _, props, body = _raw_get(unique_queue)

    assert decode(body).attempts == 3
    assert props.headers["x-attempts"] == 3
    assert props.message_id == envelope.id


def test_content_encoding_is_utf8_as_the_babelqueue_package_publishes_it(
    transport: AMQPTransport, unique_queue: str
) -> None:
    """The body is UTF-8 JSON, and the package (like the Node SDK) says so in the basic
    properties: both publishes of one envelope, read back raw, carry the same properties."""
    theirs_module = pytest.importorskip("babelqueue.pika_transport")
    envelope = make("urn:babel:orders:created", {"order_id": 3, "name": "Zoë"}, queue=unique_queue)
    transport.publish(unique_queue, envelope.encode(), envelope=envelope)
    _, ours, _ = _raw_get(unique_queue)
    theirs = theirs_module.PikaTransport(URL)
    try:
        theirs.publish(unique_queue, envelope.encode().decode("utf-8"))
    finally:
        theirs.close()
    _, package, _ = _raw_get(unique_queue)

    assert ours.content_encoding == "utf-8"
    names = ("content_type", "content_encoding", "delivery_mode", "message_id", "correlation_id", "type")
    names += ("app_id",)
    assert {n: getattr(ours, n) for n in names} == {n: getattr(package, n) for n in names}
    assert ours.headers == package.headers


def test_a_body_that_is_no_envelope_claims_no_encoding(transport: AMQPTransport, unique_queue: str) -> None:
    """A poison record may hold any bytes: the fixed part of the properties does not say UTF-8."""
    transport.publish(unique_queue, b"\xff not json")
    _, props, body = _raw_get(unique_queue)
    assert body == b"\xff not json"
    assert (props.content_type, props.content_encoding, props.delivery_mode) == ("application/json", None, 2)
