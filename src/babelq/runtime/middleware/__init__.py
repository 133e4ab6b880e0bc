"""Cross-cutting behaviour around handlers, one module per concern.

A middleware is any callable ``(message, call_next) -> Outcome``. It may look at the
message, return an outcome without calling ``call_next`` (skip a duplicate, defer an early
message), pass a different message on (``message.with_data(...)``) or inspect what the
rest of the chain decided. It never talks to the broker: settling is done once, by
:mod:`babelq.runtime.settle`. The built-in chain is assembled in
:mod:`babelq.runtime.pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from babelq.runtime.message import Message
from babelq.runtime.outcome import Outcome

#: The rest of the chain, as seen from a middleware.
Next = Callable[[Message], Outcome]


class Middleware(Protocol):
    """``(message, call_next) -> Outcome``; plain functions qualify."""

    def __call__(self, message: Message, call_next: Next, /) -> Outcome: ...


def compose(middleware: Sequence[Middleware], inner: Next) -> Next:
    """``inner`` wrapped by ``middleware`` (the first element is the outermost)."""
    chain = inner
    for layer in reversed(middleware):
        chain = _bind(layer, chain)
    return chain


def _bind(layer: Middleware, call_next: Next) -> Next:
    def step(message: Message) -> Outcome:
        return layer(message, call_next)

    return step


__all__ = ["Middleware", "Next", "compose"]
