"""Cross-cutting behaviour around handlers, one module per concern.

A middleware is any callable ``(message, call_next) -> Outcome``. It may look at the
message, return an outcome without calling ``call_next`` (skip a duplicate, defer an early
message), pass a different message on (``message.with_data(...)``) or inspect what the
rest of the chain decided. It never talks to the broker: settling is done once, by
:mod:`babelq.runtime.disposition`. The built-in chain is assembled in
:mod:`babelq.runtime.pipeline`.

The publish side has its own chain: a **publish middleware** is any callable
``(publication, call_next) -> None`` around every ``App.publish``/``send``/``publish_many``.
It may replace the envelope (``dataclasses.replace(publication, envelope=...)``: protect
fields, check the schema) or add native headers (a ``traceparent``) before passing it on; the
innermost step hands the body to the transport. Refusing a publication is raising.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from babelq.envelope import Envelope
from babelq.runtime.message import Message
from babelq.runtime.outcome import Outcome

#: The rest of the chain, as seen from a middleware.
Next = Callable[[Message], Outcome]


class Middleware(Protocol):
    """``(message, call_next) -> Outcome``; plain functions qualify."""

    def __call__(self, message: Message, call_next: Next, /) -> Outcome: ...


class Binding:
    """A middleware that binds itself to the rest of the chain once, when the chain is composed.

    The chain runs for every message, and a layer called as ``layer(message, call_next)`` costs
    two Python calls per message (the step that holds ``call_next``, then the layer). A subclass
    writes its logic once, in :meth:`bind`, as a function of the message that closes over
    ``call_next`` (and whatever it looks up once); :func:`compose` puts that function in the
    chain directly. Called the usual way, ``(message, call_next)``, it does the same thing, so it
    composes like any other middleware. The built-in middleware of the consume path are these.
    """

    def bind(self, call_next: Next) -> Next:
        """This layer with ``call_next`` as the rest of the chain."""
        raise NotImplementedError

    def __call__(self, message: Message, call_next: Next, /) -> Outcome:
        return self.bind(call_next)(message)


def compose(middleware: Sequence[Middleware], inner: Next) -> Next:
    """``inner`` wrapped by ``middleware`` (the first element is the outermost)."""
    chain = inner
    for layer in reversed(middleware):
        chain = layer.bind(chain) if isinstance(layer, Binding) else _bind(layer, chain)
    return chain


def _bind(layer: Middleware, call_next: Next) -> Next:
    def step(message: Message) -> Outcome:
        return layer(message, call_next)

    return step


@dataclass(slots=True, frozen=True)
class Publication:
    """One envelope on its way to ``queue``: what publish middleware sees and may replace."""

    queue: str
    envelope: Envelope
    delay_ms: int = 0
    #: native broker headers to send beside the body (AMQP headers, SQS attributes, a Redis frame)
    headers: dict[str, str] = field(default_factory=dict)


#: The rest of the publish chain, as seen from a publish middleware.
PublishNext = Callable[[Publication], None]


class PublishMiddleware(Protocol):
    """``(publication, call_next) -> None``; plain functions qualify."""

    def __call__(self, publication: Publication, call_next: PublishNext, /) -> None: ...


def compose_publish(middleware: Sequence[PublishMiddleware], inner: PublishNext) -> PublishNext:
    """``inner`` wrapped by publish ``middleware`` (the first element is the outermost)."""
    chain = inner
    for layer in reversed(middleware):
        chain = _bind_publish(layer, chain)
    return chain


def _bind_publish(layer: PublishMiddleware, call_next: PublishNext) -> PublishNext:
    def step(publication: Publication) -> None:
        layer(publication, call_next)

    return step


__all__ = [
    "Binding",
    "Middleware",
    "Next",
    "Publication",
    "PublishMiddleware",
    "PublishNext",
    "compose",
    "compose_publish",
]
