"""Dead-letter triage and redrive: what failed and why, and putting chosen messages back.

Triage reads a DLQ without consuming it (reserve everything, then release it) and counts
messages by reason, cause, URN, error and original queue. Redrive takes the selected
messages off the DLQ and re-publishes them to their original queue (or one queue given as
``to_queue``) with :func:`~babelq.envelope.redrive` (attempts 0, ``dead_letter`` removed,
``trace_id`` and ``meta.id`` kept, so a payment that was in fact posted is still deduplicated).
Poison records are never redriven: their bytes are not an envelope a consumer could handle;
they stay on the DLQ and are reported.

A redriven message carries the replay mark (:mod:`babelq.runtime.replay`: the babelqueue
package's ``bq-replay-bypass`` header, beside the body), so handlers can skip external effects
with ``message.is_replay()``; ``mark=False`` puts it back unmarked (and removes a mark an earlier
redrive left). Other headers the dead letter carried (a ``traceparent``) go along. A dry run
(``dry_run=True``) makes the same plan, counts it by reason and target, and writes nothing: every
message goes back to the DLQ as it was, as after a triage.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import orjson

from babelq.envelope import decode, redrive, urn_of
from babelq.errors import ConfigurationError, DecodeError
from babelq.gdpr.middleware import UNDECRYPTABLE
from babelq.pipelines.money import Tally
from babelq.runtime import rules
from babelq.runtime.replay import with_mark
from babelq.transports import Delivery, Outgoing, Transport

log = logging.getLogger(__name__)

#: (reason, cause, urn, error, original_queue)
TriageKey = tuple[str, str, str, str, str]

#: Causes of dead letters whose handler never ran (a check before it refused them): their
#: external effects never fired, so marking them as replays would skip effects owed.
NEVER_HANDLED = frozenset({rules.EXPIRED, rules.UNKNOWN_URN, rules.SCHEMA, UNDECRYPTABLE})


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """What a DLQ message says about itself."""

    reason: str
    cause: str
    urn: str
    error: str
    original_queue: str
    message_id: str
    poison: bool
    identity: str = ""  #: the message it is a dead letter of (meta.id and attempts, else its content)
    #: the payment's value, when ``data`` has an integer ``amount_cents`` and a string ``currency``
    #: (as ``transfer.requested`` does): money an operator has to act on
    amount_cents: int | None = None
    currency: str = ""
    failed_at: int | None = None  #: ``dead_letter.failed_at`` (epoch ms), when the block has one

    @property
    def key(self) -> TriageKey:
        return (self.reason, self.cause, self.urn, self.error, self.original_queue)


def _identity(doc: dict[str, object], message_id: str, body: bytes) -> str:
    """Which message (and attempt) a dead letter stands for: two dead letters with one identity are
    copies (a redelivery dead-lettered twice), not two failures."""
    if message_id:
        return f"id:{message_id}@{doc.get('attempts')!r}"
    content = {k: v for k, v in doc.items() if k != "dead_letter"}
    try:
        return "content:" + hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).hexdigest()
    except (TypeError, orjson.JSONEncodeError):
        return "bytes:" + hashlib.sha256(body).hexdigest()


def describe(body: bytes) -> DeadLetter:
    """Read a DLQ body (an annotated envelope or a poison record); never raises."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        digest = "bytes:" + hashlib.sha256(body).hexdigest()
        return DeadLetter("unreadable", "", "", "not JSON", "", "", True, digest)
    if type(doc) is not dict:
        digest = "bytes:" + hashlib.sha256(body).hexdigest()
        return DeadLetter("unreadable", "", "", "not an object", "", "", True, digest)
    block = doc.get("dead_letter")
    block = block if type(block) is dict else {}
    meta = doc.get("meta")
    raw_id = meta.get("id") if type(meta) is dict else None
    message_id = raw_id if type(raw_id) is str else ""
    reason = str(block.get("reason") or "")
    poison = reason == "poison" or "original" in block
    error = str(block.get("error") or "")
    failed_at = block.get("failed_at")
    amount, currency = _value(doc.get("data"))
    return DeadLetter(
        reason=reason, cause=str(block.get("cause") or ""), urn=urn_of(doc), error=_short(error),
        original_queue=str(block.get("original_queue") or ""), message_id=message_id, poison=poison,
        identity=_identity(doc, message_id, body), amount_cents=amount, currency=currency,
        failed_at=failed_at if type(failed_at) is int else None,
    )


def _value(data: object) -> tuple[int | None, str]:
    """(amount_cents, currency) of a payment's data, (None, "") when it carries no readable amount."""
    if type(data) is not dict:
        return None, ""
    amount, currency = data.get("amount_cents"), data.get("currency")
    if type(amount) is int and type(currency) is str:
        return amount, currency
    return None, ""


def _short(error: str, limit: int = 80) -> str:
    first = error.splitlines()[0] if error else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _reserve_all(transport: Transport, dlq: str, chunk: int = 1_000) -> list[Delivery]:
    held: list[Delivery] = []
    while True:
        got = transport.reserve(dlq, max_messages=chunk, timeout=0.0)
        if not got:
            return held
        held.extend(got)


@dataclass(slots=True)
class Triage:
    """A DLQ's dead letters counted by key. ``rows`` counts every dead letter; ``messages`` counts
    each failed message once (copies of one message and attempt, dead-lettered again after a
    crash, are one failure).

    ``value`` is the money on the DLQ: per key, per currency, the payments (each ``meta.id``
    once, however many dead letters it has) and the sum of their ``amount_cents``; ``unvalued``
    counts the failed messages that carry no readable amount (poison records, other data)."""

    dlq: str
    total: int = 0
    rows: Counter[TriageKey] = field(default_factory=Counter)
    distinct_ids: int = 0
    messages: Counter[TriageKey] = field(default_factory=Counter)
    value: dict[TriageKey, dict[str, Tally]] = field(default_factory=dict)
    unvalued: Counter[TriageKey] = field(default_factory=Counter)
    without_id: int = 0  #: dead letters without a meta.id (poison records hold bytes, not an envelope)
    #: per key, the earliest and latest ``dead_letter.failed_at`` (epoch ms)
    failed_at: dict[TriageKey, tuple[int, int]] = field(default_factory=dict)

    @property
    def distinct_messages(self) -> int:
        return sum(self.messages.values())

    def value_by_currency(self, keys: Iterable[TriageKey] | None = None) -> dict[str, Tally]:
        """Payments and their value per currency, over ``keys`` (default: every key)."""
        out: dict[str, Tally] = {}
        for key in self.value if keys is None else keys:
            for currency, tally in self.value.get(key, {}).items():
                out.setdefault(currency, Tally()).add(tally.count, tally.minor)
        return out

    def _count(self, info: DeadLetter, *, first: bool, paid: set[str]) -> None:
        key = info.key
        self.rows[key] += 1
        if not info.message_id:
            self.without_id += 1
        if info.failed_at is not None:
            low, high = self.failed_at.get(key, (info.failed_at, info.failed_at))
            self.failed_at[key] = (min(low, info.failed_at), max(high, info.failed_at))
        if not first:
            return
        self.messages[key] += 1
        if info.amount_cents is None:
            self.unvalued[key] += 1
            return
        payment = info.message_id or info.identity
        if payment not in paid:
            paid.add(payment)
            self.value.setdefault(key, {}).setdefault(info.currency, Tally()).add(1, info.amount_cents)

    def by(self, index: int) -> Counter[str]:
        out: Counter[str] = Counter()
        for key, n in self.rows.items():
            out[key[index]] += n
        return out

    def table(self) -> str:
        """A fixed-width text table, most frequent first."""
        header = ("count", "reason", "cause", "urn", "queue", "error")
        lines = [header]
        for (reason, cause, urn, error, queue), n in self.rows.most_common():
            lines.append((str(n), reason or "-", cause or "-", urn or "-", queue or "-", error or "-"))
        widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
        return "\n".join(
            "  ".join(col.rjust(widths[0]) if i == 0 else (col.ljust(widths[i]) if i < len(widths) else col)
                      for i, col in enumerate(line))
            for line in lines
        ) + "\n" + self.summary()

    def summary(self) -> str:
        """One line: how many dead letters, how many messages they are, and why those differ."""
        copies = self.total - self.distinct_messages
        line = f"{self.total} dead letters on {self.dlq}: {self.distinct_messages} failed messages"
        if copies:
            line += f" ({copies} are copies of a message dead-lettered more than once, e.g. after a crash)"
        return line


def triage(transport: Transport, dlq: str) -> Triage:
    """Count the messages on ``dlq`` by reason, cause, URN, error and queue (they stay on it)."""
    held = _reserve_all(transport, dlq)
    result = Triage(dlq)
    ids: set[str] = set()
    seen: set[str] = set()
    paid: set[str] = set()
    try:
        for delivery in held:
            info = describe(delivery.body)
            first = info.identity not in seen
            seen.add(info.identity)
            result._count(info, first=first, paid=paid)
            if info.message_id:
                ids.add(info.message_id)
        result.total = len(held)
        result.distinct_ids = len(ids)
    finally:
        for delivery in held:
            transport.release(delivery)
    return result


@dataclass(slots=True)
class RedriveResult:
    """What a redrive did (or, on a dry run, would do)."""

    redriven: int = 0
    poison_kept: int = 0
    not_selected: int = 0
    to_queues: Counter[str] = field(default_factory=Counter)
    #: the redriven messages by ``(dead_letter.reason, dead_letter.cause)`` (cause ``""`` when none)
    by_reason: Counter[tuple[str, str]] = field(default_factory=Counter)
    dry_run: bool = False
    #: whether the redriven messages carry the replay mark
    marked: bool = True

    def lines(self, dlq: str) -> list[str]:
        """The report, one fact a line (what ``babelq dlq redrive`` prints)."""
        verb = "would redrive" if self.dry_run else "redriven"
        out = [f"{verb} {self.redriven} from {dlq}: {dict(self.to_queues)}"]
        for (reason, cause), n in sorted(self.by_reason.items(), key=lambda item: (-item[1], item[0])):
            out.append(f"  {n} {reason or '-'}" + (f" (cause {cause})" if cause else ""))
        if self.redriven:
            mark = "marked as replays (message.is_replay())" if self.marked else "not marked as replays"
            out.append(f"{'they would be' if self.dry_run else 'they are'} {mark}")
            unhandled = sum(n for (_, cause), n in self.by_reason.items() if cause in NEVER_HANDLED)
            if self.marked and unhandled:
                out.append(
                    f"note: {unhandled} of them never reached a handler (cause "
                    f"{', '.join(sorted(c for _, c in self.by_reason if c in NEVER_HANDLED))}), so their "
                    "external effects never fired; redrive those with --cause ... --no-mark"
                )
        out.append(f"not selected {self.not_selected}")
        if self.dry_run:
            out.append("dry run: nothing was published or removed")
        return out


def selector(*, reason: str | None = None, cause: str | None = None, urn: str | None = None,
             message_ids: set[str] | None = None) -> Callable[[DeadLetter], bool]:
    """A predicate choosing dead letters by any combination of reason, cause, URN and ids."""
    def chosen(info: DeadLetter) -> bool:
        return ((reason is None or info.reason == reason) and (cause is None or info.cause == cause)
                and (urn is None or info.urn == urn)
                and (message_ids is None or info.message_id in message_ids))
    return chosen


def redrive_messages(transport: Transport, dlq: str, choose: Callable[[DeadLetter], bool], *,
                     limit: int | None = None, default_queue: str | None = None, to_queue: str | None = None,
                     dry_run: bool = False, mark: bool = True) -> RedriveResult:
    """Move the chosen dead letters back to their original queue, or all to ``to_queue`` (poison
    records stay, reported); each marked as a replay unless ``mark`` is False. ``dry_run``: plan
    and count only, nothing is published or removed."""
    if to_queue is not None and (not to_queue or to_queue == dlq):
        raise ConfigurationError(f"to: must be another queue than the DLQ being redriven, got {to_queue!r}")
    held = _reserve_all(transport, dlq)
    result = RedriveResult(dry_run=dry_run, marked=mark)
    done: list[Delivery] = []
    keep: list[Delivery] = []
    outgoing: dict[str, list[tuple[Outgoing, Delivery]]] = {}
    for delivery in held:
        info = describe(delivery.body)
        if not choose(info) or (limit is not None and result.redriven >= limit):
            result.not_selected += 1
            keep.append(delivery)
            continue
        if info.poison:
            result.poison_kept += 1
            keep.append(delivery)
            continue
        target = to_queue or info.original_queue or default_queue
        try:
            env = decode(delivery.body)
        except DecodeError:
            env = None
        if env is None or not target:
            result.poison_kept += 1
            keep.append(delivery)
            continue
        back = redrive(env)
        outgoing.setdefault(target, []).append((Outgoing(back.encode(), back), delivery))
        done.append(delivery)
        result.redriven += 1
        result.to_queues[target] += 1
        result.by_reason[(info.reason, info.cause)] += 1
    if dry_run:
        keep.extend(done)
        done = []
        outgoing = {}
    try:
        for queue, messages in outgoing.items():
            _publish(transport, queue, messages, mark)
        transport.ack_many(done)
    finally:
        for delivery in keep:
            transport.release(delivery)
    if result.poison_kept:
        log.warning("dlq %s: %d poison records cannot be redriven (their bytes are not an envelope)",
                    dlq, result.poison_kept)
    return result


def _publish(transport: Transport, queue: str, messages: list[tuple[Outgoing, Delivery]], mark: bool) -> None:
    """Publish redriven messages with the headers their dead letters carried, marked (or not) as
    replays: one publish per message when any carries a header, else one batch."""
    headed = [(message, with_mark(delivery.carried_headers, mark)) for message, delivery in messages]
    if not any(headers for _, headers in headed):
        transport.publish_many(queue, [message for message, _ in headed])
        return
    for message, headers in headed:
        transport.publish(queue, message.body, envelope=message.envelope, headers=headers)
