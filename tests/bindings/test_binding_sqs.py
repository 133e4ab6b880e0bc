"""SQS binding: MessageAttributes, FIFO parameters, delay, receive-count reconciliation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.bindings import sqs
from babelq.envelope import make


def test_message_attributes() -> None:
    env = make("urn:babel:orders:created", {}, queue="orders", created_at=1749132727000)
    assert sqs.project(env) == {
        "bq-job": {"DataType": "String", "StringValue": "urn:babel:orders:created"},
        "bq-trace-id": {"DataType": "String", "StringValue": env.trace_id},
        "bq-message-id": {"DataType": "String", "StringValue": env.id},
        "bq-schema-version": {"DataType": "Number", "StringValue": "1"},
        "bq-source-lang": {"DataType": "String", "StringValue": "python"},
        "bq-created-at": {"DataType": "Number", "StringValue": "1749132727000"},
    }


@pytest.mark.parametrize(
    ("body", "count", "expected"),
    [
        (0, "1", 0),
        (0, "3", 2),
        (2, "5", 4),
        (5, "1", 5),
        (4, "not-a-number", 4),
        (3, None, 3),
        (3, "", 3),
        (1, 7, 6),
        (1, True, 1),  # a bool is not a count
        (1, "-4", 1),
        (1, " 9 ", 8),
        (1, 2.0, 1),
    ],
)
def test_reconcile_cases(body: int, count: object, expected: int) -> None:
    assert sqs.reconcile_attempts(body, count) == expected


@settings(max_examples=300, deadline=None)
@given(
    body=st.integers(0, 10**6),
    count=st.one_of(st.none(), st.integers(-5, 10**6), st.integers(0, 10**6).map(str), st.text(max_size=5)),
)
def test_reconcile_never_lowers_body(body: int, count: object) -> None:
    got = sqs.reconcile_attempts(body, count)
    assert got >= body
    if isinstance(count, int) and count >= 1:
        assert got == max(body, count - 1)


def test_fifo_detection_and_parameters() -> None:
    env = make("urn:babel:a:b", {})
    keyed = make("urn:babel:a:b", {}, sharding_key="customer-7")
    assert sqs.is_fifo("orders.fifo") and not sqs.is_fifo("orders")
    assert sqs.fifo_parameters("orders", env) == {}
    assert sqs.fifo_parameters("orders.fifo", env) == {
        "MessageGroupId": "orders.fifo",
        "MessageDeduplicationId": env.id,
    }
    # seed 000: "MessageGroupId (the configured group, else the queue name)"
    assert sqs.fifo_parameters("orders.fifo", keyed)["MessageGroupId"] == "orders.fifo"
    assert sqs.fifo_parameters("orders.fifo", keyed, group_id="g1")["MessageGroupId"] == "g1"
    by_key = sqs.fifo_parameters("orders.fifo", keyed, group_id="g1", group_by="sharding_key")
    assert by_key["MessageGroupId"] == "customer-7"
    unkeyed = sqs.fifo_parameters("orders.fifo", env, group_id="g1", group_by="sharding_key")
    assert unkeyed["MessageGroupId"] == "g1"
    content = sqs.fifo_parameters("orders.fifo", env, content_based_dedup=True)
    assert content == {"MessageGroupId": "orders.fifo"}


@pytest.mark.parametrize(
    ("ms", "seconds"), [(0, 0), (-5, 0), (1, 1), (999, 1), (1000, 1), (1001, 2), (900_000, 900), (10**9, 900)]
)
def test_delay_seconds_rounds_up_and_caps(ms: int, seconds: int) -> None:
    assert sqs.delay_seconds(ms) == seconds
    assert sqs.MAX_DELAY_SECONDS == 900
