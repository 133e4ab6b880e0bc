"""FastAPI and Starlette: consume alongside the web app, publish from endpoints without blocking.

::

    from typing import Annotated
    from fastapi import Depends, FastAPI
    from babelq.integrations.fastapi import Publisher, lifespan

    worker = App("redis://127.0.0.1:6379/0", queue="orders")   # handlers as usual
    api = FastAPI(lifespan=lifespan(worker))
    Publish = Annotated[Publisher, Depends(Publisher.of(worker))]

    @api.post("/orders")
    async def place(order: dict, publish: Publish):
        return {"id": await publish("urn:babel:orders:created", order)}

:func:`lifespan` starts the App's consumer when the web app starts (on a thread of its own: the
consume loop and its handlers never block the server's event loop; ``async def`` handlers run on
the App's own loop) and stops it gracefully when the web app shuts down: fetching stops,
in-flight handlers finish within the App's grace period, and the App is closed. With
``consume=False`` it only closes the App at shutdown (a web process that publishes and leaves
consuming to workers). Nothing here imports FastAPI: a lifespan is a plain async context
manager, so the same function serves Starlette.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from babelq.runtime import App

#: seconds the shutdown waits for the consumer beyond the App's grace period
_STOP_MARGIN_S = 5.0


def lifespan(
    app: App, *, consume: bool = True, queue: str | None = None
) -> Callable[[Any], AbstractAsyncContextManager[Mapping[str, Any]]]:
    """A lifespan for ``FastAPI(lifespan=...)``/``Starlette(lifespan=...)`` that runs ``app``.

    The state it yields holds the App under ``"babelq"`` (``request.state.babelq``)."""

    @asynccontextmanager
    async def run(_: Any) -> AsyncIterator[Mapping[str, Any]]:
        failure: list[BaseException] = []
        consumer: threading.Thread | None = None
        if consume:

            def loop() -> None:
                try:
                    app.run(queue=queue, handle_signals=False)  # the server owns the signals
                except BaseException as exc:  # kept for the shutdown to raise
                    failure.append(exc)

            consumer = threading.Thread(target=loop, name="babelq-consumer", daemon=True)
            consumer.start()
        try:
            yield {"babelq": app}
        finally:
            if consumer is not None:
                app.stop()
                await asyncio.to_thread(consumer.join, app.tuning.grace_period + _STOP_MARGIN_S)
            await app.aclose()
        if failure:
            raise failure[0]

    return run


class Publisher:
    """A FastAPI dependency: ``await publish(urn, data, **options)`` is ``app.publish_async``."""

    def __init__(self, app: App) -> None:
        self.app = app

    @classmethod
    def of(cls, app: App) -> Callable[[], Publisher]:
        """The dependency callable for ``Depends(...)``: every request gets the same publisher."""
        publisher = cls(app)
        return lambda: publisher

    async def __call__(self, urn: str, data: Mapping[str, Any] | object | None = None, **options: Any) -> str:
        return await self.app.publish_async(urn, data, **options)
