"""Helpers for the pipeline tests: transfer envelopes with chosen defects.

Not a conftest.py: a second ``conftest`` module would shadow the root one that other tests
import as ``from conftest import require_service``.
"""

from __future__ import annotations

from typing import Any

from babelq.envelope import Envelope, make, now_ms
from babelq.pipelines import TRANSFER_URN


def transfer(
    ref: str, queue: str, *, creditor_account: str = "987654321", expire_at: int | None = None, **extra: Any
) -> Envelope:
    data = {
        "payment_reference": ref,
        "amount_cents": 1000,
        "currency": "AUD",
        "debtor_bsb": "012-345",
        "debtor_account": "123456789",
        "creditor_bsb": "033-001",
        "creditor_account": creditor_account,
        "validation_result": {"passed": True, "checks": ["test"]},
        **extra,
    }
    return make(
        TRANSFER_URN,
        data,
        queue=queue,
        correlation_id="bulk_test",
        expire_at=now_ms() + 3_600_000 if expire_at is None else expire_at,
    )


def publish_transfers(broker: str, queue: str, count: int) -> None:
    """``count`` valid transfers (``PAY-0``...) published to ``queue`` on ``broker``."""
    from babelq.transports import Outgoing, open_transport

    transport = open_transport(broker)
    try:
        transport.publish_many(queue, [Outgoing(transfer(f"PAY-{i}", queue).encode()) for i in range(count)])
    finally:
        transport.close()
