"""The connection half of both Redis layouts: the client, its errors, open/close and pickling.

Why a module of its own: the default layout (:mod:`babelq.transports.redis`) and the
Laravel-compatible one (:mod:`babelq.transports.redis_laravel`) differ in their keys and Lua
scripts, and in nothing else about how they reach Redis. Kept in each, that code would be two
near-identical copies where every fix must be made twice; here there is one of each rule, and
a layout module holds only its layout.

What lives here, and why each rule is what it is:

* :class:`RedisConnection`, the base class of both transports: it checks the options both
  layouts share, makes the redis-py client from the URL (with :data:`CONNECT_TIMEOUT`) or takes
  a given one, pings at open so a wrong host or password fails there and not at the first
  publish, and pickles as (class, URL, options) so a copy in another process opens its own
  connection (a socket cannot be pickled, and a given client is not ours to copy).
* :func:`driver_errors` and :func:`_translated`: redis-py's errors become babelq's, one line, the
  URL's password redacted, split by what the caller must do next (see :func:`_translated`).
* publishing as a plan: each layout says which commands a batch of bodies becomes
  (:meth:`RedisConnection.publish_commands`: pushes and script calls); this class runs the plan
  on a redis-py pipeline, and :class:`RedisAsyncWriter` runs the same plan through
  ``redis.asyncio`` without blocking the loop, so both write exactly the same keys. An asyncio
  client belongs to the event loop it was first used on, so the writer keeps one client per
  running loop (the App's own loop for handlers, the web server's for a request handler).

redis-py is imported only when a client is made here, so importing this module (or either
layout) pulls in no client library, like every transport module.
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

from babelq.errors import BabelqError, ConfigurationError, UnavailableError
from babelq.extras import optional_import
from babelq.transports.base import BaseTransport, Delivery, Outgoing
from babelq.urls import redact, redact_text

if TYPE_CHECKING:
    from redis import Redis
    from redis.asyncio import Redis as AsyncRedis
    from redis.commands.core import Script

P = ParamSpec("P")
R = TypeVar("R")

#: seconds redis-py may take to open a connection unless the URL sets ``socket_connect_timeout``
CONNECT_TIMEOUT = 10.0

#: the largest ``sweep_limit``: a reserve script moves that many members with one ``unpack()``,
#: and Lua's unpack takes at most ~8000 values
_MAX_SWEEP_LIMIT = 4000
#: members one script call takes at most (Lua's unpack() takes at most ~8000 values)
SCRIPT_BATCH = 1000


class WaitingCursor:
    """Where a waiting scan goes on: the ready list, then each sorted set of waiting members
    (the layout's ``_waiting_sources``), by index.

    Mutable on purpose: a waiting move of messages read before ``index`` shifts the rest of the
    list down, so it moves the cursor back by as many and the next page misses nothing."""

    __slots__ = ("index", "where")

    def __init__(self, where: str, index: int) -> None:
        self.where = where
        self.index = index


@dataclass(frozen=True, slots=True)
class Waiting:
    """A waiting message as a scan read it: ``where`` (``ready``, ``delayed`` or ``parked``), the
    stored list element or sorted-set member, and the cursor of the page it was read in."""

    where: str
    stored: bytes
    cursor: WaitingCursor


@dataclass(frozen=True, slots=True)
class Push:
    """``RPUSH key values...``"""

    key: str
    values: list[bytes]


@dataclass(frozen=True, slots=True)
class RunScript:
    """One call of a layout's Lua script (run by its SHA; loaded first where Redis lacks it)."""

    script: Script
    keys: list[str]
    args: list[str | bytes]


#: what publishing a batch sends, in order, in one MULTI/EXEC
PublishPlan = list[Push | RunScript]
#: a body to publish: (body, delay_ms, native headers or None)
PublishItem = tuple[bytes, int, Mapping[str, str] | None]


def _translated(exc: BaseException, action: str, where: str) -> BabelqError | None:
    """babelq's error for a redis-py error raised during ``action`` on ``where``; None if not one.

    The split is what a caller must do next, because that is what the runtime acts on:

    * fix the configuration (:class:`~babelq.errors.ConfigurationError`): a refused password, a
      missing ACL permission, a key of the queue that holds another type (another application
      or key layout uses the name). Retrying will not help.
    * wait for the broker (:class:`~babelq.errors.UnavailableError`): connection refused, lost
      or timed out, a replica that became read-only during a failover, a server out of memory,
      a cluster that is down. The broker's fault, not the message's: the runtime puts the
      message back instead of spending an attempt.
    * anything else is a bug (ours or redis-py's) and is raised unchanged (None here), so it is
      seen as one instead of passing for an outage.
    """
    errors = optional_import("redis.exceptions", needed_for="url: the redis transport")
    detail = " ".join(redact_text(str(exc)).split()) or type(exc).__name__
    refused = (
        errors.AuthenticationError,
        errors.AuthorizationError,
        errors.AuthenticationWrongNumberOfArgsError,
        errors.NoPermissionError,
    )
    if isinstance(exc, refused):
        return ConfigurationError(
            f"url: redis at {where} refused {action}: authentication or permission failed "
            f"({detail}); check the user and password in the URL"
        )
    unavailable = (
        errors.ConnectionError,
        errors.TimeoutError,
        errors.ReadOnlyError,
        errors.OutOfMemoryError,
        errors.ClusterDownError,
        errors.TryAgainError,
    )
    if isinstance(exc, unavailable):
        return UnavailableError(f"redis at {where} unavailable during {action}: {detail}")
    if isinstance(exc, errors.ResponseError) and str(exc).startswith("WRONGTYPE"):
        return ConfigurationError(
            f"queue: redis {action} at {where}: a key of this queue holds a value of another type, "
            f"so another application or key layout uses the same name ({detail})"
        )
    return None


class _Located(Protocol):
    """What :func:`driver_errors` needs of the object whose method it guards: where it talks to."""

    @property
    def where(self) -> str: ...


S = TypeVar("S", bound=_Located)


def driver_errors(
    action: str,
) -> Callable[[Callable[Concatenate[S, P], R]], Callable[Concatenate[S, P], R]]:
    """Decorate a method so redis-py's errors leave it as babelq's (see :func:`_translated`).

    Typed on anything with a ``where`` (not on one transport class), so one decorator serves
    both layouts and mypy still sees each method's own signature.
    """

    def decorate(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
        @functools.wraps(method)
        def guarded(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:
                mapped = _translated(exc, action, self.where)
                if mapped is None:
                    raise
                raise mapped from exc

        return guarded

    return decorate


def _new_client(url: str) -> Redis[bytes]:
    """A redis-py client for ``url``; a URL redis-py cannot use is a ConfigurationError."""
    redis = optional_import("redis", needed_for="url: the redis transport")
    try:
        # A socket_connect_timeout in the URL wins over this keyword (redis-py merges so).
        client: Redis[bytes] = redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT)
        return client
    except ValueError as exc:
        detail = " ".join(redact_text(str(exc)).split())
        raise ConfigurationError(f"url: {redact(url)!r} is not a usable redis URL: {detail}") from exc


class _QueueKeys(Protocol):
    """What the base class needs of a layout's keys of one queue: all of them (to purge)."""

    def all(self) -> tuple[str, ...]: ...


def _reopen(cls: type[RedisConnection], url: str, options: dict[str, Any]) -> RedisConnection:
    """Unpickle a Redis transport: the same class, URL and options, with a connection of its own."""
    return cls(url, **options)


class RedisConnection(BaseTransport):
    """A Redis transport's connection, whatever its key layout; the layouts subclass it.

    A subclass checks its own options before calling ``__init__`` here (so a bad one is refused
    before any connection is made), then registers its scripts on :attr:`client` (that sends
    nothing: redis-py loads a script at its first call). It provides :meth:`keys` and, if it has
    options of its own, adds them to :meth:`_options` so a pickled copy keeps them.
    """

    #: the layout's renewal script (registered by the layout's constructor)
    _renew_script: Script


    scheme = "redis"

    def __init__(
        self,
        url: str,
        *,
        client: Redis[bytes] | None,
        prefix: str,
        visibility_timeout: float,
        poll_interval: float,
        sweep_limit: int,
    ) -> None:
        if visibility_timeout <= 0:
            raise ConfigurationError(f"visibility_timeout: must be > 0 seconds, got {visibility_timeout!r}")
        if poll_interval <= 0:
            raise ConfigurationError(f"poll_interval: must be > 0 seconds, got {poll_interval!r}")
        if not 1 <= sweep_limit <= _MAX_SWEEP_LIMIT:
            raise ConfigurationError(f"sweep_limit: must be in 1..{_MAX_SWEEP_LIMIT}, got {sweep_limit!r}")
        self.url = url
        self.prefix = prefix
        self.visibility_timeout = float(visibility_timeout)
        self.poll_interval = float(poll_interval)
        self.sweep_limit = int(sweep_limit)
        self._owns_client = client is None
        self._redis: Redis[bytes] = _new_client(url) if client is None else client
        self._closed = False
        if self._owns_client:
            self._ping_at_open()

    def _ping_at_open(self) -> None:
        """Fail at open, not at the first publish, when Redis is unreachable or refuses us.

        Only for a client we made: a given client is its owner's to connect when they like.
        On failure the client is closed and the transport marked closed, so nothing leaks.
        """
        try:
            self._redis.ping()
        except Exception as exc:
            mapped = _translated(exc, "open", self.where)
            self._redis.close()
            self._closed = True
            if mapped is None:
                raise
            raise mapped from exc

    @property
    def client(self) -> Redis[bytes]:
        """The redis-py client this transport talks through."""
        return self._redis

    @property
    def where(self) -> str:
        """The Redis this transport talks to, as shown in errors: the URL without its password,
        or a given client's address."""
        if self._owns_client:
            return redact(self.url)
        options = self._redis.connection_pool.connection_kwargs
        if options.get("path"):
            return f"unix://{options['path']}"
        return f"redis://{options.get('host', '?')}:{options.get('port', '?')}/{options.get('db', 0)}"

    def keys(self, queue: str) -> _QueueKeys:
        """The layout's keys of ``queue`` (each layout names them its own way)."""
        raise NotImplementedError

    def _options(self) -> dict[str, Any]:
        """The constructor's options besides the URL and client: what a pickled copy reopens with."""
        return {
            "prefix": self.prefix,
            "visibility_timeout": self.visibility_timeout,
            "poll_interval": self.poll_interval,
            "sweep_limit": self.sweep_limit,
        }

    def __reduce__(self) -> tuple[Any, ...]:
        if not self._owns_client:
            raise TypeError(
                f"a {type(self).__name__} built around a given client cannot be pickled; pass a URL"
            )
        return (_reopen, (type(self), self.url, self._options()))

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError("redis transport: used after close()")

    def lease_seconds(self, queue: str) -> float | None:
        """The visibility timeout; checks the name like every method that takes one."""
        self.keys(queue)
        return self.visibility_timeout

    def _claim(self, queue: str, max_messages: int) -> tuple[list[Delivery], int]:
        """The layout's reserve script: (reservations, ms until the next delayed message is due or
        -1 when none is); empty when nothing is ready."""
        raise NotImplementedError

    def _wait_for_push(self, queue: str, seconds: float) -> None:
        """Block until something may have been published to ``queue`` or ``seconds`` pass (a hint:
        the caller claims again either way). Each layout has its own wake-up signal."""
        raise NotImplementedError

    @driver_errors("reserve")
    def reserve(self, queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list[Delivery]:
        """Up to ``max_messages`` (at most 1000 per call) reservations, in list order, waiting up to
        ``timeout`` seconds for the first: the claim again whenever the layout's wake-up signal
        fires, the poll interval passes or the next delayed message falls due."""
        self._check_open()
        if max_messages < 1:
            raise ValueError(f"max_messages: must be >= 1, got {max_messages}")
        end = time.monotonic() + max(timeout, 0.0)
        while True:
            got, wait_ms = self._claim(queue, max_messages)
            if got:
                return got
            remaining = end - time.monotonic()
            if remaining <= 0:
                return []
            block = min(remaining, self.poll_interval)
            if wait_ms >= 0:
                block = min(block, max(wait_ms / 1000, 0.001))
            self._wait_for_push(queue, max(block, 0.01))

    def _member(self, delivery: Delivery) -> bytes:
        """The reservation's member in the layout's lease set (a ConfigurationError for a delivery
        that is not this layout's)."""
        raise NotImplementedError

    def _lease_key(self, queue: str) -> str:
        """The layout's sorted set of reservations by deadline."""
        raise NotImplementedError

    @driver_errors("renew_many")
    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        """Push each held reservation's deadline a visibility timeout ahead; returns how many were
        still held (a lapsed one another consumer may have taken is not renewed)."""
        self._check_open()
        by_queue: dict[str, dict[bytes, None]] = {}
        for delivery in deliveries:
            by_queue.setdefault(delivery.queue, {})[self._member(delivery)] = None
        held = 0
        for queue, members in by_queue.items():
            ordered = list(members)
            for start in range(0, len(ordered), SCRIPT_BATCH):
                chunk = ordered[start : start + SCRIPT_BATCH]
                held += int(
                    self._renew_script(
                        keys=[self._lease_key(queue)], args=[repr(self.visibility_timeout), *chunk]
                    )
                )
        return held

    # -- waiting scans ---------------------------------------------------------------------

    scan_refusal = ""

    def _waiting_sources(self, queue: str) -> tuple[tuple[str, str], ...]:
        """Where ``queue``'s waiting messages are, in scan order: ``(where, key)`` pairs, the ready
        list first, then sorted sets read by rank."""
        raise NotImplementedError

    def _waiting_members(self, where: str, found: list[bytes]) -> list[bytes]:
        """The members of a page of ``where`` that are waiting messages (a sorted set may also
        hold what is not: reservations beside parked delayed bodies)."""
        return found

    def _waiting_delivery(self, queue: str, waiting: Waiting) -> Delivery:
        """The delivery a scan reports for a stored element or delayed member."""
        raise NotImplementedError

    def _move_waiting(self, queue: str, dlq: str, moves: Sequence[tuple[Waiting, bytes]]) -> list[int]:
        """The layout's atomic waiting move: one flag (1 moved, 0 left alone) per move."""
        raise NotImplementedError

    @driver_errors("scan_waiting")
    def scan_waiting(self, queue: str, *, after: Any = None, limit: int = 500) -> tuple[list[Delivery], Any]:
        """The ready list from its head, then the delayed set by due time (and, in the default
        layout, delayed bodies parked as reservations, by due time); reservations are not read.
        A page may hold fewer than ``limit`` messages while more follow: go on until the cursor
        is ``None``."""
        self._check_open()
        if limit < 1:
            raise ValueError(f"limit: must be >= 1, got {limit}")
        sources = self._waiting_sources(queue)
        cursor = after if isinstance(after, WaitingCursor) else WaitingCursor(sources[0][0], 0)
        phase = [where for where, _ in sources].index(cursor.where)
        key = sources[phase][1]
        if phase == 0:
            found = self._redis.lrange(key, cursor.index, cursor.index + limit - 1)
        else:
            found = self._redis.zrange(key, cursor.index, cursor.index + limit - 1)
        page = [
            self._waiting_delivery(queue, Waiting(cursor.where, bytes(item), cursor))
            for item in self._waiting_members(cursor.where, found)
        ]
        following: WaitingCursor | None = None
        if len(found) == limit:
            following = cursor
            cursor.index += limit
        elif phase + 1 < len(sources):
            following = WaitingCursor(sources[phase + 1][0], 0)
        return page, following

    @driver_errors("dead_letter_waiting")
    def dead_letter_waiting(self, moves: Sequence[tuple[Delivery, bytes]], *, dlq: str) -> int:
        """One script per queue and batch: ``LREM``/``ZREM`` of the exact element read, and the
        record pushed to ``dlq`` only when that removed it."""
        self._check_open()
        by_queue: dict[str, list[tuple[Waiting, bytes]]] = {}
        for delivery, record in moves:
            waiting = delivery.receipt
            if not isinstance(waiting, Waiting):
                raise ValueError(f"not a waiting message of the redis transport: {waiting!r}")
            by_queue.setdefault(delivery.queue, []).append((waiting, bytes(record)))
        moved = 0
        for queue, items in by_queue.items():
            for start in range(0, len(items), SCRIPT_BATCH):
                chunk = items[start : start + SCRIPT_BATCH]
                for (waiting, _), flag in zip(chunk, self._move_waiting(queue, dlq, chunk), strict=True):
                    if int(flag) == 1:
                        moved += 1
                        if waiting.cursor.where == waiting.where and waiting.cursor.index > 0:
                            waiting.cursor.index -= 1
        return moved

    @driver_errors("purge")
    def purge(self, queue: str) -> None:
        self._check_open()
        self._redis.delete(*self.keys(queue).all())

    # -- publish -------------------------------------------------------------------------

    def publish_commands(self, queue: str, items: Sequence[PublishItem]) -> PublishPlan:
        """The commands that publish ``items`` to ``queue`` in this layout (checks the name first)."""
        raise NotImplementedError

    @driver_errors("publish_many")
    def publish_many(self, queue: str, messages: Sequence[Outgoing]) -> None:
        self._check_open()
        plan = self.publish_commands(queue, [(m.body, m.delay_ms, None) for m in messages])
        if not plan:
            return
        pipe = self._redis.pipeline(transaction=True)
        for command in plan:
            if isinstance(command, Push):
                pipe.rpush(command.key, *command.values)
            else:
                command.script(keys=command.keys, args=command.args, client=pipe)
        pipe.execute()

    def async_writer(self) -> RedisAsyncWriter | None:
        """The ``redis.asyncio`` writer of this transport's URL (None for a given client: its
        connection settings are its owner's)."""
        if not self._owns_client:
            return None
        return RedisAsyncWriter(self)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            self._redis.close()


#: connections one event loop's client opens at most
_MAX_CONNECTIONS = 32
#: how long a publish waits for a free connection before the broker counts as unavailable
_POOL_WAIT_S = 30.0


class _LoopClient:
    """The asyncio client of one event loop, and the layout's scripts registered on it."""

    def __init__(self, client: AsyncRedis[bytes], pool: Any) -> None:
        self.client = client
        self.pool = pool  #: given to the client, so closing the client leaves it to us
        self.scripts: dict[str, Any] = {}


class RedisAsyncWriter:
    """``await writer.publish(queue, items)``: the transport's publish, on the running loop."""

    def __init__(self, transport: RedisConnection) -> None:
        self.transport = transport
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
            weakref.WeakKeyDictionary()
        )

    def _client(self) -> _LoopClient:
        loop = asyncio.get_running_loop()
        found = self._clients.get(loop)
        if found is None:
            aioredis = optional_import("redis.asyncio", needed_for="url: the redis transport")
            # a burst of concurrent publishes waits for a connection instead of failing past the
            # pool's size (the default pool raises "Too many connections")
            pool: Any = aioredis.BlockingConnectionPool.from_url(
                self.transport.url,
                max_connections=_MAX_CONNECTIONS,
                timeout=_POOL_WAIT_S,
                socket_connect_timeout=CONNECT_TIMEOUT,
            )
            client = aioredis.Redis(connection_pool=pool)
            found = self._clients[loop] = _LoopClient(client, pool)
        return found

    async def publish(self, queue: str, items: Sequence[PublishItem]) -> None:
        """Store ``items`` on ``queue`` durably before returning (one MULTI/EXEC)."""
        transport = self.transport
        transport._check_open()
        plan = transport.publish_commands(queue, items)
        if not plan:
            return
        on_loop = self._client()
        try:
            pipe = on_loop.client.pipeline(transaction=True)
            for command in plan:
                if isinstance(command, Push):
                    pipe.rpush(command.key, *command.values)
                    continue
                source: str = command.script.script  # type: ignore[attr-defined]
                script = on_loop.scripts.get(source)
                if script is None:
                    script = on_loop.scripts[source] = on_loop.client.register_script(source)
                await script(keys=command.keys, args=command.args, client=pipe)
            await pipe.execute()
        except Exception as exc:
            mapped = _translated(exc, "publish", transport.where)
            if mapped is None:
                raise
            raise mapped from exc

    async def aclose(self) -> None:
        """Close the client of the running loop (the others close with their loops)."""
        found = self._clients.pop(asyncio.get_running_loop(), None)
        if found is not None:
            await found.client.aclose()  # type: ignore[attr-defined]
            await found.pool.disconnect()
