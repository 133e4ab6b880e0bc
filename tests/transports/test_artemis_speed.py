"""The artemis transport's consume-path speed measures keep its behaviour: the ``linger``
option (URL parsing, one-line errors), a lone message on a quiet queue is not held back, a
stream comes out in large batches, and nothing is lost or duplicated (live over RabbitMQ's
AMQP 1.0 plugin)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from babelq.envelope import make
from babelq.errors import ConfigurationError
from babelq.transports import Outgoing
from babelq.transports.artemis import ArtemisTransport
from transports import test_artemis_contract as live_contract
from transports.contract import MakeTransport
from transports.test_artemis_contract import URL, require_amqp10


def test_linger_option_parses_and_is_checked() -> None:
    assert ArtemisTransport.from_url(URL).linger == 0.001
    assert ArtemisTransport.from_url(URL + "&linger=0").linger == 0.0
    assert ArtemisTransport.from_url(URL + "&linger=0.01").linger == 0.01
    with pytest.raises(ConfigurationError, match=r"^linger: seconds within 0\.\.1, got 2\.0"):
        ArtemisTransport.from_url(URL + "&linger=2")
    with pytest.raises(ConfigurationError, match=r"^linger: not a number"):
        ArtemisTransport.from_url(URL + "&linger=soon")


@pytest.fixture
def live() -> Iterator[tuple[ArtemisTransport, str]]:
    require_amqp10()
    transport = ArtemisTransport.from_url(URL + "&prefetch=500", heartbeat=0)
    queue = f"speed-{uuid.uuid4().hex[:8]}"
    yield transport, queue
    transport.delete_queue(queue)
    transport.close()


def test_live_lone_message_is_not_held_back(live: tuple[ArtemisTransport, str]) -> None:
    transport, queue = live
    transport.reserve(queue, max_messages=100, timeout=0.05)  # link up, credit granted, empty
    env = make("urn:babel:orders:created", {"n": 1})
    transport.publish(queue, env.encode(), envelope=env)
    start = time.monotonic()
    got = transport.reserve(queue, max_messages=100, timeout=5)
    assert [d.body for d in got] == [env.encode()]
    assert time.monotonic() - start < 0.5  # the linger (1 ms) did not wait for the other 99
    transport.ack_many(got)


def test_live_stream_comes_in_large_batches_exactly_once(live: tuple[ArtemisTransport, str]) -> None:
    transport, queue = live
    envs = [make("urn:babel:orders:created", {"n": i}) for i in range(2000)]
    transport.publish_many(queue, [Outgoing(e.encode(), e) for e in envs])
    batches: list[int] = []
    bodies: list[bytes] = []
    while len(bodies) < len(envs):
        got = transport.reserve(queue, max_messages=200, timeout=5)
        assert got
        batches.append(len(got))
        bodies += [d.body for d in got]
        transport.ack_many(got)
    assert bodies == [e.encode() for e in envs]
    assert transport.reserve(queue, max_messages=10, timeout=0.2) == []
    assert transport.size(queue) == 0
    # without the linger a reserve hands out what one socket read brought (about a dozen here)
    assert sum(batches) / len(batches) >= 50, batches


def test_credit_option_parses_and_is_checked() -> None:
    assert ArtemisTransport.from_url(URL).credit == "batch"
    assert ArtemisTransport.from_url(URL + "&credit=prefetch").credit == "prefetch"
    # the shared URL parser's wording: the choices, the value given and the (redacted) URL
    with pytest.raises(ConfigurationError, match=r"^credit: not one of 'batch', 'prefetch': 'all' in artemis://"):
        ArtemisTransport.from_url(URL + "&credit=all")
    with pytest.raises(ConfigurationError, match=r"^credit: must be one of \('batch', 'prefetch'\)"):
        ArtemisTransport(URL.split("?")[0], credit="all")  # the constructor still checks its own keyword


def test_live_credit_prefetch_streams_ahead_and_loses_nothing() -> None:
    """credit=prefetch: after a one-message reserve the rest of the prefetch is already here
    (buffered, unsettled: still counted by size()); closing without settling gives it all back."""
    require_amqp10()
    eager = ArtemisTransport.from_url(URL + "&prefetch=20&credit=prefetch", heartbeat=0)
    modest = ArtemisTransport.from_url(URL + "&prefetch=20", heartbeat=0)
    queue = f"speed-{uuid.uuid4().hex[:8]}"
    try:
        envs = [make("urn:babel:orders:created", {"n": i}) for i in range(30)]
        eager.publish_many(queue, [Outgoing(e.encode(), e) for e in envs])
        [first] = eager.reserve(queue, max_messages=1, timeout=5)
        deadline = time.monotonic() + 5
        while eager._buffered(queue) < 19 and time.monotonic() < deadline:
            eager.renew_many([first])  # takes the lock; the next reserve flushes
            with eager._lock:
                eager._flush()
        assert eager._buffered(queue) == 19
        assert eager.size(queue) == 29  # 10 on the broker + 19 buffered here (the held one is out)
        [second] = modest.reserve(queue, max_messages=1, timeout=5)
        assert second.body == envs[20].encode()  # the eager consumer holds 1..19
        modest.ack(second)
        eager.close()  # nothing settled: the broker takes back the held one and the 19 buffered
        bodies: list[bytes] = []
        while len(bodies) < 29:
            got = modest.reserve(queue, max_messages=20, timeout=5)
            assert got
            bodies += [d.body for d in got]
            modest.ack_many(got)
        assert sorted(bodies) == sorted(e.encode() for i, e in enumerate(envs) if i != 20)
    finally:
        modest.delete_queue(queue)
        modest.close()


@pytest.mark.live
class TestArtemisContractCreditPrefetch(live_contract.TestArtemisContract):
    """LIVE: the whole shared contract again with ``credit=prefetch`` (the streaming credit)."""

    @pytest.fixture
    def make_transport(self, unique_queue: str) -> Iterator[MakeTransport]:
        require_amqp10()
        opened: list[ArtemisTransport] = []

        def make_one(*, visibility_timeout: float | None = None) -> ArtemisTransport:
            del visibility_timeout
            transport = ArtemisTransport.from_url(URL, prefetch=50, credit="prefetch")
            opened.append(transport)
            return transport

        yield make_one
        for transport in opened:
            transport.close()
        live_contract._cleanup(unique_queue)
