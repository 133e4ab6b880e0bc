"""The transport contract against ``memory://`` (one named in-process store per test)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from babelq.transports.memory import MemoryTransport
from transports.contract import MakeTransport, TransportContract


@pytest.fixture
def make_transport() -> Iterator[MakeTransport]:
    name = f"contract-{uuid.uuid4().hex}"
    made: list[MemoryTransport] = []

    def make(*, visibility_timeout: float | None = None) -> MemoryTransport:
        # Instances with the same name share one store: that is how a second worker meets the
        # first. Each lease length gets its own name, since a named store keeps its first options.
        lease = TestMemoryContract.visibility_timeout if visibility_timeout is None else visibility_timeout
        t = MemoryTransport.from_url(f"memory://{name}-{lease}", visibility_timeout=lease)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()
    with MemoryTransport._named_lock:
        for key in [k for k in MemoryTransport._named if k.startswith(name)]:
            del MemoryTransport._named[key]


class TestMemoryContract(TransportContract):
    slack = 0.5  # a local store: an expired lease is visible at once
    supports_stored_at = False
