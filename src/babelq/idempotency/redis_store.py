"""A Redis idempotency store shared by a fleet of consumers.

One key per message id (``<prefix><id>``). ``claim`` is ``SET key claimed:<token> NX PX
<claim_ttl>``: exactly one caller creates the key, and the value names the claim's owner
(:mod:`babelq.idempotency.claims`). If ``SET NX`` finds the key, a ``GET`` tells whether the
claim is this store's own -- the retry of a ``SET`` whose reply was lost on a dropped
connection, or a claim this worker could not give back while Redis was away -- and only then
is it taken again. ``remember`` overwrites the key with ``done`` (with the optional TTL),
``release`` deletes it only while it still holds this store's own claim (a small Lua script,
so a concurrent ``remember`` or another worker's claim is never undone), ``forget`` deletes it.
Needs the ``redis`` client (``pip install 'babelq[redis]'``), imported when a store is built.

A lost connection is not the message's fault (house rule): redis-py opens a new connection on
the next command, so every operation is tried once more after a connection error or timeout
(all of them are safe to repeat; counted in :attr:`RedisStore.reconnects`). If that fails too,
or Redis answers with an error (read-only replica, out of memory, a key of the wrong type),
the store raises :class:`~babelq.errors.UnavailableError` with redis-py's exception as
``__cause__`` and the URL's password masked; the runtime puts the message back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from babelq.errors import UnavailableError
from babelq.extras import optional_import
from babelq.idempotency.claims import ClaimTokens
from babelq.idempotency.store import check_ttls
from babelq.urls import one_line, redact

if TYPE_CHECKING:
    from redis import Redis

CLAIMED: Final = b"claimed:"  #: prefix of a claim's value; the owner token follows
DONE: Final = b"done"
DEFAULT_PREFIX: Final = "babelq:idem:"

_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

log = logging.getLogger(__name__)

T = TypeVar("T")


def _redis_module() -> Any:
    return optional_import("redis", needed_for="RedisStore")


def _describe_client(client: Redis[Any]) -> str:
    options = client.connection_pool.connection_kwargs
    if "path" in options:
        return f"redis+unix://{options['path']}"
    return f"redis://{options.get('host', '?')}:{options.get('port', 6379)}/{options.get('db', 0)}"


class RedisStore:
    """Claiming idempotency store on Redis. ``ttl_ms`` expires done ids (None: keep forever)."""

    def __init__(
        self,
        client: Redis[Any] | str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl_ms: int | None = None,
        claim_ttl_ms: int = 300_000,
    ) -> None:
        check_ttls(ttl_ms, claim_ttl_ms)
        redis = _redis_module()
        self._errors: Any = redis.exceptions
        if isinstance(client, str):
            self._redis: Redis[Any] = redis.Redis.from_url(client)
            #: the server as errors and log lines name it (password redacted)
            self.target = redact(client)
        else:
            self._redis = client
            self.target = _describe_client(client)
        self._prefix = prefix
        self._ttl_ms = ttl_ms
        self._claim_ttl_ms = claim_ttl_ms
        self._release: Any = self._redis.register_script(_RELEASE)
        self._tokens = ClaimTokens()
        #: operations tried again on a new connection after the previous one failed
        self.reconnects = 0

    def _key(self, message_id: str) -> str:
        return self._prefix + message_id

    def _call(self, action: str, operation: Callable[[], T]) -> T:
        """Run ``operation``; once more after a connection error; UnavailableError after that."""
        errors = self._errors
        for attempt in (1, 2):
            try:
                return operation()
            except (errors.ConnectionError, errors.TimeoutError) as exc:
                if attempt == 2:
                    raise self._unavailable(action, exc) from exc
                self.reconnects += 1
                log.warning(
                    "idempotency store %s lost its connection during %s (%s); trying again",
                    self.target, action, one_line(exc),
                )  # fmt: skip
            except errors.RedisError as exc:  # Redis answered, but not usefully: still not the message
                raise self._unavailable(action, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _unavailable(self, action: str, exc: BaseException) -> UnavailableError:
        detail = one_line(exc)
        return UnavailableError(f"idempotency store {self.target} unavailable during {action}: {detail}")

    def seen(self, message_id: str) -> bool:
        value = self._call("seen", lambda: self._redis.get(self._key(message_id)))
        return value in (DONE, "done")  # bytes, or str if decode_responses

    def remember(self, message_id: str) -> None:
        token = self._tokens.take(message_id)
        try:
            self._call("remember", lambda: self._redis.set(self._key(message_id), DONE, px=self._ttl_ms))
        except UnavailableError:
            if token is not None:
                self._tokens.in_doubt(message_id, token)
            raise

    def forget(self, message_id: str) -> None:
        self._tokens.take(message_id)
        self._call("forget", lambda: self._redis.delete(self._key(message_id)))

    def claim(self, message_id: str) -> bool:
        token = self._tokens.for_claim(message_id)
        mine = CLAIMED + token.encode()
        key = self._key(message_id)

        def attempt() -> bool:
            if self._redis.set(key, mine, nx=True, px=self._claim_ttl_ms):
                return True
            held = self._redis.get(key)  # our own claim, whose first reply was lost?
            if held not in (mine, mine.decode()):
                return False
            self._redis.pexpire(key, self._claim_ttl_ms)
            return True

        try:
            won = self._call("claim", attempt)
        except UnavailableError:
            self._tokens.in_doubt(message_id, token)  # the SET may have happened
            raise
        if won:
            self._tokens.claimed(message_id, token)
        return won

    def release(self, message_id: str) -> None:
        """Give back this store's claim on ``message_id`` (anyone else's, or a done id, stays)."""
        token = self._tokens.take(message_id)
        if token is None:
            return
        mine = CLAIMED + token.encode()
        try:
            self._call("release", lambda: self._release(keys=[self._key(message_id)], args=[mine]))
        except UnavailableError:
            self._tokens.in_doubt(message_id, token)
            raise

    def close(self) -> None:
        self._redis.close()
