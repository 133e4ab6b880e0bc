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

from babelq.envelope import decode
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
