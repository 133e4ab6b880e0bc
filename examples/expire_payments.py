"""Payments whose validity window passes unconsumed go to the DLQ, without any handler running.

    python examples/expire_payments.py

Uses a throw-away SQLite broker. Five same-day payments are published with a short
``expire_at`` (seed 001's ``ttl_seconds``) while the service that transfers them is down. The
window passes; ``babelq expire`` then moves the five to ``payments.dlq`` with the record a
worker writes for an expired message (reason ``failed``, cause ``expired``), and leaves the
next-day payment where it was, byte for byte. A worker started later finds nothing stale to
run: an idle worker also sweeps, here catching a payment held back in a delay past its window.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from babelq.envelope import make
from babelq.runtime import App, Message
from babelq.transports import open_transport

URN = "urn:babel:payments:transfer"


def main() -> None:
    broker = f"sqlite:///{Path(tempfile.mkdtemp()) / 'broker.db'}"
    transport = open_transport(broker)
    now = int(time.time() * 1000)
    for n in range(5):  # same-day payments valid for 200 ms
        payment = {"payment_reference": f"PAY-{n:05d}", "amount_cents": 150000, "currency": "AUD"}
        transport.publish("payments", make(URN, payment, queue="payments", expire_at=now + 200).encode())
    next_day = make(URN, {"payment_reference": "PAY-NEXT", "amount_cents": 990, "currency": "AUD"},
                    queue="payments", expire_at=now + 86_400_000).encode()  # fmt: skip
    transport.publish("payments", next_day)
    time.sleep(0.3)  # the window passes with nobody consuming

    swept = subprocess.run(
        [sys.executable, "-m", "babelq.cli.main", "expire", "--broker", broker, "--queue", "payments"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    totals = json.loads(swept.stdout)
    print(f"babelq expire: {totals}")
    assert totals["moved"] == 5

    records = transport.reserve("payments.dlq", max_messages=10)
    letter = json.loads(records[0].body)["dead_letter"]
    print(f"in payments.dlq: {len(records)} record(s), reason {letter['reason']}, cause {letter['cause']}")
    assert (len(records), letter["reason"], letter["cause"]) == (5, "failed", "expired")
    transport.ack_many(records)

    # a payment held back in a delay (deliver later) whose window ends before the delay does
    held = make(URN, {"payment_reference": "PAY-HELD", "amount_cents": 1, "currency": "AUD"},
                queue="payments", expire_at=int(time.time() * 1000) - 1).encode()  # fmt: skip
    transport.publish("payments", held, delay_ms=3_600_000)

    transferred: list[str] = []
    app = App(transport, queue="payments")

    @app.handler(URN)
    def transfer(message: Message) -> None:
        transferred.append(message.data["payment_reference"])

    app.drain()  # handles what is valid; idle, it sweeps the delayed payment to the DLQ
    print(f"worker transferred {transferred}; idle sweep expired {app.stats()['expired']}")
    assert transferred == ["PAY-NEXT"] and app.stats()["expired"] == 1
    assert [d.body for d in transport.reserve("payments.dlq")] != []
    app.close()
    transport.close()


if __name__ == "__main__":
    main()
