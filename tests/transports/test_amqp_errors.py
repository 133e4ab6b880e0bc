"""What a person sees when an AMQP URL or broker is wrong: one line, the option, the URL, no password.

* an option that is not a number: :class:`ConfigurationError` naming the option and the URL;
* a broker that cannot be reached: :class:`UnavailableError` (infrastructure, worth retrying later);
* credentials or vhost refused: :class:`ConfigurationError` (the same settings never work).

Every text shows the URL through :func:`babelq.urls.redact`, and no log line holds the password.
"""

from __future__ import annotations

import logging

import pytest

from babelq.errors import ConfigurationError, UnavailableError
from babelq.transports import open_transport
from babelq.transports.amqp import AMQPTransport
from conftest import require_service

SECRET = "s3cr3t-Pw"


def _one_line_without_secret(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text
    assert SECRET not in text
    return text


@pytest.mark.parametrize(
    ("query", "option"),
    [
        ("prefetch=abc", "prefetch"),
        ("max_priority=high", "max_priority"),
        ("confirm_timeout=soon", "confirm_timeout"),
        ("heartbeat=x", "heartbeat"),
        ("socket_timeout=later", "socket_timeout"),
        ("frame_max=big", "frame_max"),
    ],
)
def test_an_option_that_is_not_a_number_names_the_option_and_the_redacted_url(
    query: str, option: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        open_transport(f"amqp://guest:{SECRET}@127.0.0.1/?{query}")
    text = _one_line_without_secret(caught.value)
    assert option in text
    assert f"amqp://guest:***@127.0.0.1/?{query}" in text


def test_tls_options_need_amqps_and_verify_is_a_yes_or_no() -> None:
    with pytest.raises(ConfigurationError, match="amqps") as caught:
        open_transport(f"amqp://guest:{SECRET}@127.0.0.1/?cafile=/tmp/ca.pem")
    _one_line_without_secret(caught.value)
    with pytest.raises(ConfigurationError, match="verify") as caught:
        open_transport(f"amqps://guest:{SECRET}@127.0.0.1/?verify=maybe")
    _one_line_without_secret(caught.value)
    transport = open_transport(f"amqps://guest:{SECRET}@127.0.0.1/?verify=false")
    assert isinstance(transport, AMQPTransport)
    assert SECRET not in repr(transport._params)


@pytest.mark.live
def test_an_unreachable_broker_is_unavailable_in_one_line_without_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = open_transport(f"amqp://guest:{SECRET}@127.0.0.1:1/")
    with caplog.at_level(logging.DEBUG), pytest.raises(UnavailableError) as caught:
        transport.publish("t-unreachable", b"{}")
    text = _one_line_without_secret(caught.value)
    assert not isinstance(caught.value, ConfigurationError)
    assert "amqp://guest:***@127.0.0.1:1/" in text
    assert "cannot connect" in text
    with pytest.raises(UnavailableError):
        transport.reserve("t-unreachable", timeout=0.1)
    assert all(SECRET not in record.getMessage() for record in caplog.records)
    transport.close()


@pytest.mark.live
def test_refused_credentials_are_a_configuration_error_in_one_line_without_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    require_service("rabbitmq")
    transport = open_transport(f"amqp://guest:{SECRET}@127.0.0.1:5672/%2F?connection_attempts=2")
    with caplog.at_level(logging.DEBUG), pytest.raises(ConfigurationError) as caught:
        transport.publish("t-refused", b"{}")
    text = _one_line_without_secret(caught.value)
    assert not isinstance(caught.value, UnavailableError)
    assert "403" in text
    assert "ACCESS_REFUSED" in text
    assert "amqp://guest:***@127.0.0.1:5672/%2F" in text
    assert all(SECRET not in record.getMessage() for record in caplog.records)
    transport.close()
