"""The transport contract against a live Redis (127.0.0.1:6379), on unique queue names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from babelq.transports.redis import RedisTransport
from conftest import require_service
from transports.contract import MakeTransport, TransportContract

pytestmark = pytest.mark.live


# lease: the default; own: the delayed set, where a queue written with delays=own keeps its bodies
@pytest.fixture(params=["lease", "own"])
def make_transport(request: pytest.FixtureRequest) -> Iterator[MakeTransport]:
    host, port = require_service("redis")
    made: list[RedisTransport] = []

    def make(*, visibility_timeout: float | None = None) -> RedisTransport:
        lease = TestRedisContract.visibility_timeout if visibility_timeout is None else visibility_timeout
        t = RedisTransport(
            f"redis://{host}:{port}/15", visibility_timeout=lease, poll_interval=0.1, delays=request.param
        )
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


class TestRedisContract(TransportContract):
    slack = 0.5  # a local store: an expired lease is visible at once
    # Redis keeps no store time for a list element.
    supports_stored_at = False
