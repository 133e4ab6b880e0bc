"""The Redis transport (``redis://host:6379/0``, ``rediss://`` for TLS): the reliable-queue pattern.

Why it looks like this: docs/standard.md §4 fixes the wire (the list element is the envelope, byte
for byte, RPUSH to produce, consume from the head) and asks that a killed worker's messages
come back. Every state change is one Lua script, so it is atomic and costs one round trip
whatever the batch size: that is what makes batch reserve/ack fast.

* publish: ``RPUSH`` (a batch is one ``RPUSH`` of many values); a delayed body is parked as a
  reservation due at its time (``delays=lease``, the default) or goes to the ``:delayed``
  sorted set (``delays=own``), promoted to the tail of the list when due.
* reserve: one script promotes due delayed bodies, sweeps lapsed reservations back to the
  head of the list, then pops up to N bodies into ``:processing`` and writes one deadline
  member ``<token>:<body>`` per reservation into ``:processing:deadlines``.
* ack / release / retry / dead-letter: one script per call (per batch for ``ack_many``), gated
  on the reservation's deadline member: a worker whose reservation lapsed and was taken by
  another worker changes nothing. ``LREM ... 1 <body>`` removes exactly one copy; since each
  live reservation has exactly one copy in ``:processing``, identical bodies stay correct.
* tagged reservations (:meth:`RedisTransport.reserve_tagged`): the same reservation (list
  move, deadline member, count), plus a record list ``<queue>:<tag>:reads`` written by the same
  script: a header, then the tag's deadline members in order. A second reserve of the tag
  re-scores those members still in the deadline set instead of taking new bodies; renew, ack
  and release by tag read the members from the record (one script for every tag of a call).
  The record expires a while after its last renewal (:data:`TAG_RECORD_SECONDS` at least), so
  the records of a run that died go away by themselves; it duplicates the bodies it names.
* ``reserve(timeout=...)`` blocks with ``BLMOVE <list> <list> RIGHT RIGHT`` (which moves the
  tail element onto the tail: the list is unchanged), so it wakes as soon as anything is
  pushed, then reserves with the script. Nothing is ever held outside the scripts.

Header frames (the babelqueue SDK's out-of-band headers): a stored
``{"__bq_frame":1,"headers":...,"body":...}`` is delivered as the envelope inside with the
headers on ``Delivery.headers``; ``publish(..., headers=...)`` writes one; a retry or
dead-letter keeps the headers, a release puts the frame back as it was.

Key layout and interop with the ``babelqueue`` SDK: :mod:`babelq.bindings.redis`. Times come
from the Redis server's clock (``TIME``) so workers on different hosts agree.

Options (keyword arguments, or the URL query: ``redis://h/0?prefix=app:&visibility_timeout=60``):
``prefix`` (key prefix, default none), ``visibility_timeout`` (seconds, default 30),
``poll_interval`` (longest single block while waiting, default 0.5 s: bounds how late a
delayed body published by someone else is noticed), ``sweep_limit`` (most delayed/lapsed
members moved per reserve, default 1000), ``delays`` (where a delayed body waits: ``lease``,
the default, parks it as a reservation due at its time, which either SDK's sweep brings back;
``own`` is the ``:delayed`` set above, which the babelqueue SDK's default layout never reads;
``ready`` ignores the delay; see docs/transports-redis.md). Whatever the mode, a reserve still
promotes what waits in ``:delayed``, so bodies left there by ``own`` are never stranded. ``laravel=1`` (or
``laravel_compat=1``) opens the Laravel-compatible layout instead
(:mod:`babelq.transports.redis_laravel`). redis-py's connection options
(:data:`~babelq.transports.redis_options.CLIENT_OPTIONS`: ``socket_timeout``, ``ssl_cert_reqs``...)
go to redis-py; any other key is refused (:mod:`babelq.transports.redis_options`).
``socket_connect_timeout`` defaults to :data:`CONNECT_TIMEOUT` so an unreachable host fails
an open in seconds, not after the operating system's minutes-long connect timeout.

Queue names go through :func:`babelq.bindings.redis.check_queue` (via :meth:`RedisTransport.keys`)
in every method that takes one: a name that would land on another queue's bookkeeping keys is
a ConfigurationError before anything is sent.

Errors: opening the transport (with its own client) pings Redis, so a wrong host, port or
password fails there and not at the first publish. Driver errors become babelq's, one line,
with the URL's password replaced by ``***``: a refused password or missing permission is a
:class:`~babelq.errors.ConfigurationError` (retrying will not help); a lost or refused
connection, a timeout, a read-only replica or a full server is an
:class:`~babelq.errors.UnavailableError` (the broker's fault, not the message's: the runtime
puts the message back instead of spending an attempt), with redis-py's exception as
``__cause__``. Anything else from redis-py is a bug and is raised as it is. These rules, the
client and its open/close/pickling are shared with the Laravel layout and live in
:mod:`babelq.transports.redis_connection`; this module is the key layout and its scripts.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, get_args

from babelq.bindings.redis import (
    PARKED_TOKEN_PREFIX,
    TOKEN_LENGTH,
    QueueKeys,
    frame,
    keys_for,
    member,
    reads_key,
    unframe,
)
from babelq.envelope import Envelope
from babelq.errors import ConfigurationError
from babelq.transports.base import Delivery, check_tag
from babelq.transports.redis_connection import (
    CONNECT_TIMEOUT,
    SCRIPT_BATCH,
    PublishItem,
    PublishPlan,
    Push,
    RedisConnection,
    RunScript,
    Waiting,
    driver_errors,
)
from babelq.transports.redis_options import DelayMode, RedisOptions, client_url
from babelq.transports.url_options import TransportURL

if TYPE_CHECKING:
    from redis import Redis
    from redis.commands.core import Script

    from babelq.transports.redis_laravel import RedisLaravelTransport

log = logging.getLogger(__name__)

_BODY_AT = TOKEN_LENGTH + 2  # Lua index of the first body byte in "<token>:<body>"
_RPUSH_CHUNK = 5000
# Lua's unpack() takes at most ~8000 values: scripts get at most this many messages per call.
_SCRIPT_BATCH = SCRIPT_BATCH
_COUNTS_TTL = 86_400  # seconds
#: a tagged reservation's record lives at least this long after its last renewal (seconds)
TAG_RECORD_SECONDS = 600

# The first step of both reserves (_RESERVE and _RESERVE_TAGGED): promote due delayed bodies to
# the tail, sweep lapsed reservations back to the head. Expects `now` and `limit`; KEYS as in
# _RESERVE (1 ready, 2 processing, 3 deadlines, 4 delayed).
_PROMOTE_AND_SWEEP = f"""
local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, limit)
if #due > 0 then
  for _, m in ipairs(due) do
    redis.call('RPUSH', KEYS[1], string.sub(m, {_BODY_AT}))
  end
  redis.call('ZREM', KEYS[4], unpack(due))
end
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, limit)
if #lapsed > 0 then
  for i = #lapsed, 1, -1 do
    local body = string.sub(lapsed[i], {_BODY_AT})
    if redis.call('LREM', KEYS[2], 1, body) == 1 then
      redis.call('LPUSH', KEYS[1], body)
    end
  end
  redis.call('ZREM', KEYS[3], unpack(lapsed))
end
"""

# The delivery counts (KEYS[5] of the reserves, ``<queue>:deliveries``) are written for a whole
# batch at once. Redis keeps a small hash as a listpack, where setting or deleting a field scans
# the whole hash, so a batch of n counts costs n^2 (Redis' default keeps up to 512 fields so,
# and at a large prefetch that outweighs everything else the reserve does). One field
# whose value is longer than ``hash-max-listpack-value`` (64 bytes by default) makes Redis keep
# the hash as a hash table, where each field costs the same whatever the size. The field's name
# is no sha1 digest (40 hex characters), so no body's count can ever be read from it; the
# scripts that delete counts delete the hash once the marker is all that is left.
_COUNTS_MARKER = "babelq:encoding"
_COUNTS_MARKER_VALUE = (
    "a hash table, not a listpack: this value is longer than hash-max-listpack-value (64 bytes)"
)
# Lua: delete the counts hash KEYS[n] when only the marker is left (nothing of the queue in flight)
_DROP_IDLE_COUNTS = """
if redis.call('HLEN', {key}) == 1 and redis.call('HEXISTS', {key}, '{marker}') == 1 then
  redis.call('DEL', {key})
end
"""


def _drop_idle_counts(key: str) -> str:
    return _DROP_IDLE_COUNTS.format(key=key, marker=_COUNTS_MARKER)


# KEYS: ready, processing, deadlines, delayed, deliveries
# ARGV: max messages, visibility timeout (s), token prefix (24 hex), sweep limit, counts TTL (s),
#       counts marker, its value (see _COUNTS_MARKER)
# -> {bodies, delivery counts, ms until the next due/lapse or -1 (0 when bodies were taken),
#     the bodies' sha1 digests (an ack passes them back instead of hashing every body again)}
_RESERVE = (
    """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local limit = tonumber(ARGV[4])"""
    + _PROMOTE_AND_SWEEP
    + """local bodies = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not bodies then
  local wait = -1
  for _, key in ipairs({KEYS[3], KEYS[4]}) do
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #first > 0 then
      local ms = math.max(math.floor((tonumber(first[2]) - now) * 1000), 0)
      if wait < 0 or ms < wait then wait = ms end
    end
  end
  return {{}, {}, wait}
end
redis.call('RPUSH', KEYS[2], unpack(bodies))
-- the score as text once, not converted from a number for every member (same value: 17 digits)
local deadline = string.format('%.17g', now + tonumber(ARGV[2]))
local members = {}
local digests = {}
for i, body in ipairs(bodies) do
  members[#members + 1] = deadline
  members[#members + 1] = ARGV[3] .. string.format('%08x', i) .. ':' .. body
  digests[i] = redis.sha1hex(body)
end
redis.call('ZADD', KEYS[3], unpack(members))
local seen = redis.call('HMGET', KEYS[5], unpack(digests))
local counts = {}
local fields = {ARGV[6], ARGV[7]}
local last = {}
for i, digest in ipairs(digests) do
  local n = last[digest]  -- identical bodies in one batch: count each hand-out
  if n then n = n + 1 else n = (tonumber(seen[i]) or 0) + 1 end
  last[digest] = n
  counts[i] = n
  fields[#fields + 1] = digest
  fields[#fields + 1] = n
end
redis.call('HSET', KEYS[5], unpack(fields))
redis.call('EXPIRE', KEYS[5], tonumber(ARGV[5]))
return {bodies, counts, 0, digests}
"""
)

# KEYS: processing, deadlines, deliveries
# ARGV: n reservation members, then the sha1 digests of their list elements (in the same order)
# -> how many were held
_ACK = f"""
local n = #ARGV / 2
local scores = redis.call('ZMSCORE', KEYS[2], unpack(ARGV, 1, n))
local held = {{}}
local digests = {{}}
for i = 1, n do
  if scores[i] then
    local m = ARGV[i]
    held[#held + 1] = m
    redis.call('LREM', KEYS[1], 1, string.sub(m, {_BODY_AT}))
    digests[#digests + 1] = ARGV[n + i]
  end
end
if #held > 0 then
  redis.call('ZREM', KEYS[2], unpack(held))
  redis.call('HDEL', KEYS[3], unpack(digests))
{_drop_idle_counts("KEYS[3]")}end
return #held
"""

# KEYS: processing, deadlines, deliveries, target list, delayed set of the target,
#       processing list of the target, deadline set of the target
# ARGV: reservation member, mode (release|replace), body to put, delay (s), new token,
#       where a delayed body waits (own: the delayed set; lease: parked as a reservation of the
#       target whose deadline is the due time, which either SDK's sweep brings back)
# release keeps the delivery count; replace (retry, dead-letter) forgets it.
_SETTLE = f"""
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 0 end
local old = string.sub(ARGV[1], {_BODY_AT})
redis.call('LREM', KEYS[1], 1, old)
if ARGV[2] == 'replace' then
  redis.call('HDEL', KEYS[3], redis.sha1hex(old))
{_drop_idle_counts("KEYS[3]")}end
local delay = tonumber(ARGV[4])
if delay > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
  if ARGV[6] == 'lease' then
    redis.call('RPUSH', KEYS[6], ARGV[3])
    redis.call('ZADD', KEYS[7], now + delay, ARGV[5] .. ':' .. ARGV[3])
  else
    redis.call('ZADD', KEYS[5], now + delay, ARGV[5] .. ':' .. ARGV[3])
  end
else
  redis.call('RPUSH', KEYS[4], ARGV[3])
end
return 1
"""

# KEYS: deadlines   ARGV: visibility timeout (s), reservation members -> how many were held
# A member still in the set is ours even past its deadline: a reserve would have swept it out.
_RENEW = """
local t = redis.call('TIME')
local deadline = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[1])
local held = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', deadline, ARGV[i])
    held = held + 1
  end
end
return held
"""

# KEYS: delayed   ARGV: delay (s), member, delay, member, ...
_PUBLISH_DELAYED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local args = {}
for i = 1, #ARGV, 2 do
  args[#args + 1] = now + tonumber(ARGV[i])
  args[#args + 1] = ARGV[i + 1]
end
return redis.call('ZADD', KEYS[1], unpack(args))
"""

# delays=lease: a delayed body is parked as a reservation due when the delay ends (the body in
# the processing list, its member in the deadline set), so any consumer's sweep -- ours or the
# babelqueue SDK's default layout, which has no delayed set -- makes it ready when due.
# KEYS: processing, deadlines   ARGV: delay (s), member, delay, member, ...
_PARK = f"""
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local args = {{}}
for i = 1, #ARGV, 2 do
  args[#args + 1] = now + tonumber(ARGV[i])
  args[#args + 1] = ARGV[i + 1]
  redis.call('RPUSH', KEYS[1], string.sub(ARGV[i + 1], {_BODY_AT}))
end
return redis.call('ZADD', KEYS[2], unpack(args))
"""

# Members of a tag's record still in the deadline set, chunk by chunk (unpack takes ~8000 values
# at most). Defines held(record_key, deadlines_key) -> list of members.
_HELD = f"""
local function held(record, deadlines)
  local recorded = redis.call('LRANGE', record, 1, -1)
  local out = {{}}
  for start = 1, #recorded, {_SCRIPT_BATCH} do
    local chunk = {{unpack(recorded, start, math.min(start + {_SCRIPT_BATCH} - 1, #recorded))}}
    local scores = redis.call('ZMSCORE', deadlines, unpack(chunk))
    for i, m in ipairs(chunk) do
      if scores[i] then out[#out + 1] = m end
    end
  end
  return out
end
local function rescore(deadlines, members, deadline)
  for start = 1, #members, {_SCRIPT_BATCH} do
    local args = {{}}
    for i = start, math.min(start + {_SCRIPT_BATCH} - 1, #members) do
      args[#args + 1] = deadline
      args[#args + 1] = members[i]
    end
    redis.call('ZADD', deadlines, 'XX', unpack(args))
  end
end
-- Remove one copy of each of `bodies` from the list `processing`. LREM walks from the head, so
-- one LREM per body costs its position: cheap for a few bodies settled in reservation order (the
-- runtime), quadratic for thousands reserved by parallel readers and settled in another order.
-- Past a few, one pass rebuilds the list instead (order of the rest kept, identical bodies
-- counted).
local function drop(processing, bodies)
  if #bodies == 0 then return end
  if #bodies * 8 < redis.call('LLEN', processing) then
    for _, body in ipairs(bodies) do redis.call('LREM', processing, 1, body) end
    return
  end
  local wanted = {{}}
  for _, body in ipairs(bodies) do wanted[body] = (wanted[body] or 0) + 1 end
  local kept = {{}}
  for _, body in ipairs(redis.call('LRANGE', processing, 0, -1)) do
    local n = wanted[body]
    if n and n > 0 then wanted[body] = n - 1 else kept[#kept + 1] = body end
  end
  redis.call('DEL', processing)
  for start = 1, #kept, {_SCRIPT_BATCH} do
    redis.call('RPUSH', processing, unpack(kept, start, math.min(start + {_SCRIPT_BATCH} - 1, #kept)))
  end
end
"""

# KEYS: ready, processing, deadlines, delayed, deliveries, record
# ARGV: max messages, visibility timeout (s), token prefix (24 hex), sweep limit, counts TTL (s),
#       record TTL (s), counts marker, its value (see _COUNTS_MARKER)
# -> {members, delivery counts}: the tag's members, taken now or (tag already taken) still held
_RESERVE_TAGGED = _HELD + f"""
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local deadline = now + tonumber(ARGV[2])
local members = {{}}
local counts = {{}}
if redis.call('EXISTS', KEYS[6]) == 1 then
  members = held(KEYS[6], KEYS[3])
  rescore(KEYS[3], members, deadline)
  for start = 1, #members, {_SCRIPT_BATCH} do
    local digests = {{}}
    for i = start, math.min(start + {_SCRIPT_BATCH} - 1, #members) do
      digests[#digests + 1] = redis.sha1hex(string.sub(members[i], {_BODY_AT}))
    end
    local seen = redis.call('HMGET', KEYS[5], unpack(digests))
    for i = 1, #digests do counts[#counts + 1] = tonumber(seen[i]) or 1 end
  end
  redis.call('EXPIRE', KEYS[6], tonumber(ARGV[6]))
  return {{members, counts}}
end
local limit = tonumber(ARGV[4])
""" + _PROMOTE_AND_SWEEP + f"""
redis.call('RPUSH', KEYS[6], 'taken')  -- the header: the tag is taken, even when it got nothing
redis.call('EXPIRE', KEYS[6], tonumber(ARGV[6]))
local bodies = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not bodies then return {{members, counts}} end
local last = {{}}
for start = 1, #bodies, {_SCRIPT_BATCH} do
  local stop = math.min(start + {_SCRIPT_BATCH} - 1, #bodies)
  local chunk = {{unpack(bodies, start, stop)}}
  redis.call('RPUSH', KEYS[2], unpack(chunk))
  local scored = {{}}
  local mine = {{}}
  local digests = {{}}
  for i = start, stop do
    local m = ARGV[3] .. string.format('%08x', i) .. ':' .. bodies[i]
    scored[#scored + 1] = deadline
    scored[#scored + 1] = m
    mine[#mine + 1] = m
    members[#members + 1] = m
    digests[#digests + 1] = redis.sha1hex(bodies[i])
  end
  redis.call('ZADD', KEYS[3], unpack(scored))
  redis.call('RPUSH', KEYS[6], unpack(mine))
  local seen = redis.call('HMGET', KEYS[5], unpack(digests))
  local fields = {{ARGV[7], ARGV[8]}}
  for i, digest in ipairs(digests) do
    local n = last[digest]  -- identical bodies in one claim: count each hand-out
    if n then n = n + 1 else n = (tonumber(seen[i]) or 0) + 1 end
    last[digest] = n
    counts[#counts + 1] = n
    fields[#fields + 1] = digest
    fields[#fields + 1] = n
  end
  redis.call('HSET', KEYS[5], unpack(fields))
end
redis.call('EXPIRE', KEYS[5], tonumber(ARGV[5]))
return {{members, counts}}
"""

# KEYS: deadlines, record...   ARGV: visibility timeout (s), record TTL (s) -> members held
_RENEW_TAGGED = _HELD + """
local t = redis.call('TIME')
local deadline = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[1])
local total = 0
for k = 2, #KEYS do
  local members = held(KEYS[k], KEYS[1])
  rescore(KEYS[1], members, deadline)
  total = total + #members
  if #members > 0 then redis.call('EXPIRE', KEYS[k], tonumber(ARGV[2])) end
end
return total
"""

# KEYS: ready, processing, deadlines, deliveries, record...   ARGV: mode (ack|release)
# ack: remove each held member's body for good; release: back to the head of the list, in
# order, delivery count kept. Either way the records are deleted. -> members settled
_SETTLE_TAGGED = _HELD + f"""
local total = 0
local back = {{}}
for k = 5, #KEYS do
  local members = held(KEYS[k], KEYS[3])
  for start = 1, #members, {_SCRIPT_BATCH} do
    local stop = math.min(start + {_SCRIPT_BATCH} - 1, #members)
    local digests = {{}}
    for i = start, stop do
      local body = string.sub(members[i], {_BODY_AT})
      back[#back + 1] = body
      if ARGV[1] == 'ack' then digests[#digests + 1] = redis.sha1hex(body) end
    end
    redis.call('ZREM', KEYS[3], unpack(members, start, stop))
    if #digests > 0 then redis.call('HDEL', KEYS[4], unpack(digests)) end
  end
  total = total + #members
  redis.call('DEL', KEYS[k])
end
{_drop_idle_counts("KEYS[4]")}drop(KEYS[2], back)
if ARGV[1] == 'ack' then return total end
for start = #back, 1, -{_SCRIPT_BATCH} do
  local args = {{}}
  for i = start, math.max(start - {_SCRIPT_BATCH} + 1, 1), -1 do args[#args + 1] = back[i] end
  redis.call('LPUSH', KEYS[1], unpack(args))
end
return total
"""

# A waiting move (babelq expire): remove the exact element a scan read, from the ready list or
# the delayed set, and push its dead letter to the DLQ's ready list, only when the removal
# happened (a worker that reserved it meanwhile keeps it); its delivery count goes with it.
# A parked delayed body (delays=lease) goes only while its member is still in the deadline set,
# and takes its copy in the processing list with it.
# KEYS: ready, delayed, deliveries, DLQ ready, processing, deadlines
# ARGV: where (ready|delayed|parked), element, record, ... -> flags
_MOVE_WAITING = f"""
local flags = {{}}
local dropped = {{}}
for i = 1, #ARGV, 3 do
  local gone
  local stored = ARGV[i + 1]
  if ARGV[i] == 'ready' then
    gone = redis.call('LREM', KEYS[1], 1, stored)
  elseif ARGV[i] == 'parked' then
    gone = redis.call('ZREM', KEYS[6], stored)
    stored = string.sub(stored, {_BODY_AT})
    if gone == 1 then redis.call('LREM', KEYS[5], 1, stored) end
  else
    gone = redis.call('ZREM', KEYS[2], stored)
    stored = string.sub(stored, {_BODY_AT})
  end
  if gone == 1 then
    redis.call('RPUSH', KEYS[4], ARGV[i + 2])
    dropped[#dropped + 1] = redis.sha1hex(stored)
  end
  flags[#flags + 1] = gone
end
if #dropped > 0 then
  redis.call('HDEL', KEYS[3], unpack(dropped))
{_drop_idle_counts("KEYS[3]")}end
return flags
"""

#: Where the default layout keeps a delayed body (the ``delays`` option; see docs/transports-redis.md)
DELAY_MODES: tuple[str, ...] = get_args(DelayMode)


def _token() -> str:
    return secrets.token_hex(TOKEN_LENGTH // 2)


def _parked_token() -> str:
    """The token of a delayed body parked as a reservation (``delays=lease``)."""
    return PARKED_TOKEN_PREFIX + secrets.token_hex((TOKEN_LENGTH - len(PARKED_TOKEN_PREFIX)) // 2)


def _seconds(delay_ms: int) -> str:
    return repr(max(int(delay_ms), 0) / 1000)


class _Receipt:
    """The settle handle of one reservation: its deadline member ``<token>:<body>``, and the sha1
    digest of its list element (the key of its delivery count) when the reserve returned it.

    A plain slotted class (one is built per delivery; a frozen dataclass takes several times as
    long to build); nothing changes ``member`` after it is made."""

    __slots__ = ("_digest", "member")

    def __init__(self, member: bytes, digest: bytes | None = None) -> None:
        self.member = member
        self._digest = digest

    @property
    def digest(self) -> bytes:
        """sha1 of the list element, in lowercase hex (what the scripts' ``redis.sha1hex`` gives)."""
        digest = self._digest
        if digest is None:
            digest = self._digest = hashlib.sha1(_stored(self.member)).hexdigest().encode("ascii")
        return digest

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Receipt) and other.member == self.member

    def __hash__(self) -> int:
        return hash(self.member)

    def __repr__(self) -> str:
        return f"_Receipt(member={self.member!r})"


def _stored(held: bytes) -> bytes:
    """The list element a reservation member ``<token>:<element>`` holds."""
    return held[_BODY_AT - 1 :]


def _reframed(body: bytes, delivery: Delivery) -> bytes:
    """``body`` in a header frame carrying ``delivery``'s headers (none: the body itself); a body
    that cannot ride in a frame (not UTF-8) is stored bare rather than failing a settle."""
    try:
        return frame(body, delivery.headers)
    except ValueError:
        return bytes(body)


def _delivery(
    queue: str, held: bytes, count: int, stored: bytes | None = None, digest: bytes | None = None
) -> Delivery:
    """The delivery of reservation member ``held`` (whose list element is ``stored``, and its
    sha1 ``digest``, when the caller has them): a header frame's envelope and headers, or the
    element itself. The receipt keeps the member, so settling matches the stored bytes."""
    body, headers = unframe(_stored(held) if stored is None else stored)
    return Delivery(
        body=body, queue=queue, receipt=_Receipt(held, digest), delivery_count=count, headers=headers,
        carried_headers=headers,
    )


class RedisTransport(RedisConnection):
    """Queues as Redis lists with reservation deadlines; thread-safe (redis-py pools connections).

    The connection (client, ping at open, errors, close, pickling) is
    :class:`~babelq.transports.redis_connection.RedisConnection`'s; this class is the layout.
    """

    tagged_reservations = True

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        client: Redis[bytes] | None = None,
        prefix: str = "",
        visibility_timeout: float = 30.0,
        poll_interval: float = 0.5,
        sweep_limit: int = 1000,
        delays: str = "lease",
    ) -> None:
        if delays not in DELAY_MODES:
            raise ConfigurationError(f"delays: must be one of {', '.join(DELAY_MODES)}, got {delays!r}")
        self.delays = delays
        super().__init__(
            url,
            client=client,
            prefix=prefix,
            visibility_timeout=visibility_timeout,
            poll_interval=poll_interval,
            sweep_limit=sweep_limit,
        )
        register = self.client.register_script
        self._reserve_script: Script = register(_RESERVE)
        self._ack_script: Script = register(_ACK)
        self._settle_script: Script = register(_SETTLE)
        self._delayed_script: Script = register(_PUBLISH_DELAYED)
        self._park_script: Script = register(_PARK)
        self._renew_script: Script = register(_RENEW)
        self._reserve_tagged_script: Script = register(_RESERVE_TAGGED)
        self._renew_tagged_script: Script = register(_RENEW_TAGGED)
        self._settle_tagged_script: Script = register(_SETTLE_TAGGED)
        self._move_waiting_script: Script = register(_MOVE_WAITING)
        # Counts of bodies that another SDK consumed are never deleted by us: let the hash
        # expire a while after the queue's last reservation instead of growing forever.
        self._counts_ttl = max(_COUNTS_TTL, int(self.visibility_timeout * 10))
        # a tag's record outlives its members' lease, so a reader retried after a short stall
        # still finds what the tag took (the members it names lapse first)
        self._record_ttl = max(TAG_RECORD_SECONDS, int(self.visibility_timeout * 4))
        self._keys: dict[str, QueueKeys] = {}

    @classmethod
    def tagged_for(cls, url: str) -> bool:
        """The default layout reserves by tag; ``laravel=1`` opens one that cannot."""
        return not RedisOptions.parse(TransportURL.split(url), {}).wants_laravel

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisTransport | RedisLaravelTransport:
        """Our options are taken out of the query; redis-py's stay in the URL it opens; any other
        key is refused (:class:`~babelq.transports.redis_options.RedisOptions`).

        ``laravel=1`` (or ``laravel_compat=1``, the babelqueue SDK's spellings) opens the
        Laravel-compatible layout instead (:mod:`babelq.transports.redis_laravel`).
        """
        link = TransportURL.split(url)
        parsed = RedisOptions.parse(link, options)
        if parsed.wants_laravel:
            from babelq.transports.redis_laravel import RedisLaravelTransport

            return RedisLaravelTransport.from_options(link, parsed, options)
        own = parsed.layout_options("prefix", "visibility_timeout", "poll_interval", "sweep_limit", "delays")
        return cls(client_url(link, options), **own)

    def _options(self) -> dict[str, Any]:
        """The shared options and this layout's own (``delays``), so a pickled copy keeps it."""
        return {**super()._options(), "delays": self.delays}

    def keys(self, queue: str) -> QueueKeys:
        """The Redis keys of ``queue`` under this transport's prefix.

        Every method that takes a queue name comes through here, so a name that would reach
        another queue's keys is refused (ConfigurationError, see
        :func:`babelq.bindings.redis.check_queue`) before anything is sent; accepted names are
        cached.
        """
        found = self._keys.get(queue)
        if found is None:
            found = self._keys[queue] = keys_for(queue, self.prefix)
        return found

    # -- publish -------------------------------------------------------------------------

    def _settle_token(self) -> str:
        """The token of the member a settle may write: parked ones are told apart (``lease``)."""
        return _parked_token() if self.delays == "lease" else _token()

    def _delay_ms(self, delay_ms: int) -> int:
        """The delay actually applied: none with ``delays=ready`` (see the module docstring)."""
        return 0 if self.delays == "ready" else delay_ms

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
        """``headers``: stored beside the envelope in a header frame, as the babelqueue SDK's
        ``publish_with_headers`` does; consumers see them on ``Delivery.headers``."""
        self._check_open()
        keys = self.keys(queue)
        value = frame(body, headers)
        delay_ms = self._delay_ms(delay_ms)
        if delay_ms <= 0:
            self._redis.rpush(keys.ready, value)
        elif self.delays == "lease":
            parked = member(_parked_token(), value)
            self._park_script(keys=[keys.processing, keys.deadlines], args=[_seconds(delay_ms), parked])
        else:
            self._delayed_script(keys=[keys.delayed], args=[_seconds(delay_ms), member(_token(), value)])

    def publish_commands(self, queue: str, items: Sequence[PublishItem]) -> PublishPlan:
        keys = self.keys(queue)  # checks the name even for an empty batch
        now = [frame(body, headers) for body, delay_ms, headers in items if self._delay_ms(delay_ms) <= 0]
        later: list[str | bytes] = []
        token = _parked_token if self.delays == "lease" else _token
        for body, delay_ms, headers in items:
            if self._delay_ms(delay_ms) > 0:
                later += [_seconds(delay_ms), member(token(), frame(body, headers))]
        plan: PublishPlan = [
            Push(keys.ready, now[start : start + _RPUSH_CHUNK]) for start in range(0, len(now), _RPUSH_CHUNK)
        ]
        for start in range(0, len(later), 2 * _SCRIPT_BATCH):
            chunk = later[start : start + 2 * _SCRIPT_BATCH]
            if self.delays == "lease":
                plan.append(RunScript(self._park_script, [keys.processing, keys.deadlines], chunk))
            else:
                plan.append(RunScript(self._delayed_script, [keys.delayed], chunk))
        return plan

    # -- reserve -------------------------------------------------------------------------

    def _claim(self, queue: str, max_messages: int) -> tuple[list[Delivery], int]:
        keys = self.keys(queue)
        prefix = secrets.token_hex(12)  # + 8 hex digits of the index = a 32-character token
        bodies, counts, wait_ms, *digests = self._reserve_script(
            keys=keys.all(),
            args=[
                min(max_messages, _SCRIPT_BATCH),
                repr(self.visibility_timeout),
                prefix,
                self.sweep_limit,
                self._counts_ttl,
                _COUNTS_MARKER,
                _COUNTS_MARKER_VALUE,
            ],
        )
        if not bodies:
            return [], int(wait_ms)
        head = prefix.encode("ascii")
        # the member the script wrote for the i-th body: "<prefix><i as 8 hex digits>:<body>"
        out = [
            _delivery(queue, b"%b%08x:%b" % (head, i, body), count, body, digest)
            for i, (body, count, digest) in enumerate(zip(bodies, counts, digests[0], strict=True), start=1)
        ]
        return out, 0

    def _wait_for_push(self, queue: str, seconds: float) -> None:
        # wakes when anything is pushed; RIGHT->RIGHT on one list leaves it unchanged
        ready = self.keys(queue).ready
        self._redis.blmove(ready, ready, seconds, "RIGHT", "RIGHT")

    # -- settle --------------------------------------------------------------------------

    @staticmethod
    def _member(delivery: Delivery) -> bytes:
        receipt = delivery.receipt
        if not isinstance(receipt, _Receipt):
            raise ValueError(f"not a reservation of the redis transport: {receipt!r}")
        return receipt.member

    def _lost(self, delivery: Delivery, action: str) -> None:
        log.warning(
            "redis: %s of a reservation on %r whose deadline passed (visibility_timeout=%ss); "
            "the message was put back and will be delivered again",
            action,
            delivery.queue,
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
        by_queue: dict[str, dict[bytes, _Receipt]] = {}  # a dict keeps order and drops repeats
        for delivery in deliveries:
            receipt = delivery.receipt
            if receipt.__class__ is not _Receipt:
                self._member(delivery)  # raises: not ours
            held = by_queue.get(delivery.queue)
            if held is None:
                held = by_queue[delivery.queue] = {}
            held[receipt.member] = receipt
        for queue, receipts in by_queue.items():
            members = list(receipts)
            digests = [receipt.digest for receipt in receipts.values()]
            keys = self.keys(queue)
            done = 0
            for start in range(0, len(members), _SCRIPT_BATCH):
                stop = start + _SCRIPT_BATCH
                done += int(
                    self._ack_script(
                        keys=[keys.processing, keys.deadlines, keys.deliveries],
                        args=[*members[start:stop], *digests[start:stop]],
                    )
                )
            if done != len(members):
                log.warning(
                    "redis: ack of %d reservations on %r settled %d; the others passed their deadline "
                    "(visibility_timeout=%ss) and will be delivered again",
                    len(members),
                    queue,
                    done,
                    self.visibility_timeout,
                )

    def _settle(
        self, delivery: Delivery, *, mode: str, body: bytes, target: str, delay_ms: int, action: str
    ) -> None:
        self._check_open()
        keys, target_keys = self.keys(delivery.queue), self.keys(target)
        held = self._settle_script(
            keys=[
                keys.processing,
                keys.deadlines,
                keys.deliveries,
                target_keys.ready,
                target_keys.delayed,
                target_keys.processing,
                target_keys.deadlines,
            ],
            args=[
                self._member(delivery), mode, body, _seconds(self._delay_ms(delay_ms)), self._settle_token(),
                self.delays,
            ],
        )
        if int(held) != 1:
            self._lost(delivery, action)

    @driver_errors("release")
    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        self._settle(
            delivery,
            mode="release",
            body=_stored(self._member(delivery)),  # a header frame goes back as it was
            target=delivery.queue,
            delay_ms=delay_ms,
            action="release",
        )

    @driver_errors("release_many")
    def release_many(self, deliveries: Sequence[Delivery]) -> None:
        """Every release in one pipeline (one round trip), each still gated on its own deadline."""
        self._check_open()
        if not deliveries:
            return
        pipe = self._redis.pipeline(transaction=False)
        for delivery in deliveries:
            keys = self.keys(delivery.queue)
            held_member = self._member(delivery)
            self._settle_script(
                keys=[
                    keys.processing, keys.deadlines, keys.deliveries, keys.ready, keys.delayed,
                    keys.processing, keys.deadlines,
                ],
                args=[held_member, "release", _stored(held_member), _seconds(0), _token(), self.delays],
                client=pipe,
            )
        for delivery, held in zip(deliveries, pipe.execute(), strict=True):
            if int(held) != 1:
                self._lost(delivery, "release")

    def _lease_key(self, queue: str) -> str:
        return self.keys(queue).deadlines

    @driver_errors("retry")
    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        self._settle(
            delivery,
            mode="replace",
            body=_reframed(body, delivery),  # the headers ride along, as babelqueue's do
            target=delivery.queue,
            delay_ms=delay_ms,
            action="retry",
        )

    @driver_errors("dead_letter")
    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        self._settle(
            delivery, mode="replace", body=_reframed(body, delivery), target=dlq, delay_ms=0,
            action="dead_letter",
        )

    # -- tagged reservations -----------------------------------------------------------------

    def _records(self, queue: str, tags: Sequence[str]) -> list[str]:
        return [reads_key(queue, check_tag(tag), self.prefix) for tag in dict.fromkeys(tags)]

    @driver_errors("reserve_tagged")
    def reserve_tagged(self, queue: str, tag: str, *, max_messages: int) -> list[Delivery]:
        """One script: the tag's record exists (re-score its members still reserved) or take up to
        ``max_messages`` bodies as :meth:`reserve` does and write the record."""
        self._check_open()
        if max_messages < 1:
            raise ValueError(f"max_messages: must be >= 1, got {max_messages}")
        keys = self.keys(queue)
        [record] = self._records(queue, [tag])
        members, counts = self._reserve_tagged_script(
            keys=[*keys.all(), record],
            args=[
                max_messages,
                repr(self.visibility_timeout),
                secrets.token_hex(12),
                self.sweep_limit,
                self._counts_ttl,
                self._record_ttl,
                _COUNTS_MARKER,
                _COUNTS_MARKER_VALUE,
            ],
        )
        return [_delivery(queue, m, int(n)) for m, n in zip(members, counts, strict=True)]

    @driver_errors("renew_tagged")
    def renew_tagged(self, queue: str, tags: Sequence[str]) -> int:
        self._check_open()
        records = self._records(queue, tags)
        if not records:
            return 0
        keys = self.keys(queue)
        held = self._renew_tagged_script(
            keys=[keys.deadlines, *records], args=[repr(self.visibility_timeout), self._record_ttl]
        )
        return int(held)

    def _settle_tagged(self, queue: str, tags: Sequence[str], mode: str) -> int:
        self._check_open()
        records = self._records(queue, tags)
        if not records:
            return 0
        keys = self.keys(queue)
        done = self._settle_tagged_script(
            keys=[keys.ready, keys.processing, keys.deadlines, keys.deliveries, *records], args=[mode]
        )
        return int(done)

    @driver_errors("ack_tagged")
    def ack_tagged(self, queue: str, tags: Sequence[str]) -> int:
        return self._settle_tagged(queue, tags, "ack")

    @driver_errors("release_tagged")
    def release_tagged(self, queue: str, tags: Sequence[str]) -> int:
        return self._settle_tagged(queue, tags, "release")

    # -- waiting scans -------------------------------------------------------------------

    def _waiting_sources(self, queue: str) -> tuple[tuple[str, str], ...]:
        """Parked delayed bodies are waiting messages too, whatever this transport's own mode:
        another process of the fleet may park them."""
        keys = self.keys(queue)
        return ("ready", keys.ready), ("delayed", keys.delayed), ("parked", keys.deadlines)

    def _waiting_members(self, where: str, found: list[bytes]) -> list[bytes]:
        if where != "parked":
            return found
        mark = PARKED_TOKEN_PREFIX.encode("ascii")
        return [m for m in found if m.startswith(mark)]

    def _waiting_delivery(self, queue: str, waiting: Waiting) -> Delivery:
        stored = waiting.stored if waiting.where == "ready" else _stored(waiting.stored)
        body, headers = unframe(stored)
        return Delivery(body=body, queue=queue, receipt=waiting, headers=headers, carried_headers=headers)

    def _move_waiting(self, queue: str, dlq: str, moves: Sequence[tuple[Waiting, bytes]]) -> list[int]:
        keys = self.keys(queue)
        args: list[str | bytes] = []
        for waiting, record in moves:  # the dead letter keeps the headers, as dead_letter's does
            args += [waiting.where, waiting.stored, _reframed(record, self._waiting_delivery(queue, waiting))]
        script_keys = [
            keys.ready, keys.delayed, keys.deliveries, self.keys(dlq).ready, keys.processing, keys.deadlines,
        ]
        flags: list[int] = self._move_waiting_script(keys=script_keys, args=args)
        return flags

    # -- inspection ----------------------------------------------------------------------

    def _parked_later(self, keys: QueueKeys, now: float) -> int:
        """Delayed bodies parked as reservations (``delays=lease``) and not due yet. A scan of the
        deadline set matching the parked tokens' prefix: it walks every reservation of the queue,
        which a count of waiting messages can afford; a parked body swept back by anyone is gone
        from the set and no longer counted."""
        pattern = PARKED_TOKEN_PREFIX + "*"
        return sum(
            1 for _, due in self._redis.zscan_iter(keys.deadlines, match=pattern, count=1000) if due > now
        )

    @driver_errors("size")
    def size(self, queue: str) -> int:
        """Ready + delayed (in the delayed set or parked as a reservation) + reservations whose
        deadline passed (they are waiting again)."""
        self._check_open()
        keys = self.keys(queue)
        now = time.time()
        pipe = self._redis.pipeline(transaction=False)
        pipe.llen(keys.ready)
        pipe.zcard(keys.delayed)
        pipe.zcount(keys.deadlines, "-inf", repr(now))
        ready, delayed, lapsed = pipe.execute()
        return int(ready) + int(delayed) + int(lapsed) + self._parked_later(keys, now)

    @driver_errors("ready")
    def ready(self, queue: str) -> int:
        """Ready bodies + delayed ones already due + reservations whose deadline passed (a
        reserve promotes and sweeps those first)."""
        self._check_open()
        keys = self.keys(queue)
        now = repr(time.time())
        pipe = self._redis.pipeline(transaction=False)
        pipe.llen(keys.ready)
        pipe.zcount(keys.delayed, "-inf", now)
        pipe.zcount(keys.deadlines, "-inf", now)
        return sum(int(n) for n in pipe.execute())

    @driver_errors("reserved")
    def reserved(self, queue: str) -> int:
        """Reservations whose deadline has not passed (a lapsed one counts as waiting in
        :meth:`size`), parked delayed bodies excepted: they are waiting, not in flight."""
        self._check_open()
        keys = self.keys(queue)
        now = time.time()
        held = int(self._redis.zcount(keys.deadlines, f"({now!r}", "+inf"))
        return held - self._parked_later(keys, now) if held else 0


# CONNECT_TIMEOUT lives in redis_connection (both layouts use it) and is re-exported here, where
# this module's docstring and its callers have always named it.
__all__ = ["CONNECT_TIMEOUT", "DELAY_MODES", "TAG_RECORD_SECONDS", "RedisTransport"]
