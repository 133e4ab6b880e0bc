"""Redaction: no password or secret parameter of a URL survives being shown."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from babelq.urls import MASK, redact, redact_text

SECRET = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=4, max_size=20).map(
    lambda s: "Zq" + s  # never a substring of the fixed parts of the URL
)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("amqp://guest:guest@rabbit:5672/%2F?heartbeat=10", "amqp://guest:***@rabbit:5672/%2F?heartbeat=10"),
        (
            "postgresql://app@db/ledger?password=pw&sslmode=require",
            "postgresql://app@db/ledger?password=***&sslmode=require",
        ),
        ("sqlite:///var/lib/q.db", "sqlite:///var/lib/q.db"),
        ("redis://user@host:6379", "redis://user@host:6379"),
        # the transports' secret options, and a URL with no host that keeps its "//"
        ("kafka://b1:9092?sasl_password=pw&group=g", "kafka://b1:9092?sasl_password=***&group=g"),
        ("sb://ns?sas_token=t&connection_string=c", "sb://ns?sas_token=***&connection_string=***"),
        ("sqs://?aws_session_token=t", "sqs://?aws_session_token=***"),
        ("sqlite:///q.db?password=pw", "sqlite:///q.db?password=***"),
    ],
)
def test_redact_masks_only_the_secret(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_redact_masks_more_parameters_when_asked() -> None:
    """A caller that knows better (an unknown key may be a mistyped secret) names them."""
    assert redact("redis://h/0?pasword=pw&db=1", also=("PASWORD",)) == "redis://h/0?pasword=***&db=1"
    assert redact("redis://h/0?db=1", also=("pasword",)) == "redis://h/0?db=1"


@given(
    user=st.sampled_from(["", "app", "guest"]),
    password=SECRET,
    scheme=st.sampled_from(["redis", "amqp", "postgresql", "sqs"]),
)
def test_no_password_survives(user: str, password: str, scheme: str) -> None:
    quoted = quote(password, safe="")
    url = f"{scheme}://{user}:{quoted}@host.example:1234/db?password={quoted}"
    shown_forms = (
        redact(url),
        redact_text(f"cannot connect to {url}: refused"),
        redact_text(f"password={password}"),
    )
    for shown in shown_forms:
        assert password not in shown
        assert quote(password, safe="") not in shown
        assert MASK in shown


def test_redact_text_keeps_the_rest_of_the_message() -> None:
    text = "Error 111 connecting to redis://:pw@127.0.0.1:1. Connection refused."
    assert redact_text(text) == "Error 111 connecting to redis://:***@127.0.0.1:1. Connection refused."
