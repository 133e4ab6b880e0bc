"""Handing publications to a transport: blocking, and from a coroutine without blocking its loop.

Publications are grouped per queue and sent as one batch each; a publication that carries
native headers goes alone (``Transport.publish`` is where headers travel). From a coroutine,
a transport with an asyncio client of its own (``async_writer()``: Redis, both layouts) is
awaited directly; any other transport's blocking call runs on a worker thread
(``asyncio.to_thread``), which every transport allows since handlers publish from their own
threads too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from babelq.runtime.middleware import Publication
from babelq.transports.base import Outgoing, Transport


def by_queue(publications: Sequence[Publication]) -> dict[str, list[Publication]]:
    grouped: dict[str, list[Publication]] = {}
    for publication in publications:
        grouped.setdefault(publication.queue, []).append(publication)
    return grouped


def send_publications(transport: Transport, publications: Sequence[Publication]) -> None:
    """Publish ``publications`` (already through the publish middleware), blocking."""
    for queue, group in by_queue(publications).items():
        if any(p.headers for p in group):
            for p in group:  # headers travel one publication at a time
                send: Any = transport.publish
                send(queue, p.envelope.encode(), envelope=p.envelope, delay_ms=p.delay_ms, headers=p.headers)
        elif len(group) == 1:
            p = group[0]
            transport.publish(queue, p.envelope.encode(), envelope=p.envelope, delay_ms=p.delay_ms)
        else:
            outgoing = [Outgoing(p.envelope.encode(), p.envelope, p.delay_ms) for p in group]
            transport.publish_many(queue, outgoing)


class _AsyncWriter(Protocol):
    async def publish(
        self, queue: str, items: Sequence[tuple[bytes, int, Mapping[str, str] | None]]
    ) -> None: ...

    async def aclose(self) -> None: ...


class AsyncSender:
    """Sends publications from a coroutine; :meth:`for_transport` picks how."""

    #: "asyncio" when the transport's own asyncio client writes, "thread" otherwise
    mode = "thread"

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    @staticmethod
    def for_transport(transport: Transport) -> AsyncSender:
        make_writer = getattr(transport, "async_writer", None)
        writer = make_writer() if callable(make_writer) else None
        return NativeSender(transport, writer) if writer is not None else AsyncSender(transport)

    async def send(self, publications: Sequence[Publication]) -> None:
        await asyncio.to_thread(send_publications, self.transport, publications)

    async def aclose(self) -> None:
        """Close what this sender opened on the running loop."""


class NativeSender(AsyncSender):
    """Awaits the transport's asyncio writer: nothing waits on a thread."""

    mode = "asyncio"

    def __init__(self, transport: Transport, writer: _AsyncWriter) -> None:
        super().__init__(transport)
        self.writer = writer

    async def send(self, publications: Sequence[Publication]) -> None:
        for queue, group in by_queue(publications).items():
            items = [(p.envelope.encode(), p.delay_ms, p.headers or None) for p in group]
            await self.writer.publish(queue, items)

    async def aclose(self) -> None:
        await self.writer.aclose()
