"""An in-process transport for tests and local runs (``memory://``).

Thread-safe, with delayed delivery and a visibility timeout so reservation expiry can be
tested without a broker. Nothing survives the process. Named instances
(``memory://shared``) are shared within a process so a producer and a worker can meet.

Headers published beside a body ride on the stored body itself (a :class:`bytes` subclass
with a ``headers`` attribute), so every path that moves a body (delay, lapse, release, tags)
keeps them without a second bookkeeping structure; a retry or dead-letter keeps the
delivery's headers, as the Redis header frame does.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from babelq.envelope import Envelope
from babelq.transports.base import BaseTransport, Delivery, Outgoing, check_tag
from babelq.transports.url_options import TransportURL, URLOptions


class _Headed(bytes):
    """A stored body that was published with headers (plain ``bytes`` otherwise: no cost)."""

    headers: dict[str, str]


def _stored(body: bytes, headers: Mapping[str, str] | None) -> bytes:
    """``body`` as kept in a queue: with its non-blank string headers attached, if any."""
    clean = {str(k): str(v) for k, v in (headers or {}).items() if k and v is not None and v != ""}
    if not clean:
        return bytes(body)
    out = _Headed(body)
    out.headers = clean
    return out


def _delivery(body: bytes, queue: str, lease: int, count: int) -> Delivery:
    headers: dict[str, str] = dict(getattr(body, "headers", {}))
    return Delivery(
        body=body, queue=queue, receipt=lease, delivery_count=count, headers=headers, carried_headers=headers
    )


@dataclass(frozen=True, slots=True)
class MemoryOptions(URLOptions):
    """The options of ``memory://`` (query or keywords)."""

    transport: ClassVar[str] = "memory"

    visibility_timeout: float = 30.0
    """Seconds a reservation is held before it is handed out again."""


@dataclass
class _Queue:
    ready: deque[tuple[int, bytes, int]] = field(default_factory=deque)  # (msg_id, body, deliveries)
    delayed: list[tuple[float, int, bytes, int]] = field(default_factory=list)  # heap
    reserved: dict[int, tuple[float, bytes, int]] = field(default_factory=dict)  # id -> (deadline, body, n)
    tags: dict[str, list[int]] = field(default_factory=dict)  # tag -> reservation ids it took


class MemoryTransport(BaseTransport):
    """Queues in a dict, guarded by one condition variable."""

    scheme = "memory"
    tagged_reservations = True
    _named: ClassVar[dict[str, MemoryTransport]] = {}
    _named_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, *, visibility_timeout: float = 30.0) -> None:
        self.visibility_timeout = visibility_timeout
        self._queues: dict[str, _Queue] = {}
        self._cond = threading.Condition()
        self._ids = itertools.count(1)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryTransport:
        """``memory://`` (a new instance) or ``memory://name`` (the process's instance of that
        name; its options are those of the first open)."""
        link = TransportURL.split(url)
        parsed = MemoryOptions.parse(link, options)
        name = link.parts.netloc + link.parts.path
        if not name:
            return cls(**parsed.values())
        with cls._named_lock:
            if name not in cls._named:
                cls._named[name] = cls(**parsed.values())
            return cls._named[name]

    def _q(self, queue: str) -> _Queue:
        q = self._queues.get(queue)
        if q is None:
            q = self._queues[queue] = _Queue()
        return q

    def _put(self, queue: str, body: bytes, delay_ms: int, deliveries: int = 0) -> None:
        q = self._q(queue)
        msg_id = next(self._ids)
        if delay_ms > 0:
            heapq.heappush(q.delayed, (time.monotonic() + delay_ms / 1000, msg_id, body, deliveries))
        else:
            q.ready.append((msg_id, body, deliveries))

    def publish(
        self,
        queue: str,
        body: bytes,
        *,
        envelope: Envelope | None = None,
        delay_ms: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        with self._cond:
            self._put(queue, _stored(body, headers), delay_ms)
            self._cond.notify_all()

    def publish_many(self, queue: str, messages: Sequence[Outgoing]) -> None:
        with self._cond:
            for message in messages:
                self._put(queue, bytes(message.body), message.delay_ms)
            self._cond.notify_all()

    def _promote(self, q: _Queue, now: float) -> None:
        while q.delayed and q.delayed[0][0] <= now:
            _, msg_id, body, n = heapq.heappop(q.delayed)
            q.ready.append((msg_id, body, n))
        expired = [k for k, (deadline, _, _) in q.reserved.items() if deadline <= now]
        for msg_id in expired:
            _, body, n = q.reserved.pop(msg_id)
            q.ready.appendleft((msg_id, body, n))

    def reserve(self, queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list[Delivery]:
        end = time.monotonic() + timeout
        with self._cond:
            q = self._q(queue)
            while True:
                now = time.monotonic()
                self._promote(q, now)
                if q.ready or now >= end:
                    break
                wait = end - now
                if q.delayed:
                    wait = min(wait, max(q.delayed[0][0] - now, 0.001))
                self._cond.wait(min(wait, 0.05))
            out: list[Delivery] = []
            while q.ready and len(out) < max_messages:
                _, body, n = q.ready.popleft()
                # A fresh id per reservation: a late settle of an expired, re-reserved message
                # must not touch the newer reservation.
                lease = next(self._ids)
                q.reserved[lease] = (now + self.visibility_timeout, body, n + 1)
                out.append(_delivery(body, queue, lease, n + 1))
            return out

    # -- tagged reservations: the tag's record is the list of reservation ids it took. A lapsed
    # reservation goes back to the head of ``ready`` under its reservation id, so a later call
    # for the tag can take it back while it is still there.

    def _held_by(self, q: _Queue, tag: str, until: float | None) -> list[tuple[int, bytes, int]]:
        """(id, body, count) of the tag's messages still ours; with ``until``, held again till then."""
        out = []
        for lease in q.tags.get(tag, []):
            found = q.reserved.get(lease)
            if found is None:
                back = next((m for m in q.ready if m[0] == lease), None)
                if back is None:
                    continue  # taken by someone else, settled or purged
                q.ready.remove(back)
                found = (0.0, back[1], back[2])
            if until is not None:
                found = (until, found[1], found[2])
            q.reserved[lease] = found
            out.append((lease, found[1], found[2]))
        return out

    def reserve_tagged(self, queue: str, tag: str, *, max_messages: int) -> list[Delivery]:
        check_tag(tag)
        if max_messages < 1:
            raise ValueError(f"max_messages: must be >= 1, got {max_messages}")
        with self._cond:
            q = self._q(queue)
            now = time.monotonic()
            until = now + self.visibility_timeout
            if tag in q.tags:
                held = self._held_by(q, tag, until)
            else:
                self._promote(q, now)
                held = []
                while q.ready and len(held) < max_messages:
                    _, body, n = q.ready.popleft()
                    lease = next(self._ids)
                    q.reserved[lease] = (until, body, n + 1)
                    held.append((lease, body, n + 1))
                q.tags[tag] = [lease for lease, _, _ in held]
            return [_delivery(b, queue, lease, n) for lease, b, n in held]

    def renew_tagged(self, queue: str, tags: Sequence[str]) -> int:
        with self._cond:
            q = self._q(queue)
            until = time.monotonic() + self.visibility_timeout
            return sum(len(self._held_by(q, check_tag(tag), until)) for tag in tags)

    def ack_tagged(self, queue: str, tags: Sequence[str]) -> int:
        with self._cond:
            q = self._q(queue)
            done = 0
            for tag in tags:
                for lease, _, _ in self._held_by(q, check_tag(tag), None):
                    del q.reserved[lease]
                    done += 1
                q.tags.pop(tag, None)
            return done

    def release_tagged(self, queue: str, tags: Sequence[str]) -> int:
        with self._cond:
            q = self._q(queue)
            back: list[tuple[int, bytes, int]] = []
            for tag in tags:
                for lease, body, n in self._held_by(q, check_tag(tag), None):
                    del q.reserved[lease]
                    back.append((lease, body, n))
                q.tags.pop(tag, None)
            q.ready.extendleft(reversed(back))  # back at the head, in their order
            self._cond.notify_all()
            return len(back)

    def ack(self, delivery: Delivery) -> None:
        with self._cond:
            self._q(delivery.queue).reserved.pop(delivery.receipt, None)

    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        with self._cond:
            q = self._q(delivery.queue)
            held = q.reserved.pop(delivery.receipt, None)
            if held is None:
                return
            self._put(delivery.queue, held[1], delay_ms, held[2])
            self._cond.notify_all()

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        with self._cond:
            until = time.monotonic() + self.visibility_timeout
            held = 0
            for delivery in deliveries:
                reserved = self._q(delivery.queue).reserved
                found = reserved.get(delivery.receipt)
                if found is not None:  # lapsed but not yet swept back is still ours: nobody else has it
                    reserved[delivery.receipt] = (until, found[1], found[2])
                    held += 1
            return held

    # Settling is gated on the reservation still being held: once it expired (and may have
    # been handed to another worker) the message will be delivered again, so a late retry or
    # dead-letter must not add a second copy.

    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        with self._cond:
            if self._q(delivery.queue).reserved.pop(delivery.receipt, None) is None:
                return
            self._put(delivery.queue, _stored(body, delivery.headers), delay_ms)
            self._cond.notify_all()

    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        with self._cond:
            if self._q(delivery.queue).reserved.pop(delivery.receipt, None) is None:
                return
            self._put(dlq, _stored(body, delivery.headers), 0)
            self._cond.notify_all()

    def size(self, queue: str) -> int:
        with self._cond:
            q = self._q(queue)
            self._promote(q, time.monotonic())  # a lapsed reservation is waiting again
            return len(q.ready) + len(q.delayed)

    def ready(self, queue: str) -> int:
        with self._cond:
            q = self._q(queue)
            self._promote(q, time.monotonic())
            return len(q.ready)

    def reserved(self, queue: str) -> int:
        with self._cond:
            now = time.monotonic()
            return sum(1 for deadline, _, _ in self._q(queue).reserved.values() if deadline > now)

    def purge(self, queue: str) -> None:
        with self._cond:
            self._queues.pop(queue, None)

    def peek_all(self, queue: str) -> list[bytes]:
        """Bodies waiting on ``queue`` (ready then delayed), for tests."""
        with self._cond:
            q = self._q(queue)
            return [b for _, b, _ in q.ready] + [b for _, _, b, _ in sorted(q.delayed)]
