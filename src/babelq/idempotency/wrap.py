"""Wrapping a handler so a redelivered message does not run twice (docs/standard.md §7).

The wrapped handler returns an :class:`HandlerRun` instead of the bare result, because the
caller (a runtime acking the delivery, a test counting effects) needs to know whether the
handler ran or the message was a duplicate; the handler's own result is kept on it.

Rules, in order:

1. The key is ``meta.id`` (see :func:`message_id`). An empty or absent key cannot be
   deduplicated, so the handler always runs (fail open: never drop work we cannot identify).
2. Seen-set store: a seen id is skipped; otherwise the handler runs and the id is
   remembered only after it returned. An exception propagates and leaves the id unmarked,
   so retry and dead-lettering still apply.
3. Claiming store (:class:`~babelq.idempotency.store.ClaimingStore`): the id is claimed
   atomically first. A done id is skipped. An id claimed by another worker that is still
   running raises :class:`ClaimedElsewhereError`; the runtime should retry that delivery
   later rather than ack it, because the other worker may still fail. On failure the claim
   is released.

If remembering fails after the handler succeeded, the error is logged and the outcome
still says the handler ran: raising would make the runtime redeliver and run it again.

A store that cannot be reached raises :class:`~babelq.errors.UnavailableError` from
``seen``/``claim``: it propagates before the handler ran, so the caller can put the message
back (the runtime's idempotency middleware does) rather than count it as a failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from babelq.errors import ClaimedElsewhereError as ClaimedElsewhereError
from babelq.errors import UnavailableError
from babelq.idempotency.store import ClaimingStore, IdempotencyStore

log = logging.getLogger(__name__)

M = TypeVar("M")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class HandlerRun(Generic[R]):
    """What a wrapped handler did with one message.

    ``ran`` is False only when the message was a duplicate and the handler was skipped
    (the delivery should be acked). ``result`` is the handler's return value when it ran.
    ``key`` is the deduplication key used, ``None`` when the message had none.
    """

    ran: bool
    result: R | None = None
    key: str | None = None

    @property
    def skipped(self) -> bool:
        return not self.ran


def message_id(message: object) -> str | None:
    """The default key: ``message.id`` (an Envelope or runtime message) or ``message["meta"]["id"]``.

    Returns ``None`` when there is no non-empty string id.
    """
    if isinstance(message, Mapping):
        meta = message.get("meta")
        value: object = meta.get("id") if isinstance(meta, Mapping) else None
    else:
        value = getattr(message, "id", None)
    return value if type(value) is str and value.strip() else None


def wrap(
    store: IdempotencyStore,
    handler: Callable[[M], R],
    *,
    key: Callable[[M], str | None] = message_id,
) -> Callable[[M], HandlerRun[R]]:
    """``handler`` made idempotent on ``key(message)`` (``meta.id`` by default)."""
    if isinstance(store, ClaimingStore):
        claiming: ClaimingStore = store

        def run_claimed(message: M) -> HandlerRun[R]:
            k = key(message)
            if not k:
                return HandlerRun(True, handler(message), None)
            if not claiming.claim(k):
                if claiming.seen(k):
                    return HandlerRun(False, None, k)
                raise ClaimedElsewhereError(k)
            try:
                result = handler(message)
            except BaseException:
                _quietly(claiming.release, k, "release the claim on")
                raise
            _quietly(claiming.remember, k, "remember")
            return HandlerRun(True, result, k)

        return run_claimed

    def run(message: M) -> HandlerRun[R]:
        k = key(message)
        if not k:
            return HandlerRun(True, handler(message), None)
        if store.seen(k):
            return HandlerRun(False, None, k)
        result = handler(message)
        _quietly(store.remember, k, "remember")
        return HandlerRun(True, result, k)

    return run


def _quietly(action: Callable[[str], Any], k: str, what: str) -> None:
    try:
        action(k)
    except UnavailableError as exc:  # an outage: one line, the traceback adds nothing
        log.warning("idempotency store unavailable, could not %s message id %r: %s", what, k, exc)
    except Exception:
        log.exception("idempotency store failed to %s message id %r", what, k)
