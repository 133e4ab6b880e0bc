"""A Redis idempotency store shared by a fleet of consumers.

One key per message id (``<prefix><id>``). ``claim`` is ``SET key claimed NX PX
<claim_ttl>``: exactly one caller creates the key. ``remember`` overwrites it with ``done``
(with the optional TTL), ``release`` deletes it only while it still says ``claimed`` (a
small Lua script, so a concurrent ``remember`` is never undone), ``forget`` deletes it.
Needs the ``redis`` client (``pip install 'babelq[redis]'``), imported when a store is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from babelq.errors import ConfigurationError
from babelq.idempotency.store import check_ttls

if TYPE_CHECKING:
    from redis import Redis

CLAIMED: Final = b"claimed"
DONE: Final = b"done"
DEFAULT_PREFIX: Final = "babelq:idem:"

_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def _client(url: str) -> Redis[Any]:
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - the dev environment has redis
        raise ConfigurationError(
            f"RedisStore needs the redis client: pip install 'babelq[redis]' ({exc})"
        ) from exc
    client: Redis[Any] = redis.Redis.from_url(url)
    return client


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
        self._redis: Redis[Any] = _client(client) if isinstance(client, str) else client
        self._prefix = prefix
        self._ttl_ms = ttl_ms
        self._claim_ttl_ms = claim_ttl_ms
        self._release: Any = self._redis.register_script(_RELEASE)

    def _key(self, message_id: str) -> str:
        return self._prefix + message_id

    def seen(self, message_id: str) -> bool:
        return self._redis.get(self._key(message_id)) in (DONE, "done")  # bytes, or str if decode_responses

    def remember(self, message_id: str) -> None:
        self._redis.set(self._key(message_id), DONE, px=self._ttl_ms)

    def forget(self, message_id: str) -> None:
        self._redis.delete(self._key(message_id))

    def claim(self, message_id: str) -> bool:
        return bool(self._redis.set(self._key(message_id), CLAIMED, nx=True, px=self._claim_ttl_ms))

    def release(self, message_id: str) -> None:
        self._release(keys=[self._key(message_id)], args=[CLAIMED])

    def close(self) -> None:
        self._redis.close()
