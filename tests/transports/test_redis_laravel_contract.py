"""The transport contract over the Laravel-compatible Redis layout (live Redis, ``?laravel=1``).

The layout is Laravel's (and the babelqueue SDK's ``laravel_compat``): its sets hold the jobs
themselves, without a reservation token. Two declared consequences:

* ``gated_settle = False``: a body without a numeric ``attempts`` is reserved under the same
  member every time, so a late ack of a lapsed reservation settles the newer one. Envelopes do
  carry ``attempts`` (bumped in the member at every reserve), and for them settling *is* gated:
  ``test_a_late_ack_of_an_envelope_leaves_the_new_reservation_alone`` below proves it.
* identical bodies in flight share one member: the contract's identical-bodies test is replaced
  by one asserting what the layout does (delivered separately, settled together).

No delivery count, no tagged reservations (the Spark reader needs the default layout).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from babelq.envelope import make
from babelq.transports import Transport, open_transport
from babelq.transports.redis import RedisTransport
from babelq.transports.redis_laravel import RedisLaravelTransport
from conftest import require_service
from transports.contract import MakeTransport, TransportContract, _body

pytestmark = pytest.mark.live


@pytest.fixture
def make_transport() -> Iterator[MakeTransport]:
    host, port = require_service("redis")
    made: list[Any] = []

    def make_one(*, visibility_timeout: float | None = None) -> Transport:
        lease = visibility_timeout or TestRedisLaravelContract.visibility_timeout
        t = RedisTransport.from_url(
            f"redis://{host}:{port}/15?laravel=1", visibility_timeout=lease, poll_interval=0.1
        )
        assert isinstance(t, RedisLaravelTransport)
        made.append(t)
        return t

    yield make_one
    for t in made:
        t.close()


class TestRedisLaravelContract(TransportContract):
    slack = 0.5
    supports_stored_at = False
    supports_delivery_count = False  # the layout keeps no counter
    supports_tagged = False
    supports_headers = False  # bare envelopes only: headers are dropped, as babelqueue drops them
    gated_settle = False  # only for bodies with a numeric attempts: see the module docstring

    def test_identical_bodies_are_separate_messages(self, transport: Transport, unique_queue: str) -> None:
        """Replaces the contract's test: three identical jobs are three deliveries, but while in
        flight they are one member of ``:reserved`` (Laravel's layout), so one ack settles all."""
        body = _body("twin")
        for _ in range(3):
            transport.publish(unique_queue, body)
        held = self._drain(transport, unique_queue, 3, within=3)
        assert [d.body for d in held] == [body] * 3
        assert transport.reserved(unique_queue) == 1
        transport.ack(held[0])
        assert transport.reserved(unique_queue) == 0
        self._assert_size(transport, unique_queue, 0)
        assert transport.reserve(unique_queue, timeout=self._expiry_wait()) == []

    def test_a_late_ack_of_an_envelope_leaves_the_new_reservation_alone(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        late, other = make_transport(), make_transport()
        body = make("urn:babel:test:gated", {"n": 1}, queue=unique_queue).encode()
        late.publish(unique_queue, body)
        [first] = self._drain(late, unique_queue, 1, within=3)
        [second] = self._drain(other, unique_queue, 1, within=self._expiry_wait() + 1)
        assert second.body != first.body  # came back as reserved: attempts + 1 (a recovery counts)
        late.ack(first)  # lapsed: touches nothing
        assert late.renew_many([first]) == 0
        assert other.reserved(unique_queue) == 1
        assert other.renew_many([second]) == 1
        other.ack(second)
        assert other.reserved(unique_queue) == 0
        self._assert_size(other, unique_queue, 0)


def test_url_selects_the_layout_and_its_options(unique_queue: str) -> None:
    host, port = require_service("redis")
    base = f"redis://{host}:{port}/15"
    t = open_transport(f"{base}?laravel=1&prefix=lq:&retry_after=7&socket_timeout=5")
    try:
        assert isinstance(t, RedisLaravelTransport)
        assert (t.prefix, t.visibility_timeout) == ("lq:", 7.0)
        t.publish(unique_queue, b"x")
        assert t.client.lrange(f"lq:{unique_queue}", 0, -1) == [b"x"]
        assert t.client.lrange(f"lq:{unique_queue}:notify", 0, -1) == [b"1"]
    finally:
        t.purge(unique_queue)
        t.close()
    for url in (f"{base}?laravel_compat=true", f"{base}?laravel=yes"):
        with open_transport(url) as other:
            assert isinstance(other, RedisLaravelTransport) and other.prefix == "queues:"
    with open_transport(f"{base}?laravel=0") as plain:
        assert isinstance(plain, RedisTransport)
    from babelq.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="laravel"):
        open_transport(f"{base}?laravel=maybe")
    with pytest.raises(ConfigurationError, match="delays"):
        open_transport(f"{base}?laravel=1&delays=lease")
    with pytest.raises(ConfigurationError, match="retry_after"):
        open_transport(f"{base}?laravel=1&retry_after=null")


def test_a_laravel_transport_pickles_by_url() -> None:
    import pickle

    host, port = require_service("redis")
    t = open_transport(f"redis://{host}:{port}/15?laravel=1&visibility_timeout=5")
    again = pickle.loads(pickle.dumps(t))
    try:
        assert isinstance(again, RedisLaravelTransport)
        assert (again.prefix, again.visibility_timeout) == ("queues:", 5.0)
    finally:
        t.close()
        again.close()


def test_reserve_bumps_attempts_in_the_member_not_in_the_delivery(unique_queue: str) -> None:
    host, port = require_service("redis")
    with open_transport(f"redis://{host}:{port}/15?laravel=1&visibility_timeout=30") as t:
        body = make("urn:babel:test:bump", {"n": 1}, queue=unique_queue).encode()
        t.publish(unique_queue, body)
        [d] = t.reserve(unique_queue, timeout=2)
        assert d.body == body
        [(member, deadline)] = t.client.zrange(f"queues:{unique_queue}:reserved", 0, -1, withscores=True)
        import json

        assert json.loads(member)["attempts"] == json.loads(body)["attempts"] + 1
        assert deadline == pytest.approx(time.time() + 30, abs=3)
        t.ack(d)
        assert t.client.exists(f"queues:{unique_queue}:reserved") == 0
        t.purge(unique_queue)
