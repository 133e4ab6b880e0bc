"""The event loop coroutine handlers run on: one per App, driven by the threads that handle.

The consume path stays synchronous (middleware decide on a finished outcome), so an ``async
def`` handler is run to completion from the thread that handles its message. One loop for the
whole App means a client made inside a handler (an HTTP session, a database pool) can be used by
every later handler; a handler that blocks the loop delays the others, as in any asyncio program.

Handler threads drive the loop themselves, one at a time: a thread with a coroutine to run
becomes the loop's *driver* when nobody drives it, and runs the loop until its own coroutine
has ended. A thread that finds the loop driven hands its coroutine to the driver and waits;
when the driver's coroutine ends while others still run, the driver hands the loop to one of
their threads. So up to ``concurrency`` coroutines are in flight on the one loop, and a
coroutine that never suspends costs about what a plain function call does: no thread hand-over.
Between handlers the loop is idle, so a task a handler leaves running moves on only while a
later handler runs; the App's ``close`` cancels what is left.

A thread that already runs a loop of its own (a sync drain called from a coroutine) cannot drive
a second one: the first such call moves the loop to a thread of its own for good.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from types import CoroutineType
from typing import Any, TypeVar

from babelq.errors import ConfigurationError, UnavailableError

T = TypeVar("T")

#: how long closing waits for the loop's thread to end
_CLOSE_WAIT_S = 5.0
#: turns of ready callbacks a driver whose coroutine has ended runs for coroutines handed to it
#: (the first starts their tasks, the second takes their first steps)
_HELPING_TURNS = 2


class _Call:
    """One coroutine run to completion for one handling thread."""

    __slots__ = ("drive", "ended", "wake")

    def __init__(self, waiting: bool) -> None:
        #: the thread of this call drives the loop now
        self.drive = not waiting
        #: the coroutine's task once it has ended (for a coroutine handed to the driver)
        self.ended: asyncio.Task[Any] | None = None
        #: released when the waiting thread may go on: its coroutine ended, or the loop is its to drive
        self.wake: threading.Lock | None = None
        if waiting:
            self.wake = threading.Lock()
            self.wake.acquire()


class HandlerLoop:
    """An App's asyncio loop: created on first use, closed by :meth:`close` (and made anew if
    used again). See the module's docstring for how it is driven."""

    def __init__(self, name: str = "babelq-asyncio") -> None:
        self.name = name  # of the loop's own thread, when a caller inside another loop needs one
        self._lock = threading.Lock()  # guards every attribute below and each _Call's fields
        self._idle = threading.Condition(self._lock)  # notified when the loop loses its driver
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._driver: _Call | None = None
        self._waiting: list[_Call] = []  # calls handed to the driver, not ended yet
        self._wants_thread = False  # a caller waits to move the loop to a thread of its own
        self._idle_waiters = 0  # threads waiting for the loop to lose its driver
        self._close_after_run = False

    @property
    def running(self) -> bool:
        """Whether the loop exists (it has run a coroutine and was not closed since)."""
        return self._loop is not None

    def _the_loop(self) -> asyncio.AbstractEventLoop:
        # called with self._lock held
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
        if caller is None:
            return self._run_driven(coroutine)
        return self._run_on_thread(coroutine)

    # -- driven by the handling threads -------------------------------------------------------
    def _run_driven(self, coroutine: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if self._thread is not None or self._wants_thread:
                call = None
            else:
                loop = self._the_loop()
                call = _Call(waiting=self._driver is not None)
                if call.drive:
                    self._driver = call
                else:
                    self._waiting.append(call)
                    context = contextvars.copy_context()
                    loop.call_soon_threadsafe(self._start, loop, coroutine, call, context)
        if call is None:
            return self._run_on_thread(coroutine)
        if call.drive:
            try:
                task: asyncio.Task[T] = asyncio.Task(coroutine, loop=loop)
            except BaseException:
                self._leave(loop)
                raise
            self._drive(loop, task.done, task)
            return _result(task)
        assert call.wake is not None
        call.wake.acquire()  # until the coroutine has ended, or the loop is handed to us
        if call.drive:
            self._drive(loop, lambda: call.ended is not None, None)
        ended: asyncio.Task[T] | None = call.ended
        assert ended is not None
        return _result(ended)

    def _start(
        self,
        loop: asyncio.AbstractEventLoop,
        coroutine: Coroutine[Any, Any, Any],
        call: _Call,
        context: contextvars.Context,
    ) -> None:
        task = asyncio.Task(coroutine, loop=loop, context=context)
        task.add_done_callback(functools.partial(self._ended, call))

    def _ended(self, call: _Call, task: asyncio.Task[Any]) -> None:
        """Hand a coroutine that was handed over back to its thread once it has ended."""
        with self._lock:
            call.ended = task
            if call is self._driver:  # its thread was handed the loop meanwhile, and drives it
                _stop(task)
                return
            if call in self._waiting:
                self._waiting.remove(call)
            assert call.wake is not None
            call.wake.release()

    def _drive(
        self, loop: asyncio.AbstractEventLoop, done: Callable[[], bool], task: asyncio.Task[Any] | None
    ) -> None:
        """Run ``loop`` on this thread until ``done()``; then hand the loop to a thread whose
        coroutine still runs, or leave it idle. ``task``, if given, is what ``done`` waits for.

        Callbacks already ready run first without polling for I/O: a coroutine that does not
        suspend ends there, with no system call that would let the other handling threads in
        (they would find the loop driven and wait for it)."""
        try:
            _ready_turn(loop)
            if not done():
                if task is not None:
                    task.add_done_callback(_stop)
                while not done():  # a handler that stopped the loop itself: go on
                    loop.run_forever()
            for _ in range(_HELPING_TURNS):  # coroutines handed over meanwhile may end at once
                if not self._waiting:
                    break
                _ready_turn(loop)
        finally:
            self._leave(loop)

    def _leave(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._driver = None
            heir = None
            if self._waiting and not self._wants_thread:
                heir = self._waiting.pop(0)
                heir.drive = True
                self._driver = heir
                assert heir.wake is not None
                heir.wake.release()
            elif self._idle_waiters:
                self._idle.notify_all()
            finish = heir is None and self._close_after_run
            if finish:
                self._close_after_run = False
                if self._loop is loop:
                    self._loop = None
        if finish:  # close() was called from inside a coroutine
            _wind_down(loop)

    def _wait_idle(self) -> None:
        # called with self._lock held
        self._idle_waiters += 1
        try:
            while self._driver is not None:
                self._idle.wait()
        finally:
            self._idle_waiters -= 1

    # -- on a thread of its own -------------------------------------------------------------
    def _started(self) -> asyncio.AbstractEventLoop:
        """The loop, running on its own thread (started now if it is not)."""
        with self._lock:
            if self._thread is None:
                self._wants_thread = True
                try:
                    self._wait_idle()  # never while a handling thread drives it
                    loop = self._the_loop()
                    ready = threading.Event()
                    thread = threading.Thread(
                        target=self._main, args=(loop, ready), name=self.name, daemon=True
                    )
                    thread.start()
                    ready.wait()
                    self._thread = thread
                finally:
                    self._wants_thread = False
            assert self._loop is not None
            return self._loop

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
            if loop is None:
                return
            if thread is None:  # driven by the handling threads
                if _running_loop() is loop:  # closed from a handler: the loop closes when it is left
                    self._close_after_run = True
                    return
                self._wait_idle()
                if self._loop is not loop:  # closed meanwhile
                    return
            self._loop = self._thread = None
        if thread is None:
            _wind_down(loop)
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


def _result(task: asyncio.Task[T]) -> T:
    """What an ended task's coroutine returned, or its exception raised here."""
    if task.cancelled():
        raise UnavailableError("handler cancelled: the App's event loop is closing")
    error = task.exception()
    if error is not None:
        raise error
    return task.result()


def _stop(task: asyncio.Task[Any]) -> None:
    """A done callback: stop the loop the task ran on, so the thread driving it goes on."""
    loop = task.get_loop()
    if loop.is_running():
        loop.stop()


def _ready_turn(loop: asyncio.AbstractEventLoop) -> None:
    """Run the callbacks ready on ``loop`` now, as one turn of the loop does but without polling
    for I/O (which the next turn of ``run_forever`` does)."""
    ready = getattr(loop, "_ready", None)  # asyncio's base loop; other loops just run normally
    if ready is None or loop.get_debug():
        return
    asyncio._set_running_loop(loop)
    try:
        for _ in range(len(ready)):
            handle = ready.popleft()
            if not handle._cancelled:
                handle._run()
    finally:
        asyncio._set_running_loop(None)


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
