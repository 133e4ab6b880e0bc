"""The relay: publishes committed outbox rows to the broker, then marks them.

Each batch (:meth:`Relay.run_once`):

1. claims up to ``batch`` pending rows, oldest first (:mod:`babelq.outbox.relay_store`:
   ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, a lease on SQLite);
2. publishes them queue by queue, in id order, with ``transport.publish_many`` (a row that
   carries native headers goes alone through ``publish``, as the runtime sends such rows); the
   stored bytes go out verbatim, never re-encoded, and a delayed row gets what is left of its
   delay;
3. marks what the broker accepted ``published`` and gives the rest back.

What can go wrong, and what happens:

* **the broker is down** (:func:`babelq.runtime.outage.is_unavailable`: a refused connection, a
  timeout, an :class:`~babelq.errors.UnavailableError`): rows already accepted are marked, the
  others go back to pending unchanged (an outage never marks a row failed, never counts an
  attempt), and :meth:`Relay.run` waits with capped, jittered backoff before trying again;
* **the broker refuses a row for its content** (a babelq error or ``ValueError`` that is not
  about the URL or the connection: a queue name the broker cannot hold, a body too large...): the
  batch is retried row by row, so only the rows refused alone are marked ``failed``, with the
  error in ``last_error``; the others are published. Failed rows wait for
  :meth:`~babelq.outbox.relay_store.RelayStore.requeue_failed`;
* **the broker's URL is wrong or refuses the credentials** (a ConfigurationError about ``url``)
  or an unexpected exception (a bug): raised. No row is marked failed for something that is not
  the row's fault;
* **the relay dies between publish and mark**: the rows are pending again (PostgreSQL at once,
  SQLite when the lease lapses) and are published once more: a duplicate the consumer's
  idempotency absorbs, never a loss.

Order: within one relay, rows of a queue reach the broker in the order they were added. Two
relays on one PostgreSQL table split the work by rows, so across relays a queue's order is not
kept; run one relay per table when order across batches matters.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from babelq.envelope import now_ms
from babelq.errors import BabelqError, ConfigurationError
from babelq.outbox.failpoint import AFTER_PUBLISH, failpoint
from babelq.outbox.relay_store import Claim, RelayStore, Row, open_relay_store
from babelq.outbox.schema import DEFAULT_TABLE
from babelq.runtime.outage import DEFAULT_OUTAGE_SECONDS, OutagePolicy, broker_label, is_unavailable
from babelq.transports import Outgoing, Transport, open_transport
from babelq.urls import one_line

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RelayResult:
    """What one or more batches did."""

    claimed: int = 0  #: rows taken from the outbox
    published: int = 0  #: rows the broker accepted (marked published)
    failed: int = 0  #: rows the broker refused for their content (marked failed)
    batches: int = 0  #: batches that claimed at least one row
    outages: int = 0  #: batches cut short by an unavailable broker or database (run() only)

    def add(self, other: RelayResult) -> None:
        self.claimed += other.claimed
        self.published += other.published
        self.failed += other.failed
        self.batches += other.batches
        self.outages += other.outages

    def as_dict(self) -> dict[str, int]:
        return {
            "claimed": self.claimed,
            "published": self.published,
            "failed": self.failed,
            "batches": self.batches,
            "outages": self.outages,
        }


def _not_the_rows_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is about the broker or the relay itself rather than the rows it was given."""
    if is_unavailable(exc):
        return True
    if isinstance(exc, ConfigurationError):
        text = str(exc)
        return text.startswith("url") or "after close()" in text
    return not isinstance(exc, BabelqError | ValueError)


def _runs(rows: Sequence[Row]) -> Iterator[tuple[str, list[Row]]]:
    """``rows`` grouped by queue (each group in id order), split into the runs published together:
    consecutive rows without headers, or one row with headers."""
    by_queue: dict[str, list[Row]] = {}
    for row in rows:
        by_queue.setdefault(row.queue, []).append(row)
    for queue, group in by_queue.items():
        run: list[Row] = []
        for row in group:
            if row.headers:
                if run:
                    yield queue, run
                    run = []
                yield queue, [row]
            else:
                run.append(row)
        if run:
            yield queue, run


class Relay:
    """Publishes an outbox's committed rows to a broker (module docstring).

    ``outbox_url``: the outbox database (``sqlite:///path.db``, a path, ``postgresql://...``).
    ``transport``: an open transport, or a broker URL the relay opens (and closes on
    :meth:`close`). ``batch``: rows per claim. ``lease_seconds``: SQLite only, how long a claim
    holds its rows (a killed relay's rows come back after it). ``poll_interval``: the wait
    between polls of an empty outbox. ``backoff_first``/``backoff_cap``: the pauses after an
    outage, doubling from the first up to the cap. ``outage_seconds``: how long :meth:`run` waits
    out one outage of the broker or the outbox database before it raises
    :class:`~babelq.errors.OutageTooLongError` (rows it had not published stay pending).
    """

    def __init__(
        self,
        outbox_url: str,
        transport: Transport | str,
        *,
        batch: int = 500,
        table: str = DEFAULT_TABLE,
        lease_seconds: float = 60.0,
        poll_interval: float = 0.5,
        backoff_first: float = 0.2,
        backoff_cap: float = 10.0,
        outage_seconds: float = DEFAULT_OUTAGE_SECONDS,
    ) -> None:
        if type(batch) is not int or batch < 1:
            raise ConfigurationError(f"batch: must be an int >= 1, got {batch!r}")
        if not lease_seconds > 0:
            raise ConfigurationError(f"lease_seconds: must be > 0, got {lease_seconds!r}")
        if not poll_interval > 0:
            raise ConfigurationError(f"poll_interval: must be > 0, got {poll_interval!r}")
        self.batch = batch
        self.poll_interval = poll_interval
        self.store: RelayStore = open_relay_store(outbox_url, table=table, lease_seconds=lease_seconds)
        self._owned = isinstance(transport, str)
        self.transport: Transport = open_transport(transport) if isinstance(transport, str) else transport
        self._broker = broker_label(self.transport, transport if isinstance(transport, str) else None)
        #: whether the transport's publish takes native headers (rows with headers lose them otherwise)
        self._headers_ok = "headers" in inspect.signature(self.transport.publish).parameters
        self._warned_headers = False
        self.outage = OutagePolicy(outage_seconds, first=backoff_first, cap=backoff_cap)
        self._pauses = self.outage.pauses()
        self._stopping = threading.Event()
        self.totals = RelayResult()

    # -- one batch ------------------------------------------------------------------------
    def run_once(self) -> RelayResult:
        """Claim, publish and mark one batch. Raises UnavailableError when the broker or the
        database is down (after marking what was published and giving the rest back)."""
        claim = self.store.claim(self.batch)
        out = RelayResult(claimed=len(claim.rows), batches=1 if claim.rows else 0)
        if not claim.rows:
            return out
        published: list[int] = []
        failed: list[tuple[int, str]] = []
        try:
            now = now_ms()
            for queue, run in _runs(claim.rows):
                self._publish_run(queue, run, now, published, failed)
            failpoint(AFTER_PUBLISH)
        except BaseException:
            self._settle_after_error(claim, published, failed)
            raise
        self.store.finish(claim, published, failed)
        out.published, out.failed = len(published), len(failed)
        self.totals.add(out)
        return out

    def _settle_after_error(self, claim: Claim, published: list[int], failed: list[tuple[int, str]]) -> None:
        """Mark what the broker did accept, give the rest back; if the database cannot be
        reached either, just let go of the claim (the rows are published again later)."""
        try:
            self.store.finish(claim, published, failed)
        except Exception as exc:
            log.warning(
                "outbox: could not mark %d published rows (they will be published again): %s",
                len(published),
                one_line(exc, typed=True),
            )
            self.store.abandon(claim)
            return
        self.totals.add(RelayResult(published=len(published), failed=len(failed)))

    def _send(self, queue: str, rows: Sequence[Row], now: int) -> None:
        if len(rows) == 1:
            row = rows[0]
            delay = max(0, row.deliver_at - now)
            if row.headers and self._headers_ok:
                publish: Any = self.transport.publish  # headers: a keyword of the transports that carry them
                publish(queue, row.body, delay_ms=delay, headers=row.headers)
            else:
                if row.headers and not self._warned_headers:
                    self._warned_headers = True
                    log.warning("outbox: %s carries no native headers; rows are published without theirs "
                                "(the body is unchanged)", self._broker)
                self.transport.publish(queue, row.body, delay_ms=delay)
            return
        self.transport.publish_many(
            queue, [Outgoing(row.body, None, max(0, row.deliver_at - now)) for row in rows]
        )

    def _publish_run(
        self, queue: str, rows: list[Row], now: int, published: list[int], failed: list[tuple[int, str]]
    ) -> None:
        try:
            self._send(queue, rows, now)
        except Exception as exc:
            if _not_the_rows_fault(exc):
                raise
            if len(rows) > 1:  # find which rows the broker refuses: one at a time, in order
                for row in rows:
                    self._publish_run(queue, [row], now, published, failed)
                return
            error = one_line(exc, typed=True)
            log.warning(
                "outbox: row %d for queue %r refused by %s, marked failed: %s",
                rows[0].id,
                queue,
                self._broker,
                error,
            )
            failed.append((rows[0].id, error))
            return
        published.extend(row.id for row in rows)

    # -- loops ----------------------------------------------------------------------------
    def drain(self, max_batches: int | None = None) -> RelayResult:
        """Run batches until the outbox has no claimable pending row (or ``max_batches``).
        Raises UnavailableError on an outage (no backoff: for ``--once`` and tests)."""
        total = RelayResult()
        while max_batches is None or total.batches < max_batches:
            one = self.run_once()
            total.add(one)
            if one.claimed == 0 or self._stopping.is_set():
                break
        return total

    def run(self, on_ready: Callable[[], object] | None = None) -> RelayResult:
        """Relay until :meth:`stop`: poll while idle, back off through outages, and return the
        totals. Raises only what is not an outage (a wrong broker URL, a bug). ``on_ready`` is
        called once, after the first batch (even an empty one) went through."""
        total = RelayResult()
        outage_since = 0.0
        while not self._stopping.is_set():
            try:
                one = self.run_once()
            except Exception as exc:
                if not is_unavailable(exc):
                    raise
                total.outages += 1
                self.totals.outages += 1
                if not self._pauses.failures:
                    outage_since = time.monotonic()
                delay = self._pauses.next()
                if time.monotonic() + delay - outage_since > self.outage.timeout:
                    raise self.outage.too_long("outbox relay: broker or outbox", exc) from exc
                log.warning(
                    "outbox relay: broker or outbox unavailable (attempt %d, retrying in %.1f s): %s",
                    self._pauses.failures,
                    delay,
                    one_line(exc, typed=True),
                )
                self._stopping.wait(delay)
                continue
            if self._pauses.failures:
                log.warning("outbox relay: recovered after %d failed attempts", self._pauses.reset())
            if on_ready is not None:
                on_ready()
                on_ready = None
            total.add(one)
            if one.claimed < self.batch:
                self._stopping.wait(self.poll_interval)
        return total

    def stop(self) -> None:
        """Ask :meth:`run` to return after the batch in progress (thread- and signal-safe)."""
        self._stopping.set()

    def close(self) -> None:
        self.store.close()
        if self._owned:
            self.transport.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
