"""Keeping reservations alive while the consumer still holds them.

A leased reservation (SQLite, Redis, SQS, memory) goes back to the queue ``lease`` seconds
after it was taken. Without renewal, a handler slower than the lease -- or a message that
waits its turn behind a full prefetch -- is handed to another worker while this one still
works on it, and the message is handled twice. The conductor thread, which owns the
transport, therefore pushes the deadline of everything it still holds a third of a lease
before it runs out. Connection-bound reservations (AMQP) have no deadline and need nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence

from babelq.runtime.counters import Counters
from babelq.runtime.outage import is_unavailable
from babelq.transports.base import Delivery, Transport
from babelq.urls import one_line

#: Renew once this fraction of a lease has passed since the last renewal: two more chances before it lapses.
RENEW_FRACTION = 1 / 3


class LeaseKeeper:
    """Tracks the reservations a consumer holds and renews them every third of a lease.

    ``hold`` when fetched, ``let_go`` once settled (acked, retried, dead-lettered or released),
    ``tick`` whenever the conductor is free: it renews only when a renewal is due. A caller
    that knows what it holds without tracking asks ``due`` and calls ``renew`` itself. Only
    the thread that owns the transport may call these.
    """

    def __init__(
        self,
        transport: Transport,
        queues: str | Sequence[str],
        *,
        counters: Counters,
        log: logging.Logger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        names = (queues,) if isinstance(queues, str) else tuple(queues)
        #: how log lines name the queues held from
        self.queue = ", ".join(names)
        self.counters = counters
        self.log = log
        self.clock = clock
        leases = [transport.lease_seconds(q) for q in names] if transport.leased_reservations else []
        lease = min((s for s in leases if s), default=None)  # the shortest lease sets the pace
        #: seconds between renewals; ``None``: the transport's reservations need none
        self.every: float | None = lease * RENEW_FRACTION if lease else None
        self._held: dict[int, Delivery] = {}
        self._lost = 0  #: lapsed reservations the last renewal found
        self._due = 0.0
        self.reserved()

    @property
    def held(self) -> int:
        """How many reservations are tracked."""
        return len(self._held)

    def reserved(self) -> None:
        """A batch was just reserved: with nothing older held, the next renewal is a third of
        a lease away (older reservations keep the earlier schedule, which renews the new too)."""
        if self.every is not None and not self._held:
            self._due = self.clock() + self.every

    def hold(self, deliveries: Iterable[Delivery]) -> None:
        """Track freshly reserved ``deliveries`` until ``let_go``."""
        if self.every is None:
            return
        self.reserved()
        for delivery in deliveries:
            self._held[id(delivery)] = delivery

    def let_go(self, delivery: Delivery) -> None:
        """Stop tracking a settled delivery."""
        self._held.pop(id(delivery), None)

    def due(self) -> bool:
        """Is a renewal due? (Cheap: the hot path asks after every message.)"""
        return self.every is not None and self.clock() >= self._due

    def tick(self) -> None:
        """Renew everything held if a renewal is due; never raises."""
        if self.due() and self._held:
            self.renew(list(self._held.values()))

    def renew(self, deliveries: list[Delivery]) -> None:
        """Renew ``deliveries`` now (whatever is tracked or not); never raises."""
        self._due = self.clock() + (self.every or 0.0)
        try:
            kept = self.transport.renew_many(deliveries)
        except Exception as exc:  # a missed renewal only risks a redelivery; the next tick tries again
            self.counters.incr("renew_errors")
            if is_unavailable(exc):  # the broker is away: one line, its traceback tells nothing more
                self.log.warning(
                    "renewing %d reservation(s) on %r failed, broker unavailable: %s",
                    len(deliveries), self.queue, one_line(exc, typed=True),
                )  # fmt: skip
            else:
                self.log.exception("renewing %d reservation(s) on %r failed", len(deliveries), self.queue)
            self._due = self.clock() + min(self.every or 1.0, 1.0)
            return
        self.counters.incr("leases_renewed", kept)
        lost = len(deliveries) - kept
        # The broker says how many lapsed, not which: warn and count when that number grows,
        # not at every renewal while the same lapsed message is still being worked on.
        if lost > self._lost:
            self.counters.incr("leases_lost", lost - self._lost)
            self.log.warning(
                "%d of %d reservation(s) on %r had lapsed before renewal and may be handled twice; "
                "raise the transport's visibility_timeout",
                lost, len(deliveries), self.queue,
            )  # fmt: skip
        self._lost = lost
