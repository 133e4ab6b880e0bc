"""The worker runtime and settle decide alike: the same bodies get the same dead letters.

Both consumers apply :mod:`babelq.runtime.rules` (the runtime in Python per message, settle as
Spark expressions per micro-batch). This feeds one set of bodies to each, the runtime on the
memory transport with a handler that asks the same simulated core banking, settle through Spark
on an SQLite queue, and compares what became of every body: posted/handled, or dead-lettered
with which reason and cause. Before the shared rules they disagreed: a ``schema_version: 2``
body was cause ``unsupported`` in settle and had no cause in the runtime, a message that used its
attempts had cause ``max_attempts`` in one and none in the other, an unknown URN was dead-lettered
with or without a cause, an expired message of an unknown URN was ``unknown_urn`` in settle and
``expired`` in the runtime, and settle posted a message whose ``meta.deliver_at`` was still ahead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from babelq.envelope import decode, make, now_ms, original_bytes
from babelq.pipelines import TRANSFER_URN
from babelq.pipelines.core_banking import CoreBankingSimulator
from babelq.transports import Outgoing, open_transport
from payment_fixtures import transfer

pytestmark = [pytest.mark.spark, pytest.mark.slow]

Fate = tuple[str, str | None]  # ("posted", None) or (dead_letter.reason, dead_letter.cause)


def _bodies(queue: str) -> dict[str, bytes]:
    """Every rule of the shared order, alone and in the pairs whose order matters."""
    unsupported = (
        b'{"job":"urn:babel:payments:transfer.requested","trace_id":"t","data":{},'
        b'"meta":{"id":"sv2","schema_version":2},"attempts":0}'
    )
    no_urn = b'{"trace_id":"t","data":{},"meta":{"id":"nourn","schema_version":1},"attempts":0}'
    past = now_ms() - 1_000
    return {
        "not-json": b"{not json",
        "not-utf8": b"\xff\xfe\x80 not utf-8",
        "array": b'["array"]',
        "schema-version-2": unsupported,
        "no-urn": no_urn,
        "unknown-urn": make("urn:babel:payments:refund.requested", {"x": 1}, queue=queue).encode(),
        "expired": transfer("PAY-EXP", queue, expire_at=past).encode(),
        "expired-unknown-urn": make("urn:babel:payments:refund.requested", {"x": 2}, queue=queue,
                                    expire_at=past).encode(),
        "closed-account": transfer("PAY-CLOSED", queue, creditor_account="12349999").encode(),
        "transient": transfer("PAY-TRANSIENT", queue, creditor_account="12340000").encode(),
        "last-attempt": transfer("PAY-LAST", queue, creditor_account="12349999").with_attempts(2).encode(),
        "good": transfer("PAY-GOOD", queue).encode(),
        "deferred": make(TRANSFER_URN, transfer("PAY-LATER", queue).data, queue=queue,
                         deliver_at=now_ms() + 1_500).encode(),
    }


def _fates(dead: list[bytes], done: set[str], bodies: dict[str, bytes]) -> dict[str, Fate]:
    by_key: dict[str | bytes, Fate] = {mid: ("posted", None) for mid in done}
    for record in dead:
        block = orjson.loads(record)["dead_letter"]
        fate: Fate = (block["reason"], block.get("cause"))
        kept = original_bytes(record) if block["reason"] == "poison" else None
        by_key[kept if kept is not None else decode(record).id] = fate
    out: dict[str, Fate] = {}
    for name, body in bodies.items():
        try:
            key: str | bytes = decode(body).id if decode(body).accepts() else body
        except Exception:
            key = body
        out[name] = by_key.get(key, ("missing", None))
    return out


def _runtime(bodies: dict[str, bytes]) -> dict[str, Fate]:
    from babelq.runtime import App, Backoff, Message
    from babelq.transports.memory import MemoryTransport

    transport = MemoryTransport()
    app = App(transport, queue="q", max_attempts=3, backoff=Backoff(base_ms=0), unknown_urn="dead_letter")
    bank = CoreBankingSimulator()
    handled: set[str] = set()

    @app.handler(TRANSFER_URN)
    def post(message: Message) -> None:
        failure = bank.failure(message.data, message.attempts)
        if failure is not None:
            raise RuntimeError(failure)
        handled.add(message.id)

    for body in bodies.values():
        transport.publish("q", body)
    app.run_until_empty(wait_delayed=True, timeout=30)
    dead = [d.body for d in transport.reserve("q.dlq", max_messages=100)]
    return _fates(dead, handled, bodies)


def _settle(spark: Any, tmp_path: Path, queue: str, bodies: dict[str, bytes]) -> dict[str, Fate]:
    from babelq.pipelines.ledger import open_ledger
    from babelq.pipelines.settle import settle

    url = f"sqlite://{tmp_path}/q.db"
    transport = open_transport(url)
    transport.publish_many(queue, [Outgoing(b) for b in bodies.values()])
    run = settle(spark, url=url, queue=queue, ledger=tmp_path / "ledger.db", checkpoint=tmp_path / "ck",
                 retry_delay_ms=0, max_attempts=3, timeout=120)
    assert run.drained
    dead = [d.body for d in transport.reserve(queue + ".dlq", max_messages=100)]
    ledger = open_ledger(tmp_path / "ledger.db")
    try:
        posted = {str(r[0]): int(r[1]) for r in ledger._query(
            f"SELECT message_id, posted_at FROM {ledger.t_entries}")}
    finally:
        ledger.close()
    later = decode(bodies["deferred"])
    assert later.deliver_at is not None and posted[later.id] >= later.deliver_at  # not posted early
    return _fates(dead, set(posted), bodies)


def test_runtime_and_settle_give_every_body_the_same_fate(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    bodies = _bodies(unique_queue)
    runtime = _runtime(bodies)
    settled = _settle(spark, tmp_path, unique_queue, bodies)
    assert settled == runtime
    # and the fates are the ones the rules name
    assert runtime["schema-version-2"] == ("poison", "unsupported")
    assert runtime["not-json"] == ("poison", None)
    assert runtime["expired-unknown-urn"] == ("failed", "expired")
    assert runtime["unknown-urn"] == ("unknown_urn", "unknown_urn")
    assert runtime["closed-account"] == ("failed", "max_attempts")
    assert runtime["deferred"] == runtime["transient"] == runtime["good"] == ("posted", None)
