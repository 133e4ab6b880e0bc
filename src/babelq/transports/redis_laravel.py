"""The Redis transport in the Laravel-compatible layout (``redis://host:6379/0?laravel=1``).

Why a second layout: the ``babelqueue`` SDK (and Laravel's own Redis queue) can keep a queue as
a ``queues:<name>`` ready list with ``:reserved`` and ``:delayed`` sorted sets and a ``:notify``
wake-up list. In that layout both SDKs read and write the same delayed set, so a retry in
backoff or a delayed publish by either side is promoted by whichever consumer comes next:
the layout a mixed fleet wants when it needs delays. The default layout
(:mod:`babelq.transports.redis`) is untouched by this module; the scheme's ``from_url``
hands a URL with ``laravel=1`` (or ``laravel_compat=1``) here.

Semantics, chosen to be the same as the babelqueue SDK's (keys in
:func:`babelq.bindings.redis.laravel_keys`):

* publish: ``RPUSH`` the bare envelope and one ``:notify`` token (one script). A delay adds the
  body to ``:delayed`` scored by its due time instead (no token, as Laravel does).
* reserve (one script): move due ``:delayed`` members, then ``:reserved`` members whose deadline
  passed, to the end of the ready list (one token each); then pop up to N jobs. Each popped job
  whose JSON decodes to an object with a numeric ``attempts`` is reserved as that object with
  ``attempts + 1`` (re-encoded by Lua's cjson: Laravel's pop); any other job is reserved as it
  is. The delivery's body is the job as popped (attempts before this delivery, every byte as
  published); the reserved member is only the receipt. So a reservation that lapses (a crashed
  worker) comes back as the bumped member: a recovery counts as an attempt, as in Laravel.
* ack: ``ZREM`` the member. release / retry: one gated script moves the member from
  ``:reserved`` to ``:delayed`` (due now + delay; release keeps the bytes, retry puts the new
  body). dead-letter: one gated script moves it to the ready list of ``<queue>.dlq`` (plus a
  token). "Gated": nothing is written when the member is no longer reserved.
* renew: re-score the member while it is still reserved.

Differences from the babelqueue SDK, all on the safe side: scores are epoch seconds with a
fraction (Redis ``TIME``), so a delay is never cut short by rounding to whole seconds (both
SDKs compare scores numerically); release and retry are gated like dead-letter; ``retry_after
= null`` (reservations that never lapse) is refused. Limits of the layout itself, as in
Laravel: members are the jobs themselves, so two byte-identical jobs delayed or reserved at the
same time share one member (real envelopes differ by ``meta.id``), and a job without a numeric
``attempts`` keeps the same member when it is reserved again, so a late ack of such a body can
settle its newer reservation. Header frames are not written here (the reserve script must
decode the job; the babelqueue SDK drops the headers in this layout too) but a frame found on
the list is read like in the default layout. No tagged reservations (``tagged_reservations`` is
False): the Spark streaming reader needs the default layout. No delivery count.

Options (keywords or URL query): ``prefix`` (default ``queues:``), ``visibility_timeout``
(seconds, default 90 like the babelqueue SDK's ``retry_after``; ``retry_after`` is accepted in
the URL as its other name), ``poll_interval``, ``sweep_limit``, as in the default layout. Errors
are the default layout's (one line, password redacted, ``UnavailableError`` for a broker fault):
both layouts connect, ping, translate errors and pickle through
:mod:`babelq.transports.redis_connection`, so this module is only the layout.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from babelq.bindings.redis import LARAVEL_PREFIX, LaravelKeys, laravel_keys, unframe
from babelq.envelope import Envelope
from babelq.errors import ConfigurationError
from babelq.transports.base import Delivery
from babelq.transports.redis_connection import (
    SCRIPT_BATCH,
    PublishItem,
    PublishPlan,
    RedisConnection,
    RunScript,
    Waiting,
    driver_errors,
)
from babelq.transports.redis_options import RedisOptions, client_url
from babelq.transports.url_options import TransportURL

if TYPE_CHECKING:
    from redis import Redis
    from redis.commands.core import Script

log = logging.getLogger(__name__)

_SCRIPT_BATCH = SCRIPT_BATCH
_RPUSH_CHUNK = 5000

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# KEYS: ready, notify   ARGV: jobs -> the ready list's length
_PUSH = """
redis.call('RPUSH', KEYS[1], unpack(ARGV))
local tokens = {}
for i = 1, #ARGV do tokens[i] = 1 end
redis.call('RPUSH', KEYS[2], unpack(tokens))
return #ARGV
"""

# KEYS: delayed   ARGV: delay (s), job, delay, job, ...
_PUSH_DELAYED = _NOW + """
local args = {}
for i = 1, #ARGV, 2 do
  args[#args + 1] = now + tonumber(ARGV[i])
  args[#args + 1] = ARGV[i + 1]
end
return redis.call('ZADD', KEYS[1], unpack(args))
"""

# KEYS: ready, reserved, delayed, notify   ARGV: max jobs, visibility timeout (s), sweep limit
# -> {jobs as popped, reserved members, ms until the next due/lapse or -1 (only when empty)}
_RESERVE = _NOW + """
local limit = tonumber(ARGV[3])
for _, key in ipairs({KEYS[3], KEYS[2]}) do
  local due = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', 0, limit)
  if #due > 0 then
    redis.call('ZREM', key, unpack(due))
    redis.call('RPUSH', KEYS[1], unpack(due))
    local tokens = {}
    for i = 1, #due do tokens[i] = 1 end
    redis.call('RPUSH', KEYS[4], unpack(tokens))
  end
end
local deadline = now + tonumber(ARGV[2])
local jobs = {}
local members = {}
for i = 1, tonumber(ARGV[1]) do
  local job = redis.call('LPOP', KEYS[1])
  if not job then break end
  local reserved = job
  local ok, decoded = pcall(cjson.decode, job)
  if ok and type(decoded) == 'table' and type(decoded['attempts']) == 'number' then
    decoded['attempts'] = decoded['attempts'] + 1
    local encoded_ok, encoded = pcall(cjson.encode, decoded)
    if encoded_ok then reserved = encoded end
  end
  redis.call('ZADD', KEYS[2], deadline, reserved)
  redis.call('LPOP', KEYS[4])
  jobs[i] = job
  members[i] = reserved
end
if #jobs > 0 then return {jobs, members, 0} end
local wait = -1
for _, key in ipairs({KEYS[2], KEYS[3]}) do
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first > 0 then
    local ms = math.max(math.floor((tonumber(first[2]) - now) * 1000), 0)
    if wait < 0 or ms < wait then wait = ms end
  end
end
return {{}, {}, wait}
"""

# KEYS: reserved, target delayed, target ready, target notify
# ARGV: reserved member, body to put, delay (s), where (delayed|ready) -> 1 settled, 0 not held
_SETTLE = _NOW + """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
if ARGV[4] == 'ready' then
  redis.call('RPUSH', KEYS[3], ARGV[2])
  redis.call('RPUSH', KEYS[4], 1)
else
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[2])
end
return 1
"""

# KEYS: reserved   ARGV: visibility timeout (s), members -> how many were still reserved
_RENEW = _NOW + """
local deadline = now + tonumber(ARGV[1])
local held = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', deadline, ARGV[i])
    held = held + 1
  end
end
return held
"""

# A waiting move (babelq expire): remove the exact job a scan read (ready list, with one wake-up
# token, as a pop takes one; or the delayed set) and push its dead letter to the DLQ's ready list
# with a token, only when the removal happened.
# KEYS: ready, delayed, notify, DLQ ready, DLQ notify   ARGV: where, job, record, ... -> flags
_MOVE_WAITING = """
local flags = {}
for i = 1, #ARGV, 3 do
  local gone
  if ARGV[i] == 'ready' then
    gone = redis.call('LREM', KEYS[1], 1, ARGV[i + 1])
    if gone == 1 then redis.call('LPOP', KEYS[3]) end
  else
    gone = redis.call('ZREM', KEYS[2], ARGV[i + 1])
  end
  if gone == 1 then
    redis.call('RPUSH', KEYS[4], ARGV[i + 2])
    redis.call('RPUSH', KEYS[5], 1)
  end
  flags[#flags + 1] = gone
end
return flags
"""


@dataclass(frozen=True, slots=True)
class _Reserved:
    """The settle handle of one reservation: its member in ``:reserved`` and the job as popped
    (what a release puts back, a header frame included)."""

    member: bytes
    job: bytes


def _seconds(delay_ms: int) -> str:
    return repr(max(int(delay_ms), 0) / 1000)


class RedisLaravelTransport(RedisConnection):
    """Queues in the Laravel-compatible Redis layout shared with the babelqueue SDK; thread-safe.

    The connection (client, ping at open, errors, close, pickling) is
    :class:`~babelq.transports.redis_connection.RedisConnection`'s; this class is the layout.
    """

    tagged_reservations = False

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        client: Redis[bytes] | None = None,
        prefix: str = LARAVEL_PREFIX,
        visibility_timeout: float = 90.0,
        poll_interval: float = 0.5,
        sweep_limit: int = 1000,
    ) -> None:
        super().__init__(
            url,
            client=client,
            prefix=prefix,
            visibility_timeout=visibility_timeout,
            poll_interval=poll_interval,
            sweep_limit=sweep_limit,
        )
        register = self.client.register_script
        self._push_script: Script = register(_PUSH)
        self._delayed_script: Script = register(_PUSH_DELAYED)
        self._reserve_script: Script = register(_RESERVE)
        self._settle_script: Script = register(_SETTLE)
        self._renew_script: Script = register(_RENEW)
        self._move_waiting_script: Script = register(_MOVE_WAITING)
        self._keys: dict[str, LaravelKeys] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisLaravelTransport:
        """Our options (and ``laravel``/``laravel_compat``) are taken out of the query; redis-py's
        stay in the URL it opens (:class:`~babelq.transports.redis_options.RedisOptions`).
        ``retry_after`` is the babelqueue SDK's name for ``visibility_timeout``."""
        link = TransportURL.split(url)
        return cls.from_options(link, RedisOptions.parse(link, options), options)

    @classmethod
    def from_options(
        cls, link: TransportURL, parsed: RedisOptions, keywords: dict[str, Any]
    ) -> RedisLaravelTransport:
        """The transport ``link`` and its ``parsed`` options describe (``keywords``: the keyword
        options they were parsed from, for redis-py's)."""
        if parsed.delays is not None:
            raise ConfigurationError(
                "delays: an option of the default layout; the Laravel layout always keeps delayed "
                f"messages in <queue>:delayed, shared with the babelqueue SDK, in {link.shown()}"
            )
        own = parsed.layout_options("prefix", "visibility_timeout", "poll_interval", "sweep_limit")
        return cls(client_url(link, keywords), **own)

    def keys(self, queue: str) -> LaravelKeys:
        """The keys of ``queue`` (a name ending in a reserved suffix is a ConfigurationError)."""
        found = self._keys.get(queue)
        if found is None:
            found = self._keys[queue] = laravel_keys(queue, self.prefix)
        return found

    # -- publish -------------------------------------------------------------------------

    @driver_errors("publish")
    def publish(
        self,
        queue: str,
        body: bytes,
        *,
        envelope: Envelope | None = None,
        delay_ms: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """``headers`` are accepted for symmetry with the default layout and dropped: this layout
        stores the bare envelope (the babelqueue SDK drops them here too)."""
        self._check_open()
        keys = self.keys(queue)
        if delay_ms > 0:
            self._delayed_script(keys=[keys.delayed], args=[_seconds(delay_ms), bytes(body)])
        else:
            self._push_script(keys=[keys.ready, keys.notify], args=[bytes(body)])

    def publish_commands(self, queue: str, items: Sequence[PublishItem]) -> PublishPlan:
        """Headers are dropped, as :meth:`publish` drops them."""
        keys = self.keys(queue)
        now = [bytes(body) for body, delay_ms, _ in items if delay_ms <= 0]
        later: list[str | bytes] = []
        for body, delay_ms, _ in items:
            if delay_ms > 0:
                later += [_seconds(delay_ms), bytes(body)]
        plan: PublishPlan = [
            RunScript(self._push_script, [keys.ready, keys.notify], list(now[start : start + _RPUSH_CHUNK]))
            for start in range(0, len(now), _RPUSH_CHUNK)
        ]
        for start in range(0, len(later), 2 * _SCRIPT_BATCH):
            chunk = later[start : start + 2 * _SCRIPT_BATCH]
            plan.append(RunScript(self._delayed_script, [keys.delayed], chunk))
        return plan

    # -- reserve -------------------------------------------------------------------------

    def _claim(self, queue: str, max_messages: int) -> tuple[list[Delivery], int]:
        keys = self.keys(queue)
        jobs, members, wait_ms = self._reserve_script(
            keys=list(keys.all()),
            args=[min(max_messages, _SCRIPT_BATCH), repr(self.visibility_timeout), self.sweep_limit],
        )
        out: list[Delivery] = []
        for job, held in zip(jobs, members, strict=True):
            body, headers = unframe(job)
            receipt = _Reserved(held, job)
            out.append(
                Delivery(body=body, queue=queue, receipt=receipt, headers=headers, carried_headers=headers)
            )
        return out, int(wait_ms)

    def _wait_for_push(self, queue: str, seconds: float) -> None:
        # Laravel's blocking pop: wait for a wake-up token (consumed: it is only a hint)
        self._redis.blpop([self.keys(queue).notify], seconds)

    # -- settle --------------------------------------------------------------------------

    @staticmethod
    def _receipt(delivery: Delivery) -> _Reserved:
        receipt = delivery.receipt
        if not isinstance(receipt, _Reserved):
            raise ValueError(f"not a reservation of the redis (laravel) transport: {receipt!r}")
        return receipt

    @classmethod
    def _member(cls, delivery: Delivery) -> bytes:
        return cls._receipt(delivery).member

    def _lost(self, queue: str, action: str, count: int = 1) -> None:
        log.warning(
            "redis: %s of %d reservation(s) on %r that were no longer reserved (visibility_timeout=%ss); "
            "they were moved back and will be delivered again",
            action,
            count,
            queue,
            self.visibility_timeout,
        )

    @driver_errors("ack")
    def ack(self, delivery: Delivery) -> None:
        self._ack_many([delivery])

    @driver_errors("ack_many")
    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        self._ack_many(deliveries)

    def _ack_many(self, deliveries: Sequence[Delivery]) -> None:
        self._check_open()
        by_queue: dict[str, dict[bytes, None]] = {}
        for delivery in deliveries:
            by_queue.setdefault(delivery.queue, {})[self._member(delivery)] = None
        for queue, held in by_queue.items():
            members = list(held)
            reserved = self.keys(queue).reserved
            done = 0
            for start in range(0, len(members), _SCRIPT_BATCH):
                done += int(self._redis.zrem(reserved, *members[start : start + _SCRIPT_BATCH]))
            if done != len(members):
                self._lost(queue, "ack", len(members) - done)

    def _settle(
        self, delivery: Delivery, body: bytes, *, target: str, delay_ms: int, where: str, action: str
    ) -> None:
        self._check_open()
        keys, target_keys = self.keys(delivery.queue), self.keys(target)
        held = self._settle_script(
            keys=[keys.reserved, target_keys.delayed, target_keys.ready, target_keys.notify],
            args=[self._member(delivery), bytes(body), _seconds(delay_ms), where],
        )
        if int(held) != 1:
            self._lost(delivery.queue, action)

    @driver_errors("release")
    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        self._settle(
            delivery,
            self._receipt(delivery).job,
            target=delivery.queue,
            delay_ms=delay_ms,
            where="delayed",
            action="release",
        )

    @driver_errors("retry")
    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        self._settle(
            delivery, body, target=delivery.queue, delay_ms=delay_ms, where="delayed", action="retry"
        )

    @driver_errors("dead_letter")
    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        self._settle(delivery, body, target=dlq, delay_ms=0, where="ready", action="dead_letter")

    def _lease_key(self, queue: str) -> str:
        return self.keys(queue).reserved

    # -- waiting scans -------------------------------------------------------------------

    def _waiting_sources(self, queue: str) -> tuple[tuple[str, str], ...]:
        keys = self.keys(queue)
        return ("ready", keys.ready), ("delayed", keys.delayed)

    def _waiting_delivery(self, queue: str, waiting: Waiting) -> Delivery:
        body, headers = unframe(waiting.stored)
        return Delivery(body=body, queue=queue, receipt=waiting, headers=headers, carried_headers=headers)

    def _move_waiting(self, queue: str, dlq: str, moves: Sequence[tuple[Waiting, bytes]]) -> list[int]:
        keys, target = self.keys(queue), self.keys(dlq)
        args: list[str | bytes] = []
        for waiting, record in moves:  # bare, as dead_letter writes it in this layout
            args += [waiting.where, waiting.stored, record]
        flags: list[int] = self._move_waiting_script(
            keys=[keys.ready, keys.delayed, keys.notify, target.ready, target.notify], args=args
        )
        return flags

    # -- inspection ----------------------------------------------------------------------

    def _now(self) -> str:
        seconds, micros = self._redis.time()
        return repr(seconds + micros / 1_000_000)

    @driver_errors("size")
    def size(self, queue: str) -> int:
        """Ready + delayed + reservations whose deadline passed (they are waiting again)."""
        self._check_open()
        keys = self.keys(queue)
        now = self._now()
        pipe = self._redis.pipeline(transaction=False)
        pipe.llen(keys.ready)
        pipe.zcard(keys.delayed)
        pipe.zcount(keys.reserved, "-inf", now)
        return sum(int(n) for n in pipe.execute())

    @driver_errors("ready")
    def ready(self, queue: str) -> int:
        """Ready jobs + delayed ones already due + reservations whose deadline passed."""
        self._check_open()
        keys = self.keys(queue)
        now = self._now()
        pipe = self._redis.pipeline(transaction=False)
        pipe.llen(keys.ready)
        pipe.zcount(keys.delayed, "-inf", now)
        pipe.zcount(keys.reserved, "-inf", now)
        return sum(int(n) for n in pipe.execute())

    @driver_errors("reserved")
    def reserved(self, queue: str) -> int:
        """Reservations whose deadline has not passed."""
        self._check_open()
        return int(self._redis.zcount(self.keys(queue).reserved, f"({self._now()}", "+inf"))
