"""Telling an outage from a bug, and waiting one out without flooding the log.

House rule: infrastructure failure is never the message's fault. When the broker, a store or
a database is down, the runtime waits and tries again, and the messages it could not handle
are put back, not dead-lettered. This module holds what the consume loop needs for that:

* :func:`is_unavailable` -- is this exception a connection-level failure? babelq's own
  :class:`~babelq.errors.UnavailableError` (every transport and store translates its client's
  outage errors into it where it calls the client), and the standard library's ``OSError``
  family (refused, reset, timed out, unreachable) that a handler's own socket code raises;
* :func:`babelq.urls.one_line` with ``typed=True`` -- the error as one line a person can
  read, secrets redacted (a traceback of a refused connection tells an operator nothing the
  line does not);
* :func:`broker_label` -- the broker's URL, redacted, for those lines;
* :class:`RetryPause` -- capped exponential pauses with jitter between attempts;
* :class:`OutagePolicy` -- the one policy every long-running command (worker, settle, consume,
  relay) waits out a broker, ledger, sink or store outage with: the same pauses, the same log
  line per attempt, and one bound (``--outage-timeout``) past which the command stops;
* :class:`FetchGate` -- slows fetching down while handled messages keep coming back
  "unavailable", so a worker does not churn a whole queue through release calls while a
  store is down.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from babelq.errors import OutageTooLongError, UnavailableError
from babelq.urls import one_line, redact


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says "something is unreachable or down" rather than "this input is bad"."""
    return isinstance(exc, UnavailableError | OSError)  # OSError: refused, reset, timed out, unreachable


T = TypeVar("T")

#: how long a command waits out one outage before it stops (``--outage-timeout``'s default)
DEFAULT_OUTAGE_SECONDS = 120.0
#: the option that sets it, named in the line a command stops with
OUTAGE_OPTION = "--outage-timeout"

_log = logging.getLogger("babelq.outage")


def broker_label(transport: object, url: str | None = None) -> str:
    """How log lines name the broker: its URL with secrets masked, else its scheme."""
    target = url if url is not None else getattr(transport, "url", None)
    if isinstance(target, str) and target:
        return redact(target)
    scheme = getattr(transport, "scheme", "") or type(transport).__name__
    return f"{scheme}://"


class RetryPause:
    """Pauses between attempts at something that is down: ``first`` doubling up to ``cap`` seconds.

    Each pause is drawn between half and all of its ceiling, so a fleet that lost the same
    broker at the same moment does not come back in lockstep.
    """

    def __init__(self, first: float = 0.2, cap: float = 5.0, rng: random.Random | None = None) -> None:
        self.first = first
        self.cap = cap
        self.failures = 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        """Count one more failure; the seconds to wait before the next attempt."""
        self.failures += 1
        ceiling = min(self.cap, self.first * 2.0 ** min(self.failures - 1, 30))
        return float(ceiling * (0.5 + self._rng.random() / 2))

    def reset(self) -> int:
        """An attempt succeeded: start again from ``first``; returns how many failures preceded it."""
        failures, self.failures = self.failures, 0
        return failures


@dataclass(frozen=True)
class OutagePolicy:
    """How every long-running command waits out an outage of what it depends on.

    Attempts are spaced by :class:`RetryPause` (``first`` doubling up to ``cap`` seconds, jittered),
    each failed one logged as one line ``<what> unavailable (attempt N, retrying in S s): <cause>``;
    once ``timeout`` seconds have passed since the outage began, :class:`OutageTooLongError` ends
    the wait with one line naming ``--outage-timeout``. ``timeout=0`` gives up at the first failure.
    """

    timeout: float = DEFAULT_OUTAGE_SECONDS
    first: float = 0.25
    cap: float = 10.0

    def pauses(self) -> RetryPause:
        return RetryPause(first=self.first, cap=self.cap)

    def too_long(self, what: str, exc: BaseException) -> OutageTooLongError:
        """The error a command stops with once an outage of ``what`` outlasted the bound."""
        return OutageTooLongError(
            f"{what} unavailable for more than {self.timeout:g} s ({OUTAGE_OPTION}): "
            f"{one_line(exc, typed=False)}; nothing is lost, run the command again to continue"
        )

    def wait_out(
        self,
        action: Callable[[], T],
        what: str,
        *,
        reconnect: Callable[[], object] | None = None,
        outage: Callable[[BaseException], bool] = is_unavailable,
        log: logging.Logger | None = None,
        sleep: Callable[[float], object] = time.sleep,
    ) -> T:
        """Run ``action`` until it succeeds; after each failure that ``outage`` calls an outage, pause
        (logged) and call ``reconnect`` (its own outage is only logged at debug level), until the
        bound is reached. Other errors, and :class:`OutageTooLongError` itself, pass through."""
        logger = log or _log
        deadline = time.monotonic() + self.timeout
        pauses = self.pauses()
        while True:
            try:
                result = action()
            except OutageTooLongError:
                raise
            except Exception as exc:
                if not outage(exc):
                    raise
                delay = pauses.next()
                if time.monotonic() + delay > deadline:
                    raise self.too_long(what, exc) from exc
                logger.warning("%s unavailable (attempt %d, retrying in %.1f s): %s",
                               what, pauses.failures, delay, _line(exc))
                sleep(delay)
                if reconnect is not None:
                    try:
                        reconnect()
                    except Exception as again:
                        if not outage(again):
                            raise
                        logger.debug("%s: reconnecting failed: %s", what, again)
                continue
            if pauses.failures:
                logger.info("%s available again after %d attempt(s)", what, pauses.failures + 1)
            return result


#: how an outage reads once it crossed a process boundary as text (a Spark task's error)
_OUTAGE_NAMES = (
    "UnavailableError", "PublishNotConfirmedError", "redis.exceptions.ConnectionError",
    "redis.exceptions.TimeoutError", "ConnectionRefusedError", "ConnectionResetError", "BrokenPipeError",
)


def names_outage(text: str) -> bool:
    """Whether an error known only by its text (a streaming query's) is an outage still worth
    waiting out: not one that already outlasted its bound somewhere else."""
    return OutageTooLongError.__name__ not in text and any(name in text for name in _OUTAGE_NAMES)


def wait_for_broker(url: str, queue: str, policy: OutagePolicy, *, log: logging.Logger | None = None) -> None:
    """Return once the broker at ``url`` answers about ``queue`` again, waiting under ``policy``;
    raises :class:`OutageTooLongError` past its bound."""
    from babelq.transports import open_transport

    def probe() -> None:
        transport = open_transport(url)
        try:
            transport.size(queue)
        finally:
            transport.close()

    policy.wait_out(probe, f"broker {redact(url)}", log=log)


def _line(exc: BaseException) -> str:
    return one_line(exc, typed=False)


class FetchGate:
    """Holds fetching back while the handled messages come back "unavailable".

    The conductor reports every settled outcome's label (:meth:`observe`) and asks
    :meth:`pause` before it fetches. After a message was put back because a dependency is
    down, the next fetch waits 0.1 s, then 0.2, 0.4... up to 5 s while it stays down; any other
    outcome (the dependency answered) lifts the gate at once.
    """

    def __init__(self, unavailable_label: str, skip_label: str) -> None:
        self._unavailable = unavailable_label
        self._skip = skip_label
        self._armed = False
        self._pauses = RetryPause(first=0.1, cap=5.0)

    def observe(self, label: str) -> None:
        if label == self._unavailable:
            self._armed = True
        elif label != self._skip:
            self._armed = False
            if self._pauses.failures:
                self._pauses.reset()

    def pause(self) -> float:
        """Seconds to wait before the next fetch (0.0: go ahead); each call while armed counts."""
        if not self._armed:
            return 0.0
        self._armed = False
        return self._pauses.next()
