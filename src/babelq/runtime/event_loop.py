"""The event loop coroutine handlers run on: one per App, driven one of two ways.

The consume path stays synchronous (middleware decide on a finished outcome), so an ``async
def`` handler is run to completion from the thread that handles its message. One loop for the
whole App means a client made inside a handler (an HTTP session, a database pool) can be used by
every later handler; a handler that blocks the loop delays the others, as in any asyncio program.

* **Inline** (an App with ``concurrency=1``): the handler thread runs the loop itself for the
  time of each coroutine. No hand-over between threads: a call costs about what a plain
  function's does. Between handlers the loop is idle, so a task a handler leaves running moves
  on only while a later handler runs.
* **On a thread of its own** (``concurrency >= 2``): started with the first coroutine; each
  handler thread hands its coroutine over and waits for it, so up to ``concurrency`` coroutines
  are in flight on the one loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Coroutine
from concurrent.futures import Future
from types import CoroutineType
from typing import Any, TypeVar

from babelq.errors import ConfigurationError, UnavailableError

T = TypeVar("T")

#: how long closing waits for the loop's thread to end
_CLOSE_WAIT_S = 5.0


class HandlerLoop:
    """An App's asyncio loop: created on first use, closed by :meth:`close` (and made anew if
    used again). :attr:`inline` says how it is driven (see the module's docstring); a loop that
    already runs on its own thread stays there."""

    def __init__(self, name: str = "babelq-asyncio", *, inline: bool = False) -> None:
        self.name = name
        #: drive the loop from the calling thread while it is not running on its own thread
        self.inline = inline
        self._lock = threading.Lock()  # guards _loop and _thread
        self._driving = threading.Lock()  # held by the thread running the loop inline
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._close_after_run = False

    @property
    def running(self) -> bool:
        """Whether the loop exists (it has run a coroutine and was not closed since)."""
        return self._loop is not None

    def _the_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            return self._loop

    def run(self, awaitable: Awaitable[T]) -> T:
        """Run ``awaitable`` on the loop to completion and return its result.

        It runs in a copy of the caller's context, so context variables set by the consume path
        (the current message, a trace) are what the coroutine sees. A coroutine cancelled because
        the loop is closing raises :class:`~babelq.errors.UnavailableError`: its message is put
        back, never failed."""
        coroutine = _as_coroutine(awaitable)
        caller = _running_loop()
        if caller is not None and caller is self._loop:
            coroutine.close()
            raise ConfigurationError(
                "a coroutine cannot be run to completion from the App's own event loop: await it"
            )
        # a thread that already runs a loop of its own (a sync call inside a coroutine) cannot
        # run a second one: it hands over to the loop's thread instead
        if self.inline and caller is None and self._thread is None:
            with self._driving:
                if self._thread is None:
                    return self._run_here(coroutine)
        return self._run_on_thread(coroutine)

    # -- inline ---------------------------------------------------------------------------
    def _run_here(self, coroutine: Coroutine[Any, Any, T]) -> T:
        loop = self._the_loop()
        outcome: list[tuple[bool, Any]] = []
        # the task stops the loop itself as it ends, so a coroutine that never suspends costs one
        # turn of the loop (run_until_complete takes a second one for its done callback)
        loop.create_task(_to_the_end(coroutine, outcome, loop))
        try:
            while not outcome:  # a handler that stopped the loop itself: go on until it ends
                loop.run_forever()
        finally:
            if self._close_after_run:  # close() was called from inside the coroutine
                self._close_after_run = False
                self._finish(loop)
        done, value = outcome[0]
        if done:
            result: T = value
            return result
        if isinstance(value, asyncio.CancelledError):
            raise UnavailableError("handler cancelled: the App's event loop is closing") from None
        raise value

    def _finish(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cancel what is left on a loop no thread is running, let it end, close the loop."""
        with self._lock:
            if self._loop is loop:
                self._loop = None
        _wind_down(loop)

    # -- on a thread of its own -------------------------------------------------------------
    def _started(self) -> asyncio.AbstractEventLoop:
        """The loop, running on its own thread (started now if it is not)."""
        if self._thread is not None and self._loop is not None:
            return self._loop
        with self._driving:  # never start the thread while another thread drives the loop inline
            loop = self._the_loop()
            with self._lock:
                if self._thread is None:
                    ready = threading.Event()
                    thread = threading.Thread(
                        target=self._main, args=(loop, ready), name=self.name, daemon=True
                    )
                    thread.start()
                    ready.wait()
                    self._thread = thread
            return loop

    @staticmethod
    def _main(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            _wind_down(loop)  # handlers still running at close: their threads see UnavailableError

    def _run_on_thread(self, coroutine: Coroutine[Any, Any, T]) -> T:
        loop = self._started()
        context = contextvars.copy_context()
        done: Future[T] = Future()

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
        except RuntimeError:  # the loop closed between _started() and here
            coroutine.close()
            raise UnavailableError("handler not started: the App's event loop is closed") from None
        return done.result()

    def close(self) -> None:
        """Stop and close the loop: coroutines still running are cancelled (their messages go back)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            if thread is not None:
                self._loop = self._thread = None
        if loop is None:
            return
        if thread is None:  # driven inline
            if _running_loop() is loop:  # closed from a handler: the loop closes when it returns
                self._close_after_run = True
                return
            with self._driving:
                self._finish(loop)
            return
        if thread is threading.current_thread():  # closed from a handler: the loop ends when it returns
            loop.call_soon(loop.stop)
            return
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:
            return
        thread.join(_CLOSE_WAIT_S)


def _wind_down(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks left on ``loop`` (no thread runs it now), let them end, close it."""
    try:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


async def _to_the_end(
    coroutine: Coroutine[Any, Any, T], outcome: list[tuple[bool, Any]], loop: asyncio.AbstractEventLoop
) -> None:
    """Await ``coroutine``, keep its result or exception in ``outcome``, then stop ``loop``."""
    try:
        outcome.append((True, await coroutine))
    except BaseException as exc:  # handed to the caller, which raises it on its own thread
        outcome.append((False, exc))
    finally:
        loop.stop()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The loop running on this thread, if any (without raising: this is on every call)."""
    return asyncio._get_running_loop()


def _as_coroutine(awaitable: Awaitable[T]) -> Coroutine[Any, Any, T]:
    if type(awaitable) is CoroutineType or asyncio.iscoroutine(awaitable):
        return awaitable
    return _awaited(awaitable)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def is_coroutine(value: object) -> bool:
    """Whether ``value`` is something a handler returned that still has to run (a coroutine or
    another awaitable): returning one is the handler not having run yet, never "done"."""
    return type(value) is CoroutineType or isinstance(value, Coroutine) or hasattr(value, "__await__")
