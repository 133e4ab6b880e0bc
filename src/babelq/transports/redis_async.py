"""Publishing to Redis from a coroutine, through ``redis.asyncio``, without blocking the loop.

The layout decides what a batch becomes (:meth:`RedisConnection.publish_commands
<babelq.transports.redis_connection.RedisConnection.publish_commands>`, the plan the blocking
``publish_many`` runs too), so a body published here lands in the same keys, framed the same
way, as one published by the transport itself. An asyncio client belongs to the event loop it
was first used on, so there is one client per running loop (the App's own loop for handlers,
the web server's for a request handler), made from the transport's URL.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from babelq.extras import optional_import
from babelq.transports.redis_connection import (
    CONNECT_TIMEOUT,
    PublishItem,
    Push,
    RedisConnection,
    _translated,
)

if TYPE_CHECKING:
    from redis.asyncio import Redis as AsyncRedis

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
