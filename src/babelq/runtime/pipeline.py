"""The consume path, top to bottom, in one place.

For every delivery, in this order:

1. **bytes -> envelope.** A body that is not UTF-8 JSON object is poison (``DecodeError``).
2. **consumer rules.** A decodable body that breaks them (no URN, schema_version other than
   1, data not an object, ...) is poison too, with cause ``unsupported``. Poison never reaches
   a handler; the disposer dead-letters it with reason ``poison`` and the original bytes
   preserved exactly.
3. **the handler's view:** a :class:`~babelq.runtime.message.Message` with the reconciled
   attempts and the broker's delivery facts.
4. **the built-in chain**, outermost first:

   - tracing: makes the message current so every log line carries trace_id and meta.id;
   - metrics: counts the outcome under its label;
   - unavailable: a dependency that is down (``UnavailableError`` from a handler, a store or
     a middleware) -> release after ``unavailable_delay_ms``, not a failed attempt;
   - expiry: ``meta.expire_at`` passed -> dead-letter (reason ``failed``, cause ``expired``);
   - deliver_at: ``meta.deliver_at`` ahead -> release with the remaining delay;
   - router: the URN's own chain, or the unknown-URN strategy.

   Steps 1, 2 and the last three are the consume rules of :mod:`babelq.runtime.rules`, which
   settle applies too (as Spark expressions): their order is taken from
   :data:`~babelq.runtime.rules.ORDER`, and a rule added there without a step here stops the
   pipeline from being built.

5. **the URN's chain:** feature middleware (``App(middleware=...)``/``app.use``: idempotency,
   schema, GDPR...) around the handler. Exceptions become a failed-attempt outcome.

The result is a :class:`Processed` (delivery, message, outcome). Turning the outcome into
broker calls (ack, retry with backoff, dead-letter, release) happens in
:mod:`babelq.runtime.disposition`, on the thread that owns the transport.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from babelq.envelope import decode
from babelq.errors import DecodeError, UnavailableError
from babelq.runtime import rules
from babelq.runtime.counters import Counters
from babelq.runtime.message import Message
from babelq.runtime.middleware import Middleware, compose
from babelq.runtime.middleware.deliver_at import DeliverAtMiddleware
from babelq.runtime.middleware.expiry import ExpiryMiddleware
from babelq.runtime.middleware.metrics import MetricsMiddleware
from babelq.runtime.middleware.tracing import TracingMiddleware
from babelq.runtime.middleware.unavailable import UnavailableMiddleware
from babelq.runtime.outcome import FAILED, UNAVAILABLE, UNAVAILABLE_DELAY_MS, UNSTARTED, Outcome
from babelq.runtime.routing import Router
from babelq.transports.base import Delivery

#: How long a delivery the runtime itself could not read waits before it is tried again.
_REPAIR_DELAY_MS = 5_000


class Processed(NamedTuple):
    """A delivery and the verdict on it. ``message`` is ``None`` for poison and unstarted work.

    A named tuple (immutable, like the frozen dataclass it was): one is built per message, and
    a tuple is built in a fraction of the time a frozen dataclass takes."""

    delivery: Delivery
    message: Message | None
    outcome: Outcome

    @classmethod
    def unstarted(cls, delivery: Delivery) -> Processed:
        """Fetched but never started (shutdown): give it back as it was."""
        return cls(delivery, None, Outcome.release(0, UNSTARTED))


#: builds a Processed from a tuple without the named tuple's generated ``__new__`` (a Python
#: call, on every message)
_new_processed = tuple.__new__


class Pipeline:
    """Classifies one delivery and runs it through the chain. Never touches the transport."""

    def __init__(
        self,
        router: Router,
        counters: Counters,
        log: logging.Logger,
        *,
        unavailable_delay_ms: int = UNAVAILABLE_DELAY_MS,
    ) -> None:
        self.counters = counters
        self._log = log
        self._unavailable_delay_ms = unavailable_delay_ms
        # the consume rules' steps: decode (poison, unsupported) and the router (unknown URN)
        # come first and last by construction; the middleware between them in rules.ORDER
        steps: dict[str, Middleware | None] = {
            rules.POISON: None,
            rules.UNSUPPORTED: None,
            rules.EXPIRED: ExpiryMiddleware(),
            rules.DEFERRED: DeliverAtMiddleware(),
            rules.UNKNOWN_URN: None,
        }
        rules.check_implemented("the runtime's consume path", steps)
        ruled = [step for rule in rules.ORDER if (step := steps[rule.name]) is not None]
        builtin: list[Middleware] = [
            TracingMiddleware(log),
            MetricsMiddleware(counters),
            UnavailableMiddleware(unavailable_delay_ms, log),
            *ruled,
        ]
        self._chain = compose(builtin, router)

    def process(self, delivery: Delivery) -> Processed:
        """The verdict on ``delivery`` (runs the handler when the message deserves it)."""
        if delivery.refusal is not None:  # the native schema-version gate: judged before decoding
            return self._poison(delivery, rules.unsupported_error(delivery.refusal), rules.UNSUPPORTED)
        try:
            envelope = decode(delivery.body)
        except DecodeError as exc:
            return self._poison(delivery, exc.reason)
        if not envelope.accepts():  # the hot path's check; the reason is worked out only when needed
            problem = envelope.rejection()
            if problem is not None:
                return self._poison(delivery, rules.unsupported_error(problem), rules.UNSUPPORTED)
        message: Message | None = None
        try:
            message = Message.of(envelope, delivery)
            outcome = self._chain(message)
        except UnavailableError as exc:  # e.g. reconciling attempts needed a broker that is down
            self.counters.incr(UNAVAILABLE)
            self._log.warning("consume path on %r unavailable, message put back: %s", delivery.queue, exc)
            return Processed(delivery, message, Outcome.unavailable(exc, self._unavailable_delay_ms))
        except Exception as exc:  # a bug below the guards; still never lose the message
            self.counters.incr(FAILED)
            self._log.error("consume path failed on %r: %s", delivery.queue, exc, exc_info=True)
            if message is None:  # the transport could not reconcile attempts: put it back as it was
                return Processed(delivery, None, Outcome.release(_REPAIR_DELAY_MS, FAILED))
            return Processed(delivery, message, Outcome.failed(exc))
        return _new_processed(Processed, (delivery, message, outcome))

    def _poison(self, delivery: Delivery, why: str, cause: str | None = None) -> Processed:
        self.counters.incr(rules.POISON)
        outcome = Outcome.dead_letter(rules.REASON_POISON, error=why, cause=cause, label=rules.POISON)
        return Processed(delivery, None, outcome)
