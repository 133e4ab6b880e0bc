"""The application object: publish envelopes and consume them with handlers per URN.

>>> from babelq.runtime import App
>>> app = App("memory://", queue="orders")
>>> @app.handler("urn:babel:orders:created")
... def created(message):
...     print(message.data["order_id"])
>>> _ = app.publish("urn:babel:orders:created", {"order_id": 1042})
>>> app.run_until_empty()
1042
1

One App talks to one transport (an object, or a URL opened with
:func:`babelq.transports.open_transport`). It can be created unbound and bound later
(``app.bind(url)``), which is how ``babelq worker --url ... --app module:app`` runs an
application module against any broker.

A broker that is down when the App is bound to its URL is not an error yet: the App logs it
and opens the transport when it is first used -- :meth:`App.run` keeps trying (capped
backoff, one line per attempt), ``publish`` and ``drain`` raise
:class:`~babelq.errors.UnavailableError` while it is still down. A worker started before its
broker therefore waits for it instead of dying.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import replace
from typing import Any, TypeVar

from babelq.envelope import Envelope, make, now_ms
from babelq.envelope.constants import DEFAULT_QUEUE
from babelq.errors import ConfigurationError, UnavailableError
from babelq.runtime import context
from babelq.runtime.backoff import Backoff
from babelq.runtime.consumer import Consumer, Limits, Tuning, queue_list
from babelq.runtime.counters import Counters
from babelq.runtime.disposition import DeadLetterPolicy, Disposer, FailurePolicy
from babelq.runtime.middleware import Middleware, Publication, PublishMiddleware, compose_publish
from babelq.runtime.outage import OutagePolicy, RetryPause, broker_label
from babelq.runtime.outcome import UNAVAILABLE_DELAY_MS
from babelq.runtime.pipeline import Pipeline
from babelq.runtime.rate_limit import RateLimit
from babelq.runtime.routing import Handler, Router, UnknownURNStrategy
from babelq.runtime.rules import RetryPolicy
from babelq.runtime.sending import AsyncSender, send_publications
from babelq.runtime.signals import stop_on_signals
from babelq.transports import open_transport
from babelq.transports.base import Transport
from babelq.urls import one_line, redact

H = TypeVar("H", bound=Handler)

logger = logging.getLogger("babelq.runtime")


class App:
    """Handlers per URN over one transport, with retries, dead letters and graceful shutdown.

    ``max_attempts`` counts handler runs: a message whose handler failed that many times is
    dead-lettered (reason ``failed``). ``dead_letter`` says where such messages go (``queue``
    = ``<queue>.dlq``; ``release`` = kept on the queue with ``max_delay_ms``; ``delete``).
    ``concurrency`` handler threads share at most ``prefetch`` reserved messages (default:
    32, or twice the concurrency when that is more). Leases of held messages are renewed
    every third of the transport's visibility timeout; with ``concurrency=1`` that happens
    between handlers, so a handler that can outlast the lease wants ``concurrency >= 2``.
    A message whose handler or store raised :class:`~babelq.errors.UnavailableError` is put
    back unchanged after ``unavailable_delay_ms`` (never a failed attempt, never dead-lettered).
    A consumer with nothing to do dead-letters the expired messages waiting on its queues, delayed
    ones included, at most every ``expire_every`` seconds (0 or None: never; transports that
    cannot read a queue without taking its messages, AMQP and SQS, never do;
    :mod:`babelq.runtime.expiry_sweep`).
    """

    def __init__(
        self,
        transport: Transport | str | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        concurrency: int = 1,
        prefetch: int | None = None,
        max_attempts: int = 3,
        backoff: Backoff | None = None,
        unknown_urn: UnknownURNStrategy = "fail",
        unknown_urn_delay_ms: int = 30_000,
        dead_letter: DeadLetterPolicy = "queue",
        max_delay_ms: int = 900_000,
        unavailable_delay_ms: int = UNAVAILABLE_DELAY_MS,
        middleware: Sequence[Middleware] = (),
        publish_middleware: Sequence[PublishMiddleware] = (),
        grace_period: float = 30.0,
        poll_timeout: float = 1.0,
        expire_every: float | None = 60.0,
        strict_urns: bool = False,
        log: logging.Logger | None = None,
    ) -> None:
        if concurrency < 1:
            raise ConfigurationError(f"concurrency: must be >= 1, got {concurrency}")
        if prefetch is not None and prefetch < 1:
            raise ConfigurationError(f"prefetch: must be >= 1, got {prefetch}")
        if grace_period < 0 or poll_timeout < 0:
            raise ConfigurationError("grace_period and poll_timeout must be >= 0")
        _check_expire_every(expire_every)
        if type(unavailable_delay_ms) is not int or unavailable_delay_ms < 0:
            raise ConfigurationError(
                f"unavailable_delay_ms: must be an integer >= 0, got {unavailable_delay_ms!r}"
            )
        self.queue = queue
        self.log = log or logger
        self.strict_urns = strict_urns
        self.tuning = Tuning(
            concurrency=concurrency,
            prefetch=prefetch if prefetch is not None else max(32, 2 * concurrency),
            poll_timeout=poll_timeout,
            grace_period=grace_period,
            expire_every=expire_every or None,
        )
        self.policy = FailurePolicy(
            max_attempts=max_attempts,
            backoff=backoff or Backoff(),
            dead_letter=dead_letter,
            max_delay_ms=max_delay_ms,
        )
        self.counters = Counters()
        self.router = Router(
            unknown_urn=unknown_urn,
            unknown_urn_delay_ms=unknown_urn_delay_ms,
            strict_urns=strict_urns,
            log=self.log,
        )
        for layer in middleware:
            self.router.use(layer)
        self._publish_layers: list[PublishMiddleware] = list(publish_middleware)
        self._pipeline = Pipeline(
            self.router, self.counters, self.log, unavailable_delay_ms=min(unavailable_delay_ms, max_delay_ms)
        )
        self._transport: Transport | None = None
        self._owns_transport = False
        self._url: str | None = None  #: bound URL whose transport could not be opened yet
        self._broker = ""  #: the broker as log lines name it (URL redacted)
        self._opening = threading.Lock()
        self._waiting: threading.Event | None = None  #: set by stop() while run() waits for the broker
        self._consumer: Consumer | None = None
        self._sender: AsyncSender | None = None
        #: a URN's own retry policy, from ``@app.handler(urn, max_attempts=..., backoff=...)``
        self._urn_policies: dict[str, RetryPolicy] = {}
        self._stop_requested = False
        if transport is not None:
            self.bind(transport)

    def tune(
        self,
        *,
        concurrency: int | None = None,
        prefetch: int | None = None,
        grace_period: float | None = None,
        poll_timeout: float | None = None,
        expire_every: float | None = None,
        outage_seconds: float | None = None,
    ) -> App:
        """Change consume tuning before a run (the CLI's ``--concurrency`` etc.); returns the app.

        ``outage_seconds`` bounds how long a run waits out an unreachable broker before it raises
        :class:`~babelq.errors.OutageTooLongError` (the CLI's ``--outage-timeout``); an App waits
        as long as it takes unless given one."""
        if concurrency is not None and concurrency < 1:
            raise ConfigurationError(f"concurrency: must be >= 1, got {concurrency}")
        if prefetch is not None and prefetch < 1:
            raise ConfigurationError(f"prefetch: must be >= 1, got {prefetch}")
        tuning = self.tuning
        if concurrency is not None:
            tuning = replace(tuning, concurrency=concurrency, prefetch=max(tuning.prefetch, 2 * concurrency))
        if prefetch is not None:
            tuning = replace(tuning, prefetch=prefetch)
        if grace_period is not None:
            tuning = replace(tuning, grace_period=grace_period)
        if poll_timeout is not None:
            tuning = replace(tuning, poll_timeout=poll_timeout)
        if expire_every is not None:  # 0 switches the idle expiry sweep off
            _check_expire_every(expire_every)
            tuning = replace(tuning, expire_every=expire_every or None)
        if outage_seconds is not None:
            if not outage_seconds >= 0:
                raise ConfigurationError(f"outage_seconds: must be >= 0, got {outage_seconds!r}")
            tuning = replace(tuning, outage_seconds=outage_seconds)
        self.tuning = tuning
        return self

    # -- transport --------------------------------------------------------------------------------
    def bind(self, transport: Transport | str) -> App:
        """Use ``transport`` (or open the URL) from now on; returns the app.

        A URL whose broker is unreachable right now (:class:`~babelq.errors.UnavailableError`)
        is kept and opened on first use; a URL that is wrong (ConfigurationError) raises here.
        """
        if isinstance(transport, str):
            try:
                opened: Transport | None = open_transport(transport)
            except UnavailableError as exc:
                opened = None
                self.log.warning(
                    "broker %s unavailable (%s); the App will connect when it is used",
                    redact(transport), one_line(exc, typed=True),
                )  # fmt: skip
            self._close_owned()
            self._transport, self._owns_transport = opened, True
            self._url = None if opened is not None else transport
            self._broker = redact(transport)
        else:
            self._close_owned()
            self._transport, self._owns_transport, self._url = transport, False, None
            self._broker = broker_label(transport)
        return self

    @property
    def transport(self) -> Transport:
        """The bound transport (opened now if its broker was down at :meth:`bind`; raises
        :class:`~babelq.errors.UnavailableError` if it still is)."""
        transport = self._transport
        if transport is not None:
            return transport
        if self._url is None:
            raise ConfigurationError(
                "this App has no transport yet: pass one to App(...) or call app.bind(url)"
            )
        with self._opening:
            if self._transport is None and self._url is not None:
                self._transport = open_transport(self._url)
                self._url = None
                self.log.info("broker %s reachable: transport opened", self._broker)
            if self._transport is None:
                raise ConfigurationError("this App's transport was closed")
            return self._transport

    def _transport_for_run(self, handle_signals: bool) -> Transport | None:
        """The transport, opened with retries (capped backoff) while its broker is down; None if
        the App was stopped before the broker answered."""
        pauses = RetryPause(first=0.2, cap=5.0)
        bound = self.tuning.outage_seconds
        since = time.monotonic()
        waiting = self._waiting = threading.Event()
        if self._stop_requested:
            waiting.set()
        try:
            with stop_on_signals(waiting.set, waiting.set) if handle_signals else nullcontext():
                while not waiting.is_set():
                    try:
                        return self.transport
                    except UnavailableError as exc:
                        self.counters.incr("fetch_errors")
                        pause = pauses.next()
                        if bound is not None and time.monotonic() + pause - since > bound:
                            raise OutagePolicy(bound).too_long(f"broker {self._broker}", exc) from exc
                        self.log.warning(
                            "broker %s unavailable while connecting (attempt %d): %s; trying again in %.1f s",
                            self._broker, pauses.failures, one_line(exc, typed=True), pause,
                        )  # fmt: skip
                        if self.log.isEnabledFor(logging.DEBUG):
                            self.log.debug("connecting to %s failed", self._broker, exc_info=exc)
                        waiting.wait(pause)
                return None
        finally:
            self._waiting = None

    def close(self) -> None:
        """Close the transport if the app opened it from a URL, and stop the event loop of
        ``async def`` handlers (with the asyncio client handlers published through)."""
        sender, loop = self._sender, self.router.loop
        if sender is not None and loop.running:
            try:
                loop.run(sender.aclose())
            except Exception as exc:  # closing: nothing left to save, say it and go on
                self.log.warning(
                    "closing the asyncio publisher on the App's loop failed: %s", one_line(exc, typed=True)
                )
        self.router.close()
        self._close_owned()
        self._transport = None
        self._url = None

    async def aclose(self) -> None:
        """:meth:`close` from a coroutine: also closes the asyncio client that
        :meth:`publish_async` opened on the running loop (other loops' close with them)."""
        sender = self._sender
        if sender is not None:
            await sender.aclose()
        await asyncio.to_thread(self.close)

    def _close_owned(self) -> None:
        if self._transport is not None and self._owns_transport:
            self._transport.close()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- handlers and middleware ------------------------------------------------------------------
    def handler(
        self,
        urn: str,
        *,
        max_attempts: int | None = None,
        backoff: Backoff | None = None,
        timeout: float | None = None,
        rate: RateLimit | float | None = None,
    ) -> Callable[[H], H]:
        """Decorator: ``@app.handler("urn:babel:orders:created")`` maps the URN to the function.

        The function takes one argument, the :class:`~babelq.runtime.message.Message` (a
        different shape is a :class:`~babelq.errors.ConfigurationError` here, at start). It may
        be ``async def``: it then runs to completion on the App's event loop, at most
        ``concurrency`` at a time, before its message is settled.

        ``max_attempts`` and ``backoff`` override the App's for this URN's messages. ``timeout``
        (seconds, ``async def`` handlers only: a thread cannot be interrupted safely) cancels a
        run that takes longer; that run counts as a failed attempt. ``rate`` (starts a second, or a
        :class:`~babelq.runtime.rate_limit.RateLimit`, shared through Redis if it says so) holds
        this URN's handlers back to that rate."""

        def register(fn: H) -> H:
            self.register(urn, fn, max_attempts=max_attempts, backoff=backoff, timeout=timeout, rate=rate)
            return fn

        return register

    def register(
        self,
        urn: str,
        fn: Handler,
        *,
        max_attempts: int | None = None,
        backoff: Backoff | None = None,
        timeout: float | None = None,
        rate: RateLimit | float | None = None,
    ) -> None:
        """Map ``urn`` to ``fn(message)`` (plain or ``async def``; options as :meth:`handler`)."""
        own: RetryPolicy | None = None
        if max_attempts is not None or backoff is not None:
            own = RetryPolicy(
                self.policy.max_attempts if max_attempts is None else max_attempts,
                backoff or self.policy.backoff,
            )
        self.router.add(urn, fn, timeout=timeout, rate=rate)
        if own is not None:
            self._urn_policies[urn] = own

    def use(self, middleware: Middleware) -> App:
        """Add feature middleware around every handler (after those already added)."""
        self.router.use(middleware)
        return self

    def use_publish(self, middleware: PublishMiddleware) -> App:
        """Add publish middleware around every publish (after those already added)."""
        self._publish_layers.append(middleware)
        return self

    def _passed(self, publications: Sequence[Publication]) -> Sequence[Publication]:
        """``publications`` after the publish middleware (each passes the chain alone)."""
        if not self._publish_layers:
            return publications
        passed: list[Publication] = []
        chain = compose_publish(self._publish_layers, passed.append)
        for publication in publications:
            chain(publication)
        return passed

    def _emit(self, publications: Sequence[Publication]) -> list[str]:
        """Run ``publications`` through the publish middleware, then hand them to the transport.

        Without publish middleware this is one ``publish``/``publish_many`` call. With it, each
        publication passes the chain alone and what comes out is published as one batch per queue.
        """
        out = self._passed(publications)
        send_publications(self.transport, out)
        return [p.envelope.id for p in out]

    async def _emit_async(self, publications: Sequence[Publication]) -> list[str]:
        out = self._passed(publications)  # CPU only: encryption, schema checks, headers
        if out:
            await (await self._async_sender()).send(out)
        return [p.envelope.id for p in out]

    async def _async_sender(self) -> AsyncSender:
        """How this App's transport is written from a coroutine (opened on a thread when its
        broker was down at bind: connecting blocks)."""
        transport = self._transport
        if transport is None:
            transport = await asyncio.to_thread(lambda: self.transport)
        sender = self._sender
        if sender is None or sender.transport is not transport:
            sender = self._sender = AsyncSender.for_transport(transport)
        return sender

    # -- producing --------------------------------------------------------------------------------
    def _trace(self, trace_id: str | None) -> str | None:
        if trace_id is not None:
            return trace_id
        current = context.current_message()
        return current.trace_id if current is not None and current.trace_id else None

    @staticmethod
    def _delay(delay_ms: int, extensions: Mapping[str, Any]) -> int:
        deliver_at = extensions.get("deliver_at")
        if delay_ms == 0 and type(deliver_at) is int:
            return max(0, deliver_at - now_ms())
        return max(0, delay_ms)

    def publish(
        self,
        urn: str,
        data: Mapping[str, Any] | object | None = None,
        *,
        queue: str | None = None,
        trace_id: str | None = None,
        delay_ms: int = 0,
        **extensions: Any,
    ) -> str:
        """Make an envelope and publish it; returns its ``meta.id``.

        ``trace_id`` continues a trace; inside a handler it defaults to the inbound message's.
        ``extensions`` are :func:`babelq.envelope.make`'s keywords (``correlation_id``,
        ``deliver_at``, ``expire_at``, ``priority``, ``meta``...). A ``deliver_at`` without an
        explicit ``delay_ms`` becomes the broker's native delay.
        """
        publication = self._made(
            urn, data, queue=queue, trace_id=trace_id, delay_ms=delay_ms, extensions=extensions
        )
        self._emit([publication])
        return publication.envelope.id

    def _made(
        self,
        urn: str,
        data: Mapping[str, Any] | object | None,
        *,
        queue: str | None,
        trace_id: str | None,
        delay_ms: int,
        extensions: Mapping[str, Any],
    ) -> Publication:
        target = queue or self.queue
        envelope = make(
            urn, data, queue=target, trace_id=self._trace(trace_id), strict=self.strict_urns, **extensions
        )
        return Publication(target, envelope, self._delay(delay_ms, extensions))

    def send(self, envelope: Envelope, *, queue: str | None = None, delay_ms: int = 0) -> str:
        """Publish an envelope made elsewhere (``message.child(...)``, a replay); returns its id."""
        self._emit([self._sent(envelope, queue, delay_ms)])
        return envelope.id

    def _sent(self, envelope: Envelope, queue: str | None, delay_ms: int) -> Publication:
        target = queue or envelope.queue or self.queue
        return Publication(target, envelope, self._delay(delay_ms, {"deliver_at": envelope.deliver_at}))

    def publish_many(
        self,
        messages: Iterable[tuple[str, Mapping[str, Any] | object | None] | Envelope],
        *,
        queue: str | None = None,
        trace_id: str | None = None,
        delay_ms: int = 0,
        **extensions: Any,
    ) -> list[str]:
        """Publish ``(urn, data)`` pairs (or envelopes) to one queue in one batch; returns the ids.

        Options apply to every pair; envelopes are sent as they are.
        """
        batch = self._batch(messages, queue, trace_id, delay_ms, extensions)
        return self._emit(batch) if batch else []

    def _batch(
        self,
        messages: Iterable[tuple[str, Mapping[str, Any] | object | None] | Envelope],
        queue: str | None,
        trace_id: str | None,
        delay_ms: int,
        extensions: Mapping[str, Any],
    ) -> list[Publication]:
        target = queue or self.queue
        trace = self._trace(trace_id)
        delay = self._delay(delay_ms, extensions)
        batch: list[Publication] = []
        for item in messages:
            if isinstance(item, Envelope):
                envelope = item
                item_delay = self._delay(delay_ms, {"deliver_at": envelope.deliver_at})
            else:
                urn, data = item
                envelope = make(
                    urn, data, queue=target, trace_id=trace, strict=self.strict_urns, **extensions
                )
                item_delay = delay
            batch.append(Publication(target, envelope, item_delay))
        return batch

    # -- producing from asyncio -------------------------------------------------------------------
    async def publish_async(
        self,
        urn: str,
        data: Mapping[str, Any] | object | None = None,
        *,
        queue: str | None = None,
        trace_id: str | None = None,
        delay_ms: int = 0,
        **extensions: Any,
    ) -> str:
        """:meth:`publish` for a coroutine: the broker call does not block the running loop.

        Redis (both layouts) is written through ``redis.asyncio``; every other transport's
        blocking call runs on a worker thread (docs/runtime.md, "Publishing from asyncio")."""
        publication = self._made(
            urn, data, queue=queue, trace_id=trace_id, delay_ms=delay_ms, extensions=extensions
        )
        await self._emit_async([publication])
        return publication.envelope.id

    async def send_async(self, envelope: Envelope, *, queue: str | None = None, delay_ms: int = 0) -> str:
        """:meth:`send` for a coroutine."""
        await self._emit_async([self._sent(envelope, queue, delay_ms)])
        return envelope.id

    async def publish_many_async(
        self,
        messages: Iterable[tuple[str, Mapping[str, Any] | object | None] | Envelope],
        *,
        queue: str | None = None,
        trace_id: str | None = None,
        delay_ms: int = 0,
        **extensions: Any,
    ) -> list[str]:
        """:meth:`publish_many` for a coroutine."""
        batch = self._batch(messages, queue, trace_id, delay_ms, extensions)
        return await self._emit_async(batch) if batch else []

    # -- consuming --------------------------------------------------------------------------------
    def _queues(self, queue: str | Sequence[str] | None) -> tuple[str, ...]:
        """What a run reads: ``queue`` (one name or several, read in turn), else the App's queue."""
        if queue is None or queue == "":
            return (self.queue,)
        names = (queue,) if isinstance(queue, str) else tuple(queue)
        return queue_list(names, "queue", repr(queue))

    def _consume(self, queue: str | Sequence[str] | None, limits: Limits, handle_signals: bool) -> int:
        if self._consumer is not None:
            raise ConfigurationError("this App is already consuming; one run at a time")
        if self._transport is None and self._url is not None and limits.resilient:
            opened = self._transport_for_run(handle_signals)
            if opened is None:
                self._stop_requested = False
                return 0
        transport = self.transport
        consumer = Consumer(
            transport,
            self._queues(queue),
            pipeline=self._pipeline,
            disposer=Disposer(transport, self.counters, self.policy, self.log, self._urn_policies),
            counters=self.counters,
            tuning=self.tuning,
            log=self.log,
            broker=self._broker or broker_label(transport),
        )
        self._consumer = consumer
        if self._stop_requested:
            consumer.stop()
        try:
            if handle_signals:
                with stop_on_signals(consumer.stop, consumer.stop_now):
                    return consumer.run(limits)
            return consumer.run(limits)
        finally:
            self._consumer = None
            self._stop_requested = False

    def run(self, *, queue: str | Sequence[str] | None = None, handle_signals: bool = True) -> int:
        """Consume until stopped (SIGTERM/SIGINT or :meth:`stop`); returns messages processed.

        ``queue``: one queue or several, read fairly in turn (default: the App's queue)."""
        names = ", ".join(map(repr, self._queues(queue)))
        self.log.info(
            "consuming %s on %s with %d handler thread(s), prefetch %d; handlers: %s",
            names, self._broker or "(no broker yet)", self.tuning.concurrency, self.tuning.prefetch,
            ", ".join(self.router.urns) or "(none)",
        )
        return self._consume(queue, Limits(), handle_signals)

    def drain(
        self,
        max_messages: int | None = None,
        *,
        queue: str | Sequence[str] | None = None,
        timeout: float | None = None,
        wait_delayed: bool = False,
        handle_signals: bool = False,
    ) -> int:
        """Consume until the queue is empty (or ``max_messages`` processed, or ``timeout`` s passed);
        with several queues (read in turn), until a fetch finds none of them has anything ready.

        For tests, batch jobs and benchmarks. ``wait_delayed`` keeps going while delayed
        messages (retries in backoff, deferred ones) still wait on the queue. Broker errors
        are raised, not retried. Returns how many deliveries were processed.
        """
        limits = Limits(
            until_empty=True,
            max_messages=max_messages,
            wait_delayed=wait_delayed,
            deadline=None if timeout is None else time.monotonic() + timeout,
            resilient=False,
        )
        return self._consume(queue, limits, handle_signals)

    def run_until_empty(
        self,
        *,
        queue: str | Sequence[str] | None = None,
        timeout: float | None = None,
        wait_delayed: bool = False,
    ) -> int:
        """:meth:`drain` without a message limit."""
        return self.drain(queue=queue, timeout=timeout, wait_delayed=wait_delayed)

    def stop(self) -> None:
        """Ask a running :meth:`run`/:meth:`drain` to stop gracefully (thread-safe)."""
        consumer = self._consumer
        if consumer is None:
            self._stop_requested = True
            waiting = self._waiting
            if waiting is not None:  # run() is still waiting for the broker
                waiting.set()
        else:
            consumer.stop()

    def stats(self) -> dict[str, int]:
        """Counter totals: received, handled, retried, dead_lettered (and by reason), poison..."""
        return self.counters.snapshot()


def _check_expire_every(seconds: float | None) -> None:
    if seconds is None:
        return
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise ConfigurationError(
            f"expire_every: must be a number of seconds >= 0 (0: never), got {seconds!r}"
        )
