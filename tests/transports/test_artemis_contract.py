"""The ``artemis://`` transport: the shared contract LIVE over RabbitMQ 3.10's AMQP 1.0 plugin
(``broker=rabbitmq``), then the projection, URL options, one-line errors and redaction.

No Artemis broker runs here; RabbitMQ's ``rabbitmq_amqp1_0`` plugin (enabled by ``.ci/run``)
serves AMQP 1.0 on 5672 next to 0-9-1. What only Artemis does (scheduled delivery annotations,
the modified outcome counting a delivery, the management address) is tested fake-backed in
``test_artemis_interop.py``.

Declared capabilities and why (each test that needs one skips naming the declaration):
``supports_delay = False`` (RabbitMQ stores and ignores the scheduled-delivery annotations, so
the RabbitMQ flavour runs with ``delays=ignore``), ``supports_stored_at = False`` (no ingress
time on RabbitMQ), ``supports_tagged = False`` (a delivery settles only on its own link),
``exact_batches = False`` (a batch is what has arrived after credit was granted). Reservations
are connection-bound, so the two tests built on lease expiry are overridden with the equivalent:
the holder's connection goes away.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import pytest

from babelq.bindings import artemis as binding
from babelq.envelope import Envelope, make
from babelq.errors import ConfigurationError, UnavailableError
from babelq.transports import Outgoing, open_transport, transport_class
from babelq.transports.artemis import (
    ArtemisTransport,
    body_bytes,
    build_message,
    delivery_count_of,
    message_headers,
)
from conftest import REQUIRE_LIVE, require_service
from transports.contract import MakeTransport, TransportContract, _body

URL = "artemis://guest:guest@127.0.0.1:5672?broker=rabbitmq"
SECRET = "s3cr3t-Pw"

_amqp10_checked: list[str] = []


def require_amqp10() -> None:
    """RabbitMQ must be up (conftest's :func:`require_service`) and speak AMQP 1.0 (the
    ``rabbitmq_amqp1_0`` plugin): skip loudly, or fail under ``BABELQ_REQUIRE_LIVE=1``."""
    require_service("rabbitmq")
    if _amqp10_checked:
        return
    probe = ArtemisTransport.from_url(URL, timeout=5, heartbeat=0)
    try:
        with probe._lock:
            probe._open()
    except Exception as exc:  # the plugin is off: the 0-9-1 listener refuses the AMQP 1.0 header
        message = (
            "LIVE SERVICE DOWN: RabbitMQ at 127.0.0.1:5672 does not speak AMQP 1.0 "
            f"(enable it: rabbitmq-plugins enable rabbitmq_amqp1_0): {exc}"
        )
        if REQUIRE_LIVE:
            pytest.fail(message + " (BABELQ_REQUIRE_LIVE is set, so this is a failure)")
        pytest.skip(message)
    finally:
        probe.close()
    _amqp10_checked.append("ok")


def _envelope(queue: str, n: int = 0) -> Envelope:
    return make("urn:babel:orders:created", {"n": n, "note": "ça/va"}, queue=queue)


def _cleanup(queue: str) -> None:
    cleaner = ArtemisTransport.from_url(URL, heartbeat=0)
    try:
        for name in (queue, f"{queue}.dlq", f"{queue}-other"):
            cleaner.delete_queue(name)
    finally:
        cleaner.close()


@pytest.fixture
def make_transport(unique_queue: str) -> Iterator[MakeTransport]:
    require_amqp10()
    opened: list[ArtemisTransport] = []

    def make_one(*, visibility_timeout: float | None = None) -> ArtemisTransport:
        del visibility_timeout  # connection-bound: a reservation lasts as long as its connection
        transport = ArtemisTransport.from_url(URL, prefetch=50)
        opened.append(transport)
        return transport

    yield make_one
    for transport in opened:
        transport.close()
    _cleanup(unique_queue)


@pytest.mark.live
class TestArtemisContract(TransportContract):
    """LIVE: RabbitMQ 3.10 AMQP 1.0 through ``artemis://...?broker=rabbitmq``."""

    supports_stored_at = False
    supports_delay = False
    supports_tagged = False
    exact_batches = False

    def test_unacked_reservation_comes_back(  # type: ignore[override]  # needs a second worker
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        holder, other = make_transport(), make_transport()
        holder.publish(unique_queue, _body("lease"))
        [first] = self._drain(holder, unique_queue, 1, within=3)
        assert other.reserve(unique_queue, timeout=0.3) == []  # held: nobody else gets it
        assert other.size(unique_queue) == 0
        holder.close()  # the connection goes away: the broker takes the delivery back
        [again] = self._drain(other, unique_queue, 1, within=3)
        assert again.body == first.body
        assert (first.delivery_count, again.delivery_count) == (1, 2)
        other.ack(again)

    def test_late_ack_leaves_the_new_reservation_alone(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        slow, fast = make_transport(), make_transport()
        assert isinstance(slow, ArtemisTransport)
        slow.publish(unique_queue, _body("late"))
        [stale] = self._drain(slow, unique_queue, 1, within=3)
        _sever(slow)  # the link drops under the worker (network loss)
        [current] = self._drain(fast, unique_queue, 1, within=3)
        slow.publish(unique_queue, _body("other"))  # slow reconnects on its own
        slow.ack(stale)  # too late: ignored, the message belongs to ``fast`` now
        fast.release(current)
        got = self._drain(fast, unique_queue, 2, within=3)
        assert sorted(d.body for d in got) == sorted([_body("late"), _body("other")])
        fast.ack_many(got)


def _sever(transport: ArtemisTransport) -> None:
    """Drop the transport's socket the way a network failure does (the broker sees it closed)."""
    transport._conn.conn.transport.close_tail()
    transport._conn.conn.transport.close_head()
    from proton import ConnectionException

    with pytest.raises(ConnectionException):  # proton notices; the transport's next call reconnects
        transport._conn.wait(lambda: False, timeout=0.5)


# -- live specifics -----------------------------------------------------------------------------


@pytest.fixture
def artemis(unique_queue: str) -> Iterator[ArtemisTransport]:
    require_amqp10()
    transport = ArtemisTransport.from_url(URL)
    yield transport
    transport.close()
    _cleanup(unique_queue)


@pytest.mark.live
def test_open_transport_picks_the_artemis_class() -> None:
    require_amqp10()
    transport = open_transport(URL)
    try:
        assert isinstance(transport, ArtemisTransport)
        assert transport.broker == "rabbitmq"
        assert transport.address("orders") == "/amq/queue/orders"
    finally:
        transport.close()


@pytest.mark.live
def test_round_trip_keeps_bytes_and_exposes_the_projection(
    artemis: ArtemisTransport, unique_queue: str
) -> None:
    envelope = _envelope(unique_queue)
    artemis.publish(unique_queue, envelope.encode(), envelope=envelope)
    [delivery] = artemis.reserve(unique_queue, max_messages=5, timeout=5)
    assert delivery.body == envelope.encode()
    projected = binding.project(envelope)
    headers = delivery.headers
    assert headers["durable"] is True
    assert headers["message_annotations"] == projected["message_annotations"]
    assert headers["application_properties"] == projected["application_properties"]
    for key in ("correlation_id", "message_id", "creation_time"):
        assert headers[key] == projected[key]
    assert (delivery.delivery_count, delivery.attempts(0), delivery.stored_at) == (1, 0, None)
    artemis.ack(delivery)
    assert artemis.size(unique_queue) == 0


@pytest.mark.live
def test_the_queue_is_durable_on_rabbitmq(artemis: ArtemisTransport, unique_queue: str) -> None:
    artemis.publish(unique_queue, _body("durable"))
    from babelq.transports.amqp_client import ChannelClosedByBrokerError

    channel = artemis._admin_channel()
    channel.queue_declare(unique_queue, durable=True, passive=True)
    with pytest.raises(ChannelClosedByBrokerError) as caught:  # a non-durable redeclare is refused
        artemis._admin_channel().queue_declare(unique_queue, durable=False)
    assert caught.value.reply_code == 406


@pytest.mark.live
def test_redelivery_counts_and_attempts_on_rabbitmq(artemis: ArtemisTransport, unique_queue: str) -> None:
    """RabbitMQ's header delivery-count stays 0; a redelivery clears first-acquirer instead, so the
    1-based delivery_count grows while the binding's attempts stay the body's (max(body, 0))."""
    envelope = _envelope(unique_queue)
    artemis.publish(unique_queue, envelope.encode())
    [first] = artemis.reserve(unique_queue, timeout=3)
    artemis.release(first)
    [again] = artemis.reserve(unique_queue, timeout=3)
    assert again.headers["delivery_count"] == 0
    assert again.headers["first_acquirer"] is False
    assert again.delivery_count == 2
    assert again.attempts(3) == 3
    artemis.ack(again)


@pytest.mark.live
def test_retry_and_dead_letter_carry_the_new_bodies_projection(
    artemis: ArtemisTransport, unique_queue: str
) -> None:
    envelope = _envelope(unique_queue)
    artemis.publish(unique_queue, envelope.encode())
    [delivery] = artemis.reserve(unique_queue, timeout=3)
    retried = dict(envelope.document()) | {"attempts": 1}
    body = json.dumps(retried, ensure_ascii=False, separators=(",", ":")).encode()
    artemis.retry(delivery, body, delay_ms=0)
    [again] = artemis.reserve(unique_queue, timeout=3)
    assert again.body == body
    assert again.headers["application_properties"]["bq_attempts"] == "1"
    assert again.delivery_count == 1  # a new message
    dlq = f"{unique_queue}.dlq"
    artemis.dead_letter(again, body, dlq=dlq)
    [dead] = artemis.reserve(dlq, timeout=3)
    assert dead.body == body and dead.queue == dlq
    artemis.ack(dead)
    assert artemis.size(unique_queue) == 0


@pytest.mark.live
def test_delays_are_ignored_on_rabbitmq_with_a_warning(
    artemis: ArtemisTransport, unique_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="babelq.transports.artemis"):
        artemis.publish(unique_queue, _body("soon"), delay_ms=60_000)
        artemis.publish(unique_queue, _body("soon", 1), delay_ms=60_000)
    assert [r.getMessage() for r in caplog.records].count(
        f"artemis: delays=ignore (broker=rabbitmq): delayed messages are visible at once on {artemis.where}"
    ) == 1
    got = TransportContract._drain(artemis, unique_queue, 2, within=3)
    assert [d.body for d in got] == [_body("soon"), _body("soon", 1)]
    assert all("x-opt-delivery-time" not in d.headers["message_annotations"] for d in got)
    artemis.ack_many(got)


@pytest.mark.live
def test_threads_can_share_one_transport(artemis: ArtemisTransport, unique_queue: str) -> None:
    import threading

    total = 60
    errors: list[BaseException] = []
    seen: list[bytes] = []

    def produce(k: int) -> None:
        try:
            for i in range(total // 3):
                artemis.publish(unique_queue, _body(f"t{k}", i))
        except BaseException as exc:
            errors.append(exc)

    def consume() -> None:
        try:
            # a time budget, not the assertion: 60 confirmed publishes and reserves through one
            # locked connection take ~6 s alone and went past 10 s beside the AMQP tests
            end = time.monotonic() + 60
            while len(seen) < total and time.monotonic() < end:
                got = artemis.reserve(unique_queue, max_messages=7, timeout=0.2)
                seen.extend(d.body for d in got)
                artemis.ack_many(got)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(3)] + [
        threading.Thread(target=consume) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert not errors
    assert len(seen) == total == len(set(seen))


@pytest.mark.live
def test_a_dropped_connection_is_replaced_and_its_deliveries_come_back(
    artemis: ArtemisTransport, unique_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An outage puts messages back (the broker requeues) and the transport reconnects; a stale
    settle is ignored with a warning, nothing is dead-lettered."""
    artemis.publish_many(unique_queue, [_outgoing(i) for i in range(3)])
    held = TransportContract._drain(artemis, unique_queue, 3, within=3)
    assert len(held) == 3
    _sever(artemis)  # the socket dies under the transport
    with caplog.at_level(logging.WARNING, logger="babelq.transports.artemis"):
        back = TransportContract._drain(artemis, unique_queue, 3, within=5)
        artemis.ack(held[0])  # stale: the broker already took it back
        artemis.dead_letter(held[1], b"{}", dlq=f"{unique_queue}.dlq")  # stale: nothing happens
    assert sorted(d.body for d in back) == sorted(d.body for d in held)
    assert all(d.delivery_count == 2 for d in back)
    assert any("reconnecting" in r.getMessage() for r in caplog.records)
    assert any("closed connection" in r.getMessage() for r in caplog.records)
    artemis.ack_many(back)
    assert artemis.size(f"{unique_queue}.dlq") == 0
    assert artemis.size(unique_queue) == 0


def _outgoing(i: int) -> Outgoing:
    return Outgoing(_body("drop", i))


@pytest.mark.live
@pytest.mark.parametrize("broker", ["rabbitmq", "artemis"])
def test_an_unreachable_broker_is_unavailable_in_one_redacted_line(broker: str) -> None:
    transport = ArtemisTransport(f"artemis://guest:{SECRET}@127.0.0.1:1", broker=broker, timeout=2)
    with pytest.raises(UnavailableError) as caught:
        transport.publish("q", b"x")
    text = str(caught.value)
    assert "\n" not in text and SECRET not in text
    assert "artemis://guest:***@127.0.0.1:1" in text


@pytest.mark.live
@pytest.mark.parametrize("broker", ["rabbitmq", "artemis"])  # artemis: refused by the AMQP 1.0 SASL exchange
def test_wrong_credentials_are_a_configuration_error_without_the_password(broker: str) -> None:
    require_amqp10()
    transport = ArtemisTransport(f"artemis://guest:{SECRET}@127.0.0.1:5672", broker=broker, timeout=5)
    with pytest.raises(ConfigurationError) as caught:
        transport.publish("q", b"x")
    text = str(caught.value)
    assert "\n" not in text and SECRET not in text
    assert "credentials" in text and "***" in text


# -- pure: projection, options, errors (no broker) ---------------------------------------------------


def test_the_message_carries_the_binding_projection_and_is_durable() -> None:
    envelope = _envelope("orders")
    message = build_message(envelope.encode(), envelope)
    projected = binding.project(envelope)
    assert message.durable is True
    assert message.body == envelope.encode().decode("utf-8")  # an AMQP string: a JMS TextMessage
    assert message.inferred is False
    headers = message_headers(message)
    assert headers["message_annotations"] == {"x-opt-jms-type": "urn:babel:orders:created"}
    assert headers["application_properties"] == {
        "bq_schema_version": "1", "bq_source_lang": "python", "bq_attempts": "0", "bq_app_id": "babelqueue",
    }  # fmt: skip
    for key in ("correlation_id", "message_id", "creation_time"):
        assert headers[key] == projected[key]
    # without the envelope the body is decoded: same message
    again = build_message(envelope.encode())
    assert message_headers(again) == headers


def test_a_body_that_is_not_utf8_is_one_data_section_and_gets_no_projection() -> None:
    message = build_message(b"\xff\xfe\x00not utf-8")
    assert message.inferred is True
    assert body_bytes(message.body) == b"\xff\xfe\x00not utf-8"
    assert message.properties is None and message.annotations is None
    assert message.durable is True
    not_json = build_message("日本語".encode())
    assert body_bytes(not_json.body) == "日本語".encode() and not_json.properties is None


def test_delay_annotations_per_mode() -> None:
    body = _envelope("q").encode()
    timed = build_message(body, delays="delivery-time", delay_ms=1500, now_ms=1_000_000)
    assert message_headers(timed)["message_annotations"]["x-opt-delivery-time"] == 1_001_500
    relative = build_message(body, delays="delivery-delay", delay_ms=1500)
    assert message_headers(relative)["message_annotations"]["x-opt-delivery-delay"] == 1500
    ignored = build_message(body, delays="ignore", delay_ms=1500)
    assert set(message_headers(ignored)["message_annotations"]) == {"x-opt-jms-type"}


def test_delivery_count_per_broker() -> None:
    message = build_message(b"{}")
    message.delivery_count, message.first_acquirer = 0, True
    assert delivery_count_of(message, "rabbitmq") == delivery_count_of(message, "artemis") == 1
    message.first_acquirer = False  # RabbitMQ: redelivered, header still 0
    assert delivery_count_of(message, "rabbitmq") == 2
    assert delivery_count_of(message, "artemis") == 1  # Artemis never sets first-acquirer: not a signal
    message.delivery_count = 3
    assert delivery_count_of(message, "artemis") == 4


def test_url_options_and_broker_defaults() -> None:
    artemis = ArtemisTransport.from_url("artemis://u:p@broker.example:61616")
    assert (artemis.broker, artemis.address("orders"), artemis.release_outcome, artemis.delays) == (
        "artemis", "orders", "modified", "delivery-time",
    )  # fmt: skip
    assert (artemis.host, artemis.port, artemis.username) == ("broker.example", 61616, "u")
    rabbit = ArtemisTransport.from_url(URL + "&prefetch=7&heartbeat=0", timeout="3")
    assert (rabbit.address("orders"), rabbit.release_outcome, rabbit.delays) == (
        "/amq/queue/orders", "released", "ignore",
    )  # fmt: skip
    assert (rabbit.prefetch, rabbit.heartbeat, rabbit.timeout, rabbit.admin_port) == (7, 0.0, 3.0, 5672)
    custom = ArtemisTransport.from_url(
        "artemis://h?address=/queue/{queue}&release=released&delays=delivery-delay", broker="artemis"
    )
    assert (custom.address("q"), custom.release_outcome, custom.delays) == (
        "/queue/q", "released", "delivery-delay",
    )  # fmt: skip
    tls = ArtemisTransport.from_url("artemis+ssl://h?ca_file=/etc/ca.pem")
    assert (tls.tls, tls.port, tls.ca_file) == (True, 5671, "/etc/ca.pem")
    vhost = ArtemisTransport.from_url("artemis://h/tenant%2Fa?broker=rabbitmq")
    assert vhost.vhost == "tenant/a"
    assert transport_class("artemis+ssl://h") is ArtemisTransport


@pytest.mark.parametrize(
    ("query", "option"),
    [
        ("broker=kafka", "broker"),
        ("address=/amq/queue/", "address"),
        ("address={queue}-{queue}", "address"),
        ("address=/q/{name}/{queue}", "address"),
        ("release=rejected", "release"),
        ("broker=rabbitmq&release=modified", "release"),
        ("delays=soon", "delays"),
        ("prefetch=lots", "prefetch"),
        ("prefetch=0", "prefetch"),
        ("heartbeat=x", "heartbeat"),
        ("timeout=0", "timeout"),
        ("confirm_timeout=-1", "confirm_timeout"),
        ("ca_file=/etc/ca.pem", "ca_file"),
        ("bogus=1", "bogus"),
    ],
)
def test_a_bad_option_is_one_line_naming_it_without_the_password(query: str, option: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        open_transport(f"artemis://guest:{SECRET}@127.0.0.1:5672?{query}")
    text = str(caught.value)
    assert "\n" not in text and SECRET not in text
    assert text.startswith(f"{option}: ")
    assert "artemis://guest:***@127.0.0.1:5672" in text


def test_other_url_errors() -> None:
    with pytest.raises(ConfigurationError, match=r"^url: not an artemis"):
        ArtemisTransport(f"amqp://guest:{SECRET}@h")
    with pytest.raises(ConfigurationError, match=r"^url: Artemis has no virtual hosts") as caught:
        ArtemisTransport(f"artemis://guest:{SECRET}@h/vh")
    assert SECRET not in str(caught.value)
    with pytest.raises(ConfigurationError, match=r"^url: the port is not a number"):
        ArtemisTransport(f"artemis://guest:{SECRET}@h:port")
    with pytest.raises(ConfigurationError, match=r"^queue: must not be empty"):
        ArtemisTransport("artemis://h").address("")


def test_a_closed_transport_refuses_work_and_close_is_idempotent() -> None:
    transport = ArtemisTransport("artemis://h", heartbeat=0)
    transport.close()
    transport.close()
    with pytest.raises(ConfigurationError, match="closed"):
        transport.publish("q", b"x")


def test_importing_the_transport_modules_does_not_import_proton() -> None:
    import subprocess
    import sys

    code = (
        "import sys, babelq.transports; a = 'proton' in sys.modules; "
        "import babelq.transports.artemis; print(a, 'proton' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"  # proton is imported when the transport is used


def test_connect_errors_are_classified_from_protons_text() -> None:
    transport = ArtemisTransport(f"artemis://guest:{SECRET}@h:5672")
    refused = transport.connect_error(
        "Connection amqp://h:5672 disconnected: Condition('amqp:unauthorized-access', "
        "'Authentication failed [mech=PLAIN]')"
    )
    assert isinstance(refused, ConfigurationError) and str(refused).startswith("url: ")
    assert "refused the credentials" in str(refused)
    plugin_off = transport.connect_error(  # RabbitMQ without rabbitmq_amqp1_0 answers in 0-9-1
        "Connection amqp://h:5672 disconnected: Condition('amqp:connection:framing-error', "
        "\"Expected SASL protocol header got: Unknown protocol ['AMQP\\x00\\x00\\x09\\x01']\")"
    )
    assert isinstance(plugin_off, ConfigurationError) and "does not speak AMQP 1.0" in str(plugin_off)
    down = transport.connect_error("Connection amqp://h:5672 disconnected: Condition('proton:io', 'refused')")
    assert isinstance(down, UnavailableError) and not isinstance(down, ConfigurationError)
    for error in (refused, plugin_off, down):
        assert SECRET not in str(error) and "\n" not in str(error) and "guest:***@h:5672" in str(error)
