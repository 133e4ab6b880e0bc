"""Helpers for the runtime tests: a recording memory transport and DLQ readers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from babelq.envelope import Envelope, decode
from babelq.transports.base import Delivery
from babelq.transports.memory import MemoryTransport


class RecordingTransport(MemoryTransport):
    """The real memory transport, keeping a log of the settling calls the runtime made."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.calls: list[tuple[str, Any]] = []

    def ack(self, delivery: Delivery) -> None:
        self.calls.append(("ack", 1))
        super().ack(delivery)

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        self.calls.append(("ack_many", len(deliveries)))
        with self._cond:
            for delivery in deliveries:
                self._q(delivery.queue).reserved.pop(delivery.receipt, None)

    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        self.calls.append(("release", delay_ms))
        super().release(delivery, delay_ms=delay_ms)

    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        self.calls.append(("retry", delay_ms))
        super().retry(delivery, body, delay_ms=delay_ms)

    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        self.calls.append(("dead_letter", dlq))
        super().dead_letter(delivery, body, dlq=dlq)

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        self.calls.append(("renew_many", len(deliveries)))
        return super().renew_many(deliveries)

    def named(self, name: str) -> list[Any]:
        return [arg for call, arg in self.calls if call == name]

    def reserved_count(self, queue: str) -> int:
        with self._cond:
            return len(self._q(queue).reserved)


def dlq(transport: MemoryTransport, queue: str = "q") -> list[bytes]:
    return transport.peek_all(f"{queue}.dlq")


def dlq_envelopes(transport: MemoryTransport, queue: str = "q") -> list[Envelope]:
    return [decode(body) for body in dlq(transport, queue)]
