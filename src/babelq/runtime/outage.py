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
* :class:`FetchGate` -- slows fetching down while handled messages keep coming back
  "unavailable", so a worker does not churn a whole queue through release calls while a
  store is down.
"""

from __future__ import annotations

import random

from babelq.errors import UnavailableError
from babelq.urls import redact


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says "something is unreachable or down" rather than "this input is bad"."""
    return isinstance(exc, UnavailableError | OSError)  # OSError: refused, reset, timed out, unreachable


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
