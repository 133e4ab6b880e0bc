"""SIGKILL the relay between publish and mark: the rows are published again, never lost, and the
consumer's idempotency (babelq.idempotency, keyed on meta.id) turns the duplicates into one effect."""

from __future__ import annotations

import os
import signal
import time

import pytest

from babelq.envelope import decode
from babelq.idempotency import MemoryStore, wrap
from babelq.outbox.failpoint import AFTER_PUBLISH, ENV
from babelq.transports import open_transport

from .support import Target, envelopes, read_all, relay_cli

pytestmark = pytest.mark.live

ROWS = 50
BATCH = 20


def test_killed_between_publish_and_mark_publishes_again_and_loses_nothing(
    target: Target, broker: str, unique_queue: str
) -> None:
    made = envelopes(ROWS, unique_queue)
    target.add(made, unique_queue)
    common = [
        "--outbox",
        target.url,
        "--broker",
        broker,
        "--table",
        target.table,
        "--publish-batch",
        str(BATCH),
        "--lease",
        "1",
        "--once",
    ]

    killed = relay_cli(*common, env={**os.environ, ENV: AFTER_PUBLISH})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # the first batch reached the broker, and nothing was marked
    assert target.statuses() == {"pending": ROWS}
    if target.kind == "sqlite":
        time.sleep(1.2)  # the dead relay's lease lapses (PostgreSQL dropped its locks with the connection)

    done = relay_cli(*common)
    assert done.returncode == 0, done.stderr
    assert target.statuses() == {"published": ROWS}

    transport = open_transport(broker)
    try:
        bodies = read_all(transport, unique_queue)
    finally:
        transport.close()
    ids = [decode(b).id for b in bodies]
    assert sorted(set(ids)) == sorted(e.id for e in made), "every row reached the broker"
    assert len(ids) == ROWS + BATCH, "the killed batch went out twice"
    duplicates = {i for i in ids if ids.count(i) > 1}
    assert duplicates == {e.id for e in made[:BATCH]}

    effects: list[int] = []
    handle = wrap(MemoryStore(), lambda env: effects.append(int(env.data["n"])))
    outcomes = [handle(decode(b)) for b in bodies]
    assert sorted(effects) == list(range(ROWS)), "one effect per message"
    assert sum(o.skipped for o in outcomes) == BATCH
