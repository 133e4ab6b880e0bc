"""Differential, live Redis: the replay mark means the same to babelq and the babelqueue package.

One dead letter (written by babelq's runtime) is redriven by each side into its own queue: the
values stored in Redis are byte-identical (the same reset envelope inside the same header frame
with ``bq-replay-bypass``). Then each side consumes what the other redrove and its handler sees a
replay: ``babelqueue.is_replay()`` for babelq's redrive, ``message.is_replay()`` for the
package's ``redrive(..., bypass=True)``; a plain redrive of the package is no replay to babelq.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from babelq.envelope import decode
from babelq.pipelines.dlq import redrive_messages, selector
from babelq.runtime import App, Message, PermanentError
from babelq.transports import open_transport
from conftest import require_service

babelqueue = pytest.importorskip("babelqueue")
redis = pytest.importorskip("redis")
from babelqueue import BabelQueue, bypass_external_effects  # noqa: E402
from babelqueue.redis_transport import RedisTransport as TheirRedis  # noqa: E402
from babelqueue.redrive import redrive as their_redrive  # noqa: E402

URL = "redis://127.0.0.1:6379/15"
URN = "urn:babel:orders:created"
pytestmark = pytest.mark.live


@pytest.fixture
def queue(unique_queue: str) -> Iterator[str]:
    require_service("redis")
    yield unique_queue
    client = redis.Redis.from_url(URL)
    keys = list(client.scan_iter(match=f"*{unique_queue}*"))
    if keys:
        client.delete(*keys)
    client.close()


def _dead_letter(queue: str, copies: int = 1) -> str:
    """babelq's runtime dead-letters one order ``copies`` times (same message): returns its id."""
    app = App(URL, queue=queue, poll_timeout=0.05)

    def refuse(message: Message) -> None:
        raise PermanentError("card declined")

    app.register(URN, refuse)
    ours = open_transport(URL)
    first = app.publish(URN, {"order_id": 7, "note": "ça/va"})
    [held] = ours.reserve(queue, max_messages=1)
    for _ in range(copies - 1):
        ours.publish(queue, held.body)
    ours.release(held)
    app.run_until_empty(timeout=10)
    assert app.stats()["dead_lettered"] == copies
    app.close()
    ours.close()
    return first


def test_both_redrives_store_the_same_bytes(queue: str) -> None:
    _dead_letter(queue, copies=2)
    dlq = queue + ".dlq"
    ours = open_transport(URL)
    theirs = TheirRedis(URL)
    client = redis.Redis.from_url(URL)
    try:
        assert redrive_messages(ours, dlq, selector(), to_queue=f"{queue}-ours", limit=1).redriven == 1
        result = their_redrive(theirs, dlq, to_queue=f"{queue}-theirs", bypass=True)
        assert (result.redriven, [item.bypassed for item in result.items]) == (1, [True])
        [mine] = client.lrange(f"{queue}-ours", 0, -1)
        [other] = client.lrange(f"{queue}-theirs", 0, -1)
        assert mine == other
        assert b'"bq-replay-bypass":"1"' in mine and b'"__bq_frame":1' in mine
        assert client.llen(dlq) == 0
    finally:
        ours.close()
        theirs.close()
        client.close()


def test_babelq_redrive_is_a_replay_to_the_package(queue: str) -> None:
    message_id = _dead_letter(queue)
    ours = open_transport(URL)
    assert redrive_messages(ours, queue + ".dlq", selector()).redriven == 1
    ours.close()

    seen: list[tuple[Any, bool]] = []
    effects: list[int] = []
    app = BabelQueue(transport=TheirRedis(URL), queue=queue)

    def handle(data: Any, meta: Any) -> None:
        seen.append((meta["id"], babelqueue.is_replay()))
        bypass_external_effects(lambda: effects.append(data["order_id"]))

    app.register(URN, handle)
    assert app.consume(queue, max_messages=1, timeout=2, handle_signals=False) == 1
    assert seen == [(message_id, True)]
    assert effects == []  # the package skipped the effect on babelq's replay


@pytest.mark.parametrize("bypass", [True, False])
def test_package_redrive_is_a_replay_to_babelq(queue: str, bypass: bool) -> None:
    message_id = _dead_letter(queue)
    theirs = TheirRedis(URL)
    assert their_redrive(theirs, queue + ".dlq", bypass=bypass).redriven == 1
    theirs.close()

    seen: list[tuple[str, bool, int]] = []
    app = App(URL, queue=queue, poll_timeout=0.05)
    app.register(URN, lambda m: seen.append((m.id, m.is_replay(), decode(m.body).attempts)))
    app.run_until_empty(timeout=10)
    app.close()
    assert seen == [(message_id, bypass, 0)]
