"""The SQS projection as a foreign consumer sees it: MessageAttributes read back with raw boto3.

The conformance manifest's ``sqs`` block fixes the six ``bq-*`` attributes (String ids,
Number counters) every producing SDK must send; this reads them from the (moto) broker
without babelq on the read side.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from babelq.envelope import decode, make
from babelq.transports.sqs import SQSTransport
from conftest import CONFORMANCE_DIR, SQS_REGION

boto3 = pytest.importorskip("boto3")


@pytest.fixture
def block() -> dict[str, Any]:
    manifest = json.loads((CONFORMANCE_DIR / "manifest.json").read_text(encoding="utf-8"))
    projection: dict[str, Any] = manifest["sqs"]["attribute_projection"]
    return projection


@pytest.fixture
def raw_client(sqs_endpoint: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=sqs_endpoint,
        region_name=SQS_REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def transport(sqs_url: str, unique_queue: str) -> Iterator[SQSTransport]:
    transport = SQSTransport.from_url(sqs_url)
    yield transport
    transport.delete_queues([unique_queue, f"{unique_queue}.fifo"])
    transport.close()


def _receive_raw(client: Any, url: str, **extra: Any) -> dict[str, Any]:
    answer = client.receive_message(
        QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=2, MessageAttributeNames=["All"], **extra
    )
    [message] = answer["Messages"]
    found: dict[str, Any] = message
    return found


@pytest.mark.parametrize("pass_envelope", [False, True], ids=["decoded-from-body", "envelope-given"])
def test_message_attributes_equal_the_manifest(
    transport: SQSTransport, raw_client: Any, unique_queue: str, block: dict[str, Any], pass_envelope: bool
) -> None:
    body = (CONFORMANCE_DIR / block["envelope_file"]).read_bytes()
    transport.publish(unique_queue, body, envelope=decode(body) if pass_envelope else None)

    message = _receive_raw(raw_client, transport.queue_url(unique_queue))

    assert message["Body"].encode("utf-8") == body
    got = {
        name: {"DataType": value["DataType"], "StringValue": value["StringValue"]}
        for name, value in message["MessageAttributes"].items()
    }
    assert got == block["message_attributes"]


def test_fifo_group_and_dedup_ids(
    transport: SQSTransport, raw_client: Any, unique_queue: str, block: dict[str, Any]
) -> None:
    body = (CONFORMANCE_DIR / block["envelope_file"]).read_bytes()
    queue = f"{unique_queue}.fifo"
    transport.publish(queue, body)

    message = _receive_raw(
        raw_client,
        transport.queue_url(queue),
        MessageSystemAttributeNames=["MessageGroupId", "MessageDeduplicationId"],
    )

    assert message["Attributes"]["MessageGroupId"] == queue
    assert message["Attributes"]["MessageDeduplicationId"] == decode(body).id
    assert message["MessageAttributes"]["bq-job"]["StringValue"] == "urn:babel:orders:created"


def _group_of(client: Any, url: str) -> str:
    message = _receive_raw(client, url, MessageSystemAttributeNames=["MessageGroupId"])
    client.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    group: str = message["Attributes"]["MessageGroupId"]
    return group


def test_fifo_group_is_the_configured_group_else_the_queue_as_the_package_sends_it(
    sqs_url: str, transport: SQSTransport, raw_client: Any, unique_queue: str
) -> None:
    """Seed 000: "FIFO queues (.fifo) set MessageGroupId (the configured group, else the queue
    name)". ``meta.sharding_key`` does not pick the group unless asked (next test); the
    babelqueue package, whose transport agrees with the seed, sends the same groups."""
    from babelqueue.sqs_transport import SqsTransport as PackageSqsTransport

    queue = f"{unique_queue}.fifo"
    url = transport.queue_url(queue)  # creates the queue

    def keyed() -> bytes:  # a new meta.id each time: FIFO deduplicates by it
        return make("urn:babel:orders:created", {"n": 1}, queue=queue, sharding_key="customer-7").encode()

    transport.publish(queue, keyed())
    PackageSqsTransport(client=raw_client, fifo=True).publish(queue, keyed().decode())
    assert [_group_of(raw_client, url), _group_of(raw_client, url)] == [queue, queue]

    grouped = SQSTransport.from_url(f"{sqs_url}&group_id=g1")
    try:
        grouped.publish(queue, keyed())
    finally:
        grouped.close()
    PackageSqsTransport(client=raw_client, fifo=True, message_group_id="g1").publish(queue, keyed().decode())
    assert [_group_of(raw_client, url), _group_of(raw_client, url)] == ["g1", "g1"]


def test_fifo_group_by_the_sharding_key_is_an_explicit_option(
    sqs_url: str, transport: SQSTransport, raw_client: Any, unique_queue: str
) -> None:
    queue = f"{unique_queue}.fifo"
    url = transport.queue_url(queue)
    keyed = SQSTransport.from_url(f"{sqs_url}&group_by=sharding_key&group_id=g1")
    try:
        assert keyed.group_by == "sharding_key"
        keyed.publish(queue, make("urn:babel:a:b", {}, queue=queue, sharding_key="customer-7").encode())
        keyed.publish(queue, make("urn:babel:a:b", {}, queue=queue).encode())  # no key: the configured group
    finally:
        keyed.close()
    assert [_group_of(raw_client, url), _group_of(raw_client, url)] == ["customer-7", "g1"]
