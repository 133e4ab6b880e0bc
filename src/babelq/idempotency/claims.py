"""Owner tokens for claims, so a store can tell its own claim from another worker's.

A shared store's claim is a write that a network failure can leave in doubt: the INSERT (or
``SET NX``) committed, the reply was lost, and the caller only sees a broken connection. If
the claim carried no owner, the retry would find the id "claimed" and report it as claimed
*elsewhere* -- and the message would bounce until the claim TTL ran out, although nobody is
working on it. The same happens when giving a claim back fails because the store went away.

So every claim is written with a random token, and the store instance remembers the tokens
of claims it may hold:

* **held** -- ``claim`` returned True and neither ``remember`` nor ``release`` has run yet:
  someone in this process is working on the id. A second ``claim`` of the same id (a
  duplicate delivery racing the first) gets a fresh token and so is refused, as it must be.
* **in doubt** -- a ``claim`` or ``release`` of the id failed on a lost connection: the
  store may hold a claim of ours that nobody works on. The next ``claim`` of that id by this
  instance reuses the token, and the store accepts a claim whose owner matches: the
  redelivered message gets its own claim back at once instead of waiting out the TTL.

Only tokens this instance wrote are ever reused, and ``release`` deletes a claim only when
its owner matches, so a worker cannot free a claim another worker took over after its own
expired. Tokens of ids in doubt are kept up to a bound (oldest dropped first); a dropped one
only means that id waits for its claim TTL.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict

#: At most this many in-doubt tokens are remembered per store instance.
IN_DOUBT_LIMIT = 10_000


def new_token() -> str:
    """A fresh owner token (128 random bits, hex)."""
    return secrets.token_hex(16)


class ClaimTokens:
    """The owner tokens of one store instance's claims (thread-safe)."""

    def __init__(self, limit: int = IN_DOUBT_LIMIT) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, str] = {}
        self._in_doubt: OrderedDict[str, str] = OrderedDict()
        self._limit = limit

    def for_claim(self, message_id: str) -> str:
        """The token to claim ``message_id`` with: ours in doubt if there is one, else a new one."""
        with self._lock:
            token = self._in_doubt.pop(message_id, None)
        return token if token is not None else new_token()

    def claimed(self, message_id: str, token: str) -> None:
        """``claim`` succeeded with ``token``: held until remembered or released."""
        with self._lock:
            self._held[message_id] = token

    def take(self, message_id: str) -> str | None:
        """The token of the claim held on ``message_id`` (it is about to be resolved), if any."""
        with self._lock:
            return self._held.pop(message_id, None)

    def in_doubt(self, message_id: str, token: str) -> None:
        """A claim with ``token`` may exist in the store that nobody in this process works on."""
        with self._lock:
            self._in_doubt[message_id] = token
            self._in_doubt.move_to_end(message_id)
            while len(self._in_doubt) > self._limit:
                self._in_doubt.popitem(last=False)
