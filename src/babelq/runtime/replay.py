"""The replay mark: a handler can tell a deliberate replay (a redrive) from a first delivery.

A redrive re-runs handlers on purpose, and their external effects (a charge, an email, a call to
a partner) would fire again. Idempotency does not help: it stops *accidental* duplicates of a
message that succeeded, and a dead letter never succeeded. So ``babelq dlq redrive`` marks what
it puts back, and a handler asks::

    @app.handler("urn:babel:orders:created")
    def on_created(message: Message) -> None:
        save_order(message.data)                       # the idempotent core: always runs
        if not message.is_replay():
            send_confirmation_email(message.data)      # an external effect: not on a replay

or wraps the effect: ``bypass_external_effects(lambda: send_email(...))`` skips it while the
message being handled is a replay (:func:`is_replay` reads the current message).

The mark is the one the babelqueue package uses, so either side sees the other's: the header
:data:`REPLAY_HEADER` (``bq-replay-bypass``) carried *beside* the body in the broker's native
header slot (``publish(..., headers=...)``; a Redis header frame, AMQP headers, SQS message
attributes, a SQLite column), never in the envelope, which stays frozen. Like the package, any
non-empty value marks (it writes ``"1"``). A transport that cannot carry headers (Redis in the
Laravel-compatible layout, as in the package) loses the mark: the message is then an ordinary
redelivery. The mark rides along on a retry and a dead letter, so a replay that fails again is
still a replay when it is redriven again (``--no-mark`` removes it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from babelq.runtime import context
from babelq.runtime.replay_mark import REPLAY_HEADER, REPLAY_VALUE, marked, with_mark

__all__ = ["REPLAY_HEADER", "REPLAY_VALUE", "bypass_external_effects", "is_replay", "marked", "with_mark"]

T = TypeVar("T")


def is_replay() -> bool:
    """Whether the message the current handler is running for is a replay (False outside a handler)."""
    current = context.current_message()
    return current is not None and current.is_replay()


def bypass_external_effects(effect: Callable[[], T]) -> T | None:
    """Run ``effect`` unless the current message is a replay; then skip it and return None."""
    if is_replay():
        return None
    return effect()
