"""Redaction: no password or secret parameter of a URL survives being shown."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from babelq.errors import UnavailableError
from babelq.urls import MASK, one_line, redact, redact_text, split_url

SECRET = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=4, max_size=20).map(
    lambda s: "Zq" + s  # never a substring of the fixed parts of the URL
)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@127.0.0.1:6379/15", "redis://:***@127.0.0.1:6379/15"),
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


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("--outbox: directory user:PgPw_8812@/nonexistent does not exist",
         "--outbox: directory user:***@/nonexistent does not exist"),
        ("--ledger: directory sqlite:/app:pw@/data does not exist",
         "--ledger: directory sqlite:/app:***@/data does not exist"),
        ("cannot open ':pw@host/x.db'", "cannot open ':***@host/x.db'"),
        ("git@github.com:org/repo and a@b.example stay", "git@github.com:org/repo and a@b.example stay"),
        ("redis://u:***@h:1/0 at 12:30", "redis://u:***@h:1/0 at 12:30"),
    ],
)
def test_redact_text_masks_a_password_left_without_its_scheme(text: str, shown: str) -> None:
    assert redact_text(text) == shown


@given(user=st.sampled_from(["", "app", "guest"]), password=SECRET,
       before=st.sampled_from(["", "/", "sqlite:/", " "]))
def test_no_password_survives_in_a_path_cut_from_a_url(user: str, password: str, before: str) -> None:
    quoted = quote(password, safe="")
    shown = redact_text(f"--ledger: directory {before}{user}:{quoted}@/data does not exist")
    assert quoted not in shown and f"{user}:{MASK}@/data" in shown


def test_redact_text_keeps_the_rest_of_the_message() -> None:
    text = "Error 111 connecting to redis://:pw@127.0.0.1:1. Connection refused."
    assert redact_text(text) == "Error 111 connecting to redis://:***@127.0.0.1:1. Connection refused."


HOST = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,8}(:[1-9][0-9]{0,3})?", fullmatch=True),
    st.from_regex(
        r"\[(::1|fe80::[0-9a-f]{1,4}|2001:db8::[0-9a-f]{1,4})\](:[1-9][0-9]{0,3})?", fullmatch=True
    ),
)


@given(
    hosts=st.lists(HOST, min_size=2, max_size=4),
    scheme=st.sampled_from(["kafka", "pulsar", "pulsar+ssl"]),
    path=st.sampled_from(["", "/", "/topic"]),
    query=st.sampled_from(["", "?group=g", "?sasl_password=SECRET9&x=1"]),
)
def test_split_url_keeps_a_netloc_of_several_hosts_as_written(
    hosts: list[str], scheme: str, path: str, query: str
) -> None:
    """Every 3.11 release splits a multi-host URL, whatever position its IPv6 hosts take
    (Python 3.11.2's urlsplit refuses ``kafka://b1,[::1]:9093``)."""
    netloc = ",".join(hosts)
    url = f"{scheme}://{netloc}{path}{query}"
    parts = split_url(url)
    assert (parts.scheme, parts.netloc, parts.path, parts.query) == (scheme, netloc, path, query.lstrip("?"))
    shown = redact(url)
    assert shown.startswith(f"{scheme}://{netloc}") and "SECRET9" not in shown  # hosts are lower-case


def test_split_url_of_a_single_host_is_urlsplit() -> None:
    for url in ("redis://:pw@[::1]:6379/0?x=1#f", "sqlite:///var/q.db", "amqp://h/%2F", "sqs://?region=x",
                "q.db?from=kafka://a,b", "/data/x,y://z"):  # a "://" after no scheme is no netloc
        assert split_url(url) == urlsplit(url)


def test_a_multi_host_url_with_an_ipv6_host_after_the_first_reaches_its_transport() -> None:
    from babelq.transports import transport_class

    assert transport_class("kafka://b1:9092,b2,[::1]:9093?group=g").__name__ == "KafkaTransport"
    assert transport_class("pulsar://p1:6650,[::1]:6651").__name__ == "PulsarTransport"


def test_the_cluster_guard_reads_past_a_multi_host_broker_url() -> None:
    from babelq.pipelines.cluster_checks import sqlite_file

    assert sqlite_file("kafka://b1:9092,[::1]:9093") is None
    assert sqlite_file("sqlite:///var/q.db") == "/var/q.db"


def test_one_line_of_an_exception_is_redacted_collapsed_and_never_empty() -> None:
    exc = RuntimeError("cannot reach\n  redis://:pw@h:6379/0\tnow")
    assert one_line(exc) == f"cannot reach redis://:{MASK}@h:6379/0 now"
    assert one_line(KeyError()) == "KeyError"
    assert one_line(ValueError(" \n ")) == "ValueError"


def test_one_line_first_line_drops_a_driver_s_multi_line_hint() -> None:
    exc = RuntimeError('\n  connection failed: password=pw\nHINT: is the server running?\n')
    assert one_line(exc, first_line=True) == f"connection failed: password={MASK}"
    assert one_line(RuntimeError("  \n"), first_line=True) == "RuntimeError"


def test_one_line_typed_names_the_type_except_for_an_unavailable_error() -> None:
    assert one_line(ValueError("bad\nvalue"), typed=True) == "ValueError: bad value"
    assert one_line(ValueError(), typed=True) == "ValueError"
    assert one_line(UnavailableError("redis://:pw@h down"), typed=True) == f"redis://:{MASK}@h down"
    assert one_line(UnavailableError(), typed=True) == "UnavailableError"


def test_one_line_of_a_string_escapes_control_characters_and_keeps_the_rest() -> None:
    assert one_line("queue") == "queue"
    assert one_line("a\nb\tc") == "a\\nb\\tc"
    assert one_line("password=pw") == "password=pw"  # the caller's text, already safe to show
