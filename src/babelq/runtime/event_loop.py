"""The event loop coroutine handlers run on: one per App, on a thread of its own.

The consume path stays synchronous (middleware decide on a finished outcome), so an ``async
def`` handler is run to completion from the thread that handles its message: the coroutine is
scheduled on this loop and that thread waits for it. With ``concurrency`` handler threads at
most ``concurrency`` coroutines are in flight. One loop for the whole App means a client made
inside a handler (an HTTP session, a database pool) can be used by every later handler; a
handler that blocks the loop delays the others, as in any asyncio program.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Coroutine
from concurrent.futures import Future
from typing import TypeVar

from babelq.errors import UnavailableError

T = TypeVar("T")

#: how long closing waits for the loop's thread to end
_CLOSE_WAIT_S = 5.0


class EventLoopThread:
    """An asyncio loop on a daemon thread, started on first use and restartable after :meth:`close`."""

    def __init__(self, name: str = "babelq-asyncio") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._loop is not None

    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop, started now if it is not running."""
        loop = self._loop
        if loop is not None:
            return loop
        with self._lock:
            if self._loop is None:
                started = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(
                    target=self._main, args=(started, ready), name=self.name, daemon=True
                )
                thread.start()
                ready.wait()
                self._loop, self._thread = started, thread
            return self._loop

    @staticmethod
    def _main(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
            pending = asyncio.all_tasks(loop)
            for task in pending:  # handlers still running at close: their threads see UnavailableError
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def run(self, awaitable: Awaitable[T]) -> T:
        """Run ``awaitable`` on the loop and wait for it from this (non-loop) thread.

        It runs in a copy of the caller's context, so context variables set by the consume path
        (the current message, a trace) are what the coroutine sees. A coroutine cancelled because
        the loop is closing raises :class:`~babelq.errors.UnavailableError`: its message is put
        back, never failed."""
        loop = self.loop()
        context = contextvars.copy_context()
        done: Future[T] = Future()
        coroutine = awaitable if asyncio.iscoroutine(awaitable) else _awaited(awaitable)

        def finish(task: asyncio.Task[T]) -> None:
            if task.cancelled():
                done.set_exception(UnavailableError("handler cancelled: the App's event loop is closing"))
            elif (error := task.exception()) is not None:
                done.set_exception(error)
            else:
                done.set_result(task.result())

        def start() -> None:
            try:
                task = loop.create_task(coroutine, context=context)
            except BaseException as exc:
                done.set_exception(exc)
                raise
            task.add_done_callback(finish)

        try:
            loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop closed between loop() and here
            coroutine.close()
            raise UnavailableError("handler not started: the App's event loop is closed") from None
        return done.result()

    def close(self) -> None:
        """Stop the loop: coroutines still running are cancelled (their messages go back)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        if thread is threading.current_thread():  # closed from a handler: the loop ends when it returns
            loop.call_soon(loop.stop)
            return
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:
            return
        thread.join(_CLOSE_WAIT_S)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def is_coroutine(value: object) -> bool:
    """Whether ``value`` is something a handler returned that still has to run (a coroutine or
    another awaitable): returning one is the handler not having run yet, never "done"."""
    return isinstance(value, Coroutine) or hasattr(value, "__await__")
