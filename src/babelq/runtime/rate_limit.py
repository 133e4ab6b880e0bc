"""A rate limit per URN: a token bucket, in the process or shared by a fleet through Redis.

``@app.handler(urn, rate=RateLimit(50))`` lets at most 50 of that URN's handlers start per
second (bursts up to ``burst``). A handler over the limit waits for its token on its own thread
(the message stays reserved, its lease renewed as for any running handler); a wait longer than
``max_wait`` seconds puts the message back instead (:class:`RateLimitedError`, an
:class:`~babelq.errors.UnavailableError`: never a failed attempt). Waiting, not releasing, is
the first choice because on SQS, Service Bus and Artemis every release raises the broker's
receive count, which the standard's attempts reconciliation reads.

``RateLimit(50, shared="redis://host:6379/0")`` keeps the bucket in Redis (one Lua script, the
server's clock), so every worker of a fleet draws from the same 50 a second.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from babelq.errors import ConfigurationError
from babelq.errors import RateLimitedError as RateLimitedError

#: seconds a handler waits for its token at most before its message is put back
DEFAULT_MAX_WAIT_S = 10.0

# KEYS[1] bucket; ARGV: rate per second, burst. Returns the milliseconds to wait (0: token taken).
_TAKE = """
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens, at = tonumber(state[1]) or burst, tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = math.ceil((1 - tokens) * 1000 / rate) end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return wait
"""


class RateLimit:
    """At most ``per_second`` starts a second, bursts of ``burst`` (default: one second's worth)."""

    def __init__(
        self,
        per_second: float,
        *,
        burst: int | None = None,
        shared: str | None = None,
        key: str | None = None,
        max_wait: float = DEFAULT_MAX_WAIT_S,
    ) -> None:
        if isinstance(per_second, bool) or not isinstance(per_second, int | float) or not per_second > 0:
            raise ConfigurationError(
                f"rate: must be a number of handler starts a second > 0, got {per_second!r}"
            )
        self.per_second = float(per_second)
        self.burst = burst if burst is not None else max(1, int(per_second))
        if type(self.burst) is not int or self.burst < 1:
            raise ConfigurationError(f"rate burst: must be an integer >= 1, got {burst!r}")
        if not max_wait >= 0:
            raise ConfigurationError(f"rate max_wait: must be >= 0 seconds, got {max_wait!r}")
        self.max_wait = float(max_wait)
        self.shared = shared
        self.key = key  #: the Redis key of a shared bucket (default: one per URN, set when bound)
        self._lock = threading.Lock()
        self._tokens = float(self.burst)
        self._at = time.monotonic()
        self._script: Any = None

    def bound(self, urn: str) -> RateLimit:
        """This limit for ``urn``'s handler (a shared bucket keyed by the URN unless ``key`` says)."""
        if self.key is None and self.shared is not None:
            self.key = f"babelq:rate:{urn}"
        return self

    def _take_local(self) -> float:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_second)
            self._at = now
            if self._tokens >= 1:
                self._tokens -= 1
                return 0.0
            return (1 - self._tokens) / self.per_second

    def _take_shared(self) -> float:
        if self._script is None:
            from babelq.transports.redis_connection import _new_client

            self._script = _new_client(str(self.shared)).register_script(_TAKE)
        try:
            wait_ms = self._script(keys=[self.key], args=[repr(self.per_second), self.burst])
        except Exception as exc:  # Redis down: the message is put back, it is not at fault
            raise RateLimitedError(f"rate limit store unreachable: {exc}") from exc
        return int(wait_ms) / 1000

    def wait(self) -> None:
        """Return once a token is taken; raise :class:`RateLimitedError` past ``max_wait``."""
        deadline = time.monotonic() + self.max_wait
        take = self._take_shared if self.shared is not None else self._take_local
        while True:
            pause = take()
            if pause <= 0:
                return
            if time.monotonic() + pause > deadline:
                raise RateLimitedError(
                    f"rate limit of {self.per_second:g}/s: no token within {self.max_wait:g} s; put back"
                )
            time.sleep(pause)
