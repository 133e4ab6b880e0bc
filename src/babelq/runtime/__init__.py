"""The worker runtime: publish envelopes, consume them with handlers per URN, never lose one.

>>> from babelq.runtime import App
>>> app = App("memory://", queue="orders", max_attempts=5)
>>> @app.handler("urn:babel:orders:created")
... def created(message):
...     ...

Consume path (see :mod:`babelq.runtime.pipeline`): poison check -> tracing -> metrics ->
expiry -> deliver_at -> URN routing -> feature middleware -> handler; outcomes are settled
(ack in batches, retry with backoff, dead-letter) by :mod:`babelq.runtime.disposition`.
"""

from babelq.runtime.app import App
from babelq.runtime.backoff import Backoff
from babelq.runtime.context import MessageContextFilter, current_message
from babelq.runtime.disposition import DeadLetterPolicy, FailurePolicy
from babelq.runtime.errors import PermanentError, UnknownURNError
from babelq.runtime.message import Message
from babelq.runtime.middleware import Middleware, Next
from babelq.runtime.outcome import Action, Outcome
from babelq.runtime.rate_limit import RateLimit
from babelq.runtime.routing import Handler, UnknownURNStrategy

__all__ = [
    "Action",
    "App",
    "Backoff",
    "DeadLetterPolicy",
    "FailurePolicy",
    "Handler",
    "Message",
    "MessageContextFilter",
    "Middleware",
    "Next",
    "Outcome",
    "PermanentError",
    "RateLimit",
    "UnknownURNError",
    "UnknownURNStrategy",
    "current_message",
]
