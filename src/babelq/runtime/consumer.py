"""The fetch -> handle -> settle loops, and graceful shutdown.

One thread, the *conductor*, owns the transport: it reserves messages in batches (bounded
prefetch), settles outcomes and acks in batches. Handlers run either on the conductor itself
(``concurrency=1``: no hand-off cost at all) or on ``concurrency`` worker threads fed through
an in-process queue. Workers never call the broker, so transports whose clients are not
thread-safe (AMQP channels, SQLite connections) are safe to use.

At-least-once, whatever happens:

* a message is acked only after its handler returned (acks are batched, never early);
* on stop (SIGTERM/SIGINT, :meth:`Consumer.stop`, a deadline) fetching stops, messages
  fetched but not started are released unchanged, and in-flight handlers get
  ``grace_period`` seconds to finish and be settled;
* on a hard kill nothing is lost: every unsettled reservation comes back through the
  transport's visibility timeout (or connection loss) and is handled again.

And not twice while it is still being worked on: the conductor renews the leases of what it
holds (:mod:`babelq.runtime.leases`) -- between handlers when they run on the conductor, and
while they run when they run on worker threads, so with ``concurrency >= 2`` even a single
handler slower than the visibility timeout keeps its message.

Idle time dead-letters expired messages nobody takes (:mod:`babelq.runtime.expiry_sweep`): when
a fetch finds nothing and nothing is in flight, the conductor sweeps its queues -- at most every
``expire_every`` seconds, on transports that can read waiting messages without taking them, and
only when dead letters go to ``<queue>.dlq`` -- so a message waiting in a delay past its
``meta.expire_at`` reaches the DLQ at its time, not when its delay ends.

Outages (:mod:`babelq.runtime.outage`) are waited out, never blamed on messages: a broker that
cannot be reached while fetching is retried with a capped, jittered backoff, one WARNING line
per attempt naming the broker (URL redacted) and the error -- tracebacks only at DEBUG -- and
an INFO line once it answers again. While handled messages keep coming back "unavailable" (a
store or database is down: they are released, see
:mod:`babelq.runtime.middleware.unavailable`), fetching slows down the same way instead of
cycling the whole queue through release calls.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from queue import Empty, SimpleQueue

from babelq.errors import ConfigurationError
from babelq.runtime.counters import Counters
from babelq.runtime.disposition import Disposer
from babelq.runtime.expiry_sweep import ExpirySweep, refusal
from babelq.runtime.leases import LeaseKeeper
from babelq.runtime.outage import FetchGate, OutagePolicy, RetryPause, is_unavailable
from babelq.runtime.outcome import FAILED, UNAVAILABLE, UNSTARTED, Outcome
from babelq.runtime.pipeline import Pipeline, Processed
from babelq.transports.base import Delivery, Transport
from babelq.urls import one_line

_FETCH_BACKOFF_FIRST = 0.2  #: seconds before the second attempt at a broker that failed a fetch
_FETCH_BACKOFF_MAX = 5.0  #: and never longer than this between two attempts


@dataclass(frozen=True, slots=True)
class Limits:
    """When a run ends besides being stopped."""

    until_empty: bool = False  #: when a fetch finds nothing and nothing is in flight
    max_messages: int | None = None  #: after this many deliveries were processed
    wait_delayed: bool = False  #: with ``until_empty``: not while delayed messages wait on the queue
    deadline: float | None = None  #: ``time.monotonic()`` after which to stop gracefully
    resilient: bool = True  #: survive broker errors while fetching (log, back off, go on)


def queue_list(names: Sequence[object], option: str, shown: str, hint: str = "") -> tuple[str, ...]:
    """The queues of one run, read in turn: at least one, none blank, none named twice. Errors
    name ``option`` and quote ``shown`` (the setting as the user wrote it)."""
    if not names or any(not isinstance(n, str) or not n.strip() for n in names):
        raise ConfigurationError(f"{option}: an empty queue name in {shown}{hint}")
    if len(set(names)) != len(names):
        raise ConfigurationError(f"{option}: a queue is named twice in {shown}")
    return tuple(str(n) for n in names)


@dataclass(frozen=True, slots=True)
class Tuning:
    concurrency: int = 1
    prefetch: int = 32
    poll_timeout: float = 1.0  #: long-poll wait of a fetch when idle
    idle_timeout: float = 0.1  #: long-poll wait when running until empty
    poll_interval: float = 0.05  #: how often to look for more work while handlers run
    grace_period: float = 30.0
    #: seconds between two expiry sweeps of an idle consumer (None: never sweep)
    expire_every: float | None = 60.0
    #: how long an unreachable broker is waited out before the run stops (None: as long as it takes)
    outage_seconds: float | None = None


class Consumer:
    """Runs the consume loop for one queue, or for several in turn.

    Several queues are read fairly: each fetch asks the next queue in turn, one that has nothing
    ready is skipped at once, and when none had anything the wait for new messages is spent on
    one queue at a time (so a message on another waits at most one such share of the poll).
    """

    def __init__(
        self,
        transport: Transport,
        queues: str | Sequence[str],
        *,
        pipeline: Pipeline,
        disposer: Disposer,
        counters: Counters,
        tuning: Tuning,
        log: logging.Logger,
        broker: str = "",
    ) -> None:
        self.transport = transport
        self.queues: tuple[str, ...] = (queues,) if isinstance(queues, str) else tuple(queues)
        #: how log lines name what this consumer reads
        self.queue = ", ".join(self.queues)
        self._turn = 0  #: the queue the next fetch asks first
        #: how log lines name the broker (its URL, redacted)
        self.broker = broker or getattr(transport, "scheme", "") or type(transport).__name__
        self.pipeline = pipeline
        self.disposer = disposer
        self.counters = counters
        self.tuning = tuning
        self.log = log
        self._stop = threading.Event()
        self._hard = threading.Event()
        self._fetch_pauses = RetryPause(first=_FETCH_BACKOFF_FIRST, cap=_FETCH_BACKOFF_MAX)
        self._outage_since = 0.0
        self.gate = FetchGate(UNAVAILABLE, UNSTARTED)
        self._fetch_after = 0.0
        self.leases = LeaseKeeper(transport, self.queues, counters=counters, log=log)
        self._sweep: ExpirySweep | None = None
        if tuning.expire_every is not None and disposer.policy == "queue" and not refusal(transport):
            self._sweep = ExpirySweep(transport, counters=counters, logger=log)
        self._sweep_after = 0.0  #: time.monotonic() from which the next idle sweep may run

    def stop(self) -> None:
        """Stop fetching; in-flight handlers may finish within the grace period."""
        self._stop.set()

    def stop_now(self) -> None:
        """Stop without waiting for in-flight handlers (their messages come back later)."""
        self._stop.set()
        self._hard.set()

    def run(self, limits: Limits) -> int:
        """Consume until stopped or ``limits`` say so; returns how many deliveries were processed."""
        if self.tuning.concurrency == 1:
            return self._run_inline(limits)
        return self._run_threaded(limits)

    # -- shared steps ---------------------------------------------------------------------------
    def _fetch(self, want: int, timeout: float, limits: Limits, in_flight: int = 0) -> list[Delivery]:
        if not self._gate_open(in_flight):
            return []
        try:
            batch = self._reserve(want, timeout)
        except Exception as exc:
            if not limits.resilient:
                raise
            self._fetch_failed(exc)
            return []
        if self._fetch_pauses.failures:
            failures = self._fetch_pauses.reset()
            self.log.info(
                "broker %s reachable again: reserving from %r resumed after %d failed attempt(s)",
                self.broker, self.queue, failures,
            )  # fmt: skip
        if batch:
            self.counters.incr("received", len(batch))
        return batch

    def _reserve(self, want: int, timeout: float) -> list[Delivery]:
        queues = self.queues
        if len(queues) == 1:
            return self.transport.reserve(queues[0], max_messages=want, timeout=timeout)
        for _ in queues:
            batch = self.transport.reserve(self._next_queue(), max_messages=want, timeout=0.0)
            if batch:
                return batch
        return self.transport.reserve(self._next_queue(), max_messages=want, timeout=timeout / len(queues))

    def _next_queue(self) -> str:
        """The queue whose turn it is. The turn moves before the call is made, so a queue whose
        fetches fail cannot hold the others up."""
        queue = self.queues[self._turn]
        self._turn = (self._turn + 1) % len(self.queues)
        return queue

    def _fetch_failed(self, exc: Exception) -> None:
        """One line per failed attempt, then wait (capped backoff); a traceback only at DEBUG,
        or once for an error that does not look like an outage (that may be a bug)."""
        self.counters.incr("fetch_errors")
        pause = self._fetch_pauses.next()
        attempt = self._fetch_pauses.failures
        if attempt == 1:
            self._outage_since = time.monotonic()
        what = "unavailable" if is_unavailable(exc) else "failed"
        bound = self.tuning.outage_seconds
        past = bound is not None and time.monotonic() + pause - self._outage_since > bound
        if what == "unavailable" and bound is not None and past:
            raise OutagePolicy(bound).too_long(f"broker {self.broker}", exc) from exc
        unexpected = what == "failed" and attempt == 1
        log = self.log.error if unexpected else self.log.warning
        log(
            "broker %s %s while reserving from %r (attempt %d): %s; trying again in %.1f s",
            self.broker, what, self.queue, attempt, one_line(exc, typed=True), pause,
            exc_info=exc if unexpected else None,
        )  # fmt: skip
        if not unexpected and self.log.isEnabledFor(logging.DEBUG):
            self.log.debug("reserving from %r on %s failed", self.queue, self.broker, exc_info=exc)
        self._stop.wait(pause)

    def _gate_open(self, in_flight: int) -> bool:
        """May we fetch now? Not while messages keep coming back "unavailable" (see FetchGate):
        wait the pause out when nothing is in flight, else fetch later and keep settling."""
        hold = self.gate.pause()
        now = time.monotonic()
        if hold:
            self._fetch_after = now + hold
        remaining = self._fetch_after - now
        if remaining <= 0:
            return True
        if in_flight:
            return False
        self._stop.wait(remaining)
        return not self._stop.is_set()

    def _out_of_work(self, limits: Limits) -> bool:
        """Nothing was fetched and nothing is in flight: is the run over?"""
        if limits.deadline is not None and time.monotonic() >= limits.deadline:
            return True
        if not limits.until_empty:
            return False
        if limits.wait_delayed:
            return all(self.transport.size(queue) == 0 for queue in self.queues)
        return True

    def _idle(self) -> None:
        """Nothing fetched, nothing in flight: sweep expired messages off the queues when one is
        due. Not while the broker is failing fetches (that outage is being waited out already);
        a failed sweep is logged and tried again at the next due idle moment."""
        sweep = self._sweep
        if sweep is None or self._fetch_pauses.failures or self._stop.is_set():
            return
        now = time.monotonic()
        if now < self._sweep_after:
            return
        self._sweep_after = now + (self.tuning.expire_every or 0.0)
        try:
            sweep.sweep_all(self.queues)
        except Exception as exc:
            self.counters.incr("expiry_sweep_errors")
            unavailable = is_unavailable(exc)
            self.log.log(
                logging.WARNING if unavailable else logging.ERROR,
                "expiry sweep of %r on %s %s: %s; trying again when idle in %.0f s",
                self.queue, self.broker, "unavailable" if unavailable else "failed",
                one_line(exc, typed=True), self.tuning.expire_every or 0.0,
                exc_info=None if unavailable else exc,
            )  # fmt: skip

    def _past(self, limits: Limits) -> bool:
        return limits.deadline is not None and time.monotonic() >= limits.deadline

    # -- handlers on the conductor ------------------------------------------------------------
    def _run_inline(self, limits: Limits) -> int:
        settle, process, observe = self.disposer.settle, self.pipeline.process, self.gate.observe
        stopped = self._stop.is_set
        leases = self.leases
        renew = leases.every is not None
        timeout = self.tuning.idle_timeout if limits.until_empty else self.tuning.poll_timeout
        acks: list[Delivery] = []
        done = 0
        try:
            while not self._stop.is_set() and not self._past(limits):
                want = self.tuning.prefetch
                if limits.max_messages is not None:
                    want = min(want, limits.max_messages - done)
                    if want <= 0:
                        break
                batch = self._fetch(want, timeout, limits)
                if not batch:
                    self._idle()
                    if self._out_of_work(limits):
                        break
                    continue
                leases.reserved()
                started = 0
                try:
                    for delivery in batch:
                        if stopped():
                            break
                        started += 1
                        processed = process(delivery)
                        observe(processed.outcome.label)
                        settle(processed, acks)
                        done += 1
                        if renew and leases.due():  # acks still to flush and the batch's rest are held
                            leases.renew(acks + batch[started:])
                finally:  # stopped, or interrupted: give back what was never started
                    for delivery in batch[started:]:
                        settle(Processed.unstarted(delivery), acks)
                self.disposer.flush(acks)
        finally:
            self.disposer.flush(acks)
        return done

    # -- handlers on worker threads -----------------------------------------------------------
    def _work(self, work: SimpleQueue[Delivery | None], results: SimpleQueue[Processed]) -> None:
        process, stop = self.pipeline.process, self._stop
        while True:
            delivery = work.get()
            if delivery is None:
                return
            if stop.is_set():
                results.put(Processed.unstarted(delivery))
                continue
            try:
                results.put(process(delivery))
            except BaseException as exc:  # never leave the conductor waiting for a result
                self.log.error("worker thread failed on a delivery from %r: %r", self.queue, exc)
                results.put(Processed(delivery, None, Outcome.release(1_000, FAILED)))

    def _collect(self, results: SimpleQueue[Processed], acks: list[Delivery], wait: float) -> tuple[int, int]:
        """Settle finished results (waiting up to ``wait`` s for the first); returns (settled, processed)."""
        try:
            item = results.get(timeout=wait) if wait > 0 else results.get_nowait()
        except Empty:
            return 0, 0
        settled = processed = 0
        limit = self.tuning.prefetch
        while True:
            self.gate.observe(item.outcome.label)
            self.disposer.settle(item, acks)
            self.leases.let_go(item.delivery)
            settled += 1
            if item.outcome.label != UNSTARTED:
                processed += 1
            if settled >= limit:
                break
            try:
                item = results.get_nowait()
            except Empty:
                break
        self.disposer.flush(acks)
        return settled, processed

    def _run_threaded(self, limits: Limits) -> int:
        tuning = self.tuning
        work: SimpleQueue[Delivery | None] = SimpleQueue()
        results: SimpleQueue[Processed] = SimpleQueue()
        threads = [
            threading.Thread(target=self._work, args=(work, results), name=f"babelq-worker-{n}", daemon=True)
            for n in range(tuning.concurrency)
        ]
        for thread in threads:
            thread.start()
        fetch_timeout = tuning.idle_timeout if limits.until_empty else tuning.poll_timeout
        refill = max(1, tuning.prefetch // 2)
        acks: list[Delivery] = []
        in_flight = fetched = done = 0
        next_poll = 0.0
        try:
            while not self._stop.is_set():
                settled, processed = self._collect(results, acks, 0)
                in_flight -= settled
                done += processed
                now = time.monotonic()
                if limits.deadline is not None and now >= limits.deadline:
                    break
                room = tuning.prefetch - in_flight
                if limits.max_messages is not None:
                    room = min(room, limits.max_messages - fetched)
                    if room <= 0 and in_flight == 0:
                        break
                if room > 0 and (in_flight == 0 or (room >= refill and now >= next_poll)):
                    batch = self._fetch(room, fetch_timeout if in_flight == 0 else 0.0, limits, in_flight)
                    if batch:
                        self.leases.hold(batch)
                        for delivery in batch:
                            work.put(delivery)
                        in_flight += len(batch)
                        fetched += len(batch)
                        continue
                    if in_flight == 0:
                        self._idle()
                        if self._out_of_work(limits):
                            break
                        continue
                    next_poll = now + tuning.poll_interval
                settled, processed = self._collect(results, acks, tuning.poll_interval)
                in_flight -= settled
                done += processed
                self.leases.tick()
        finally:
            done += self._shutdown(work, results, threads, acks, in_flight)
        return done

    def _shutdown(
        self,
        work: SimpleQueue[Delivery | None],
        results: SimpleQueue[Processed],
        threads: list[threading.Thread],
        acks: list[Delivery],
        in_flight: int,
    ) -> int:
        """Release unstarted work, let in-flight handlers finish within the grace period."""
        while True:
            try:
                delivery = work.get_nowait()
            except Empty:
                break
            if delivery is not None:
                self.disposer.settle(Processed.unstarted(delivery), acks)
                self.leases.let_go(delivery)
                in_flight -= 1
        for _ in threads:
            work.put(None)
        done = 0
        deadline = time.monotonic() + self.tuning.grace_period
        while in_flight > 0 and not self._hard.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            settled, processed = self._collect(results, acks, min(remaining, 0.1))
            in_flight -= settled
            done += processed
            self.leases.tick()
        self.disposer.flush(acks)
        if in_flight > 0:
            self.log.warning(
                "stopped with %d handler(s) still running on %r; their messages will be delivered "
                "again after the visibility timeout", in_flight, self.queue,
            )
        else:
            for thread in threads:
                thread.join(timeout=1.0)
        return done
