"""URN -> handler, and what to do when no handler is mapped (docs/standard.md §11).

Each URN gets its own inner chain, composed once when handlers or middleware change: the
feature middleware (idempotency, schema, GDPR...) wrapped around the handler. A message
whose URN has no handler never reaches feature middleware; the unknown-URN strategy
decides instead:

``fail``        a failure like any other: retried with backoff, then dead-lettered
                (reason ``failed``, ``cause: "unknown_urn"``) — for a rolling deploy where a
                newer worker will know the URN
``delete``      acked and logged at WARNING
``release``     put back unchanged after a delay, for another worker of the fleet
``dead_letter`` dead-lettered at once with reason and cause ``unknown_urn``

A handler is a function of one argument, the :class:`~babelq.runtime.message.Message` (or, when
that parameter is annotated with a payload type, ``data`` converted to it:
:mod:`babelq.runtime.payloads`), checked when it is registered. It may be ``async def``: the
coroutine runs to completion on the App's event loop (:mod:`babelq.runtime.event_loop`) before
its outcome is decided, with the same outcomes as a plain function.

A handler (or feature middleware) that raises :class:`~babelq.errors.UnavailableError` gets
its message put back (:meth:`Outcome.unavailable <babelq.runtime.outcome.Outcome.unavailable>`):
a dependency being down is never the message's fault.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, get_args

from babelq.envelope import check_urn
from babelq.errors import ConfigurationError, UnavailableError
from babelq.errors import HandlerTimeoutError as HandlerTimeoutError
from babelq.runtime import rules
from babelq.runtime.errors import PermanentError, UnknownURNError
from babelq.runtime.event_loop import HandlerLoop, is_coroutine
from babelq.runtime.message import Message
from babelq.runtime.middleware import Middleware, Next, compose
from babelq.runtime.outcome import FAILED, REJECTED, SCHEMA_INVALID, UNKNOWN_URN, Outcome
from babelq.runtime.payloads import PayloadError, converter, payload_type
from babelq.runtime.rate_limit import RateLimit

#: A handler takes the message and returns nothing; raising means the attempt failed.
Handler = Callable[[Message], object]
UnknownURNStrategy = Literal["fail", "delete", "release", "dead_letter"]
UNKNOWN_URN_STRATEGIES: tuple[str, ...] = get_args(UnknownURNStrategy)

logger = logging.getLogger("babelq.runtime")

_HANDLED = Outcome.ack()  #: the outcome of every handler run that returned (one shared value)


def invoke(handler: Handler, loop: HandlerLoop) -> Next:
    """The innermost step: run ``handler`` and turn its exception, if any, into an outcome.

    A coroutine (or other awaitable) it returns is run to completion on ``loop`` first: an
    ``async def`` handler, or a plain function wrapping one, is done only when it has run."""

    def call(message: Message) -> Outcome:
        try:
            result = handler(message)
            if result is not None and is_coroutine(result):
                loop.run(result)  # type: ignore[arg-type]
        except PayloadError as exc:  # data that does not fit the handler's type: never retried
            return Outcome.dead_letter(
                rules.REASON_FAILED, error=exc, cause=rules.SCHEMA, label=SCHEMA_INVALID
            )
        except PermanentError as exc:
            return Outcome.dead_letter("failed", error=exc, cause=exc.cause, label=REJECTED)
        except UnavailableError as exc:  # "my dependency is down": put back, not the message's fault
            return Outcome.unavailable(exc)
        except Exception as exc:
            return Outcome.failed(exc, label=FAILED)
        return _HANDLED

    return call


def typed(urn: str, handler: Handler) -> Handler:
    """``handler`` as a function of the message: one that asks for a payload type gets ``data``
    converted to it (:mod:`babelq.runtime.payloads`); others are returned as they are."""
    tp = payload_type(urn, handler)
    if tp is None:
        return handler
    convert = converter(tp)
    target: Callable[[Any], object] = handler

    def with_payload(message: Message) -> object:
        return target(convert(message.data))

    return with_payload


def is_async(handler: Handler) -> bool:
    """Whether calling ``handler`` makes a coroutine (a function, a partial, a callable object)."""
    call = handler if inspect.isroutine(handler) or isinstance(handler, functools.partial) else None
    target = call if call is not None else getattr(type(handler), "__call__", handler)  # noqa: B004
    return inspect.iscoroutinefunction(target)


def timed(urn: str, handler: Handler, timeout: float | None, coroutine: bool) -> Handler:
    """``handler`` with its coroutine cancelled after ``timeout`` seconds (None: no limit).

    Only for ``async def`` handlers: a coroutine can be cancelled at its next ``await``, while a
    thread running Python or blocked in C cannot be stopped without risking the process."""
    if timeout is None:
        return handler
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ConfigurationError(
            f"handler for {urn!r}: timeout must be a number of seconds > 0, got {timeout!r}"
        )
    if not coroutine:
        raise ConfigurationError(
            f"handler for {urn!r}: timeout applies to async def handlers only (a thread cannot be "
            "interrupted safely); make the handler async, or bound the work it waits for"
        )
    seconds = float(timeout)

    async def within_timeout(result: Awaitable[object]) -> object:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            return await asyncio.wait_for(result, seconds)
        except TimeoutError:
            if loop.time() - started < seconds:  # the handler's own timeout (a client's): its error
                raise
            raise HandlerTimeoutError(f"handler for {urn} ran over its timeout of {seconds:g} s") from None

    def with_timeout(message: Message) -> object:
        result = handler(message)
        return within_timeout(result) if is_coroutine(result) else result  # type: ignore[arg-type]

    return with_timeout


def limited(handler: Handler, urn: str, limit: RateLimit | None) -> Handler:
    """``handler`` started only when ``limit`` gives it a token (None: no limit)."""
    if limit is None:
        return handler
    bucket = limit.bound(urn)

    def rate_limited(message: Message) -> object:
        bucket.wait()
        return handler(message)

    return rate_limited


def check_handler(urn: str, handler: Handler) -> None:
    """Refuse, at registration, a handler that cannot be called with the message alone."""
    if not callable(handler):
        raise ConfigurationError(f"handler for {urn!r}: {handler!r} is not callable")
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # a builtin without a signature: it will say so when called
        return
    try:
        signature.bind(None)
    except TypeError:
        name = getattr(handler, "__qualname__", None) or type(handler).__qualname__
        raise ConfigurationError(
            f"handler for {urn!r}: {name}{signature} must take one argument, the message"
        ) from None


def guarded(chain: Next) -> Next:
    """``chain`` with exceptions escaping from middleware turned into a failed attempt
    (an :class:`~babelq.errors.UnavailableError` into a release: a store being down is not
    the message's fault)."""

    def call(message: Message) -> Outcome:
        try:
            return chain(message)
        except UnavailableError as exc:
            return Outcome.unavailable(exc)
        except Exception as exc:
            return Outcome.failed(exc, label=FAILED)

    return call


class Router:
    """Picks the chain for a message's URN; applies the unknown-URN strategy otherwise."""

    def __init__(
        self,
        *,
        unknown_urn: UnknownURNStrategy = "fail",
        unknown_urn_delay_ms: int = 30_000,
        strict_urns: bool = False,
        log: logging.Logger = logger,
    ) -> None:
        if unknown_urn not in UNKNOWN_URN_STRATEGIES:
            raise ConfigurationError(
                f"unknown_urn: must be one of {', '.join(UNKNOWN_URN_STRATEGIES)}, got {unknown_urn!r}"
            )
        self.unknown_urn = unknown_urn
        self.unknown_urn_delay_ms = unknown_urn_delay_ms
        self.strict_urns = strict_urns
        self.log = log
        self._handlers: dict[str, Handler] = {}
        self._middleware: list[Middleware] = []
        self._chains: dict[str, Next] = {}
        #: where coroutine handlers run (driven by the handling threads: see HandlerLoop)
        self.loop = HandlerLoop()

    # -- configuration -------------------------------------------------------------------
    def add(
        self,
        urn: str,
        handler: Handler,
        *,
        timeout: float | None = None,
        rate: RateLimit | float | None = None,
    ) -> None:
        """Map ``urn`` to ``handler`` (a URN has at most one handler); ``timeout``: see :func:`timed`;
        ``rate``: see :mod:`babelq.runtime.rate_limit`."""
        if type(urn) is not str or not urn.strip():
            raise ConfigurationError(f"handler URN must be a non-empty string, got {urn!r}")
        check_urn(urn, strict=self.strict_urns)
        check_handler(urn, handler)
        if urn in self._handlers:
            raise ConfigurationError(f"a handler is already registered for {urn!r}")
        limit = rate if isinstance(rate, RateLimit) or rate is None else RateLimit(rate)
        run = timed(urn, typed(urn, handler), timeout, is_async(handler))
        self._handlers[urn] = limited(run, urn, limit)
        self._rebuild()

    def use(self, middleware: Middleware) -> None:
        """Add feature middleware, innermost so far (it runs after those added before it)."""
        if not callable(middleware):
            raise ConfigurationError(f"middleware {middleware!r} is not callable")
        self._middleware.append(middleware)
        self._rebuild()

    def close(self) -> None:
        """Stop the event loop of coroutine handlers, if one was started."""
        self.loop.close()

    @property
    def urns(self) -> Sequence[str]:
        return tuple(self._handlers)

    @property
    def middleware(self) -> Sequence[Middleware]:
        return tuple(self._middleware)

    def _rebuild(self) -> None:
        layers = tuple(self._middleware)
        if not layers:  # invoke() already turns every exception of the handler into an outcome
            self._chains = {urn: invoke(handler, self.loop) for urn, handler in self._handlers.items()}
            return
        self._chains = {
            urn: guarded(compose(layers, invoke(handler, self.loop)))
            for urn, handler in self._handlers.items()
        }

    # -- consume path ----------------------------------------------------------------------
    def __call__(self, message: Message) -> Outcome:
        chain = self._chains.get(message.urn)
        if chain is not None:
            return chain(message)
        return self._unknown(message)

    def _unknown(self, message: Message) -> Outcome:
        strategy = self.unknown_urn
        if strategy == "fail":
            return Outcome.failed(UnknownURNError(message.urn), cause="unknown_urn", label=UNKNOWN_URN)
        if strategy == "release":
            return Outcome.release(self.unknown_urn_delay_ms, UNKNOWN_URN)
        if strategy == "dead_letter":
            return Outcome.dead_letter(
                rules.REASON_UNKNOWN_URN, error=rules.unknown_urn_error(message.urn), cause=rules.UNKNOWN_URN,
                label=UNKNOWN_URN,
            )
        self.log.warning(
            "deleting %s id=%s trace_id=%s: no handler for this URN (unknown_urn strategy 'delete')",
            message.urn, message.id, message.trace_id,
            extra={"trace_id": message.trace_id, "message_id": message.id},
        )
        return Outcome.ack(UNKNOWN_URN)
