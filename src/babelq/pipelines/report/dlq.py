"""The report's dead-letter queue: why messages failed, what they are worth, and what the counts mean.

"604 dead letters (504 distinct meta.id)" leaves an operator guessing; the section says in
words what the numbers are: how many failed messages the dead letters stand for, how many are
copies of one (the same message and attempt dead-lettered twice, see docs/pipelines.md), how
many carry no ``meta.id`` because they are poison, and the money per cause. Errors are shown as
written in the dead letter except that epoch milliseconds read as ISO-8601
(:func:`babelq.pipelines.report.display.readable_error`); they wrap instead of running off the page.
"""

from __future__ import annotations

import re
from collections import Counter

from babelq.pipelines.dlq import Triage, TriageKey
from babelq.pipelines.money import Tally, format_money
from babelq.pipelines.report.display import count, iso_ms, readable_error
from babelq.pipelines.report.html import PALETTE, Bar, bar_chart, cell, esc, row, table

#: how many (reason, cause, URN, error, queue) groups the detail table lists
DETAIL_ROWS = 40
_ISO = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z")


def _error(text: str) -> str:
    """The readable error as HTML, its timestamps kept on one line."""
    return _ISO.sub(lambda m: f'<span class="nowrap">{m.group(0)}</span>', esc(readable_error(text) or "-"))


def _label(key: TriageKey) -> str:
    reason, cause = key[0], key[1]
    return cause or reason or "-"


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{count(n)} {one if n == 1 else (many or one + 's')}"


def _values(values: dict[str, Tally]) -> str:
    if not values:
        return "—"
    return "<br>".join(
        f'{esc(format_money(t.minor, c))} <span class="muted">({_plural(t.count, "payment")})</span>'
        for c, t in sorted(values.items()))


def explanation(t: Triage, poison_causes: tuple[str, ...]) -> str:
    """What the dead-letter numbers mean, in sentences built from them."""
    copies = t.total - t.distinct_messages
    with_id = t.total - t.without_id
    parts = [f"<p><strong>{_plural(t.total, 'dead letter')}</strong> on {esc(t.dlq)} stand for "
             f"<strong>{_plural(t.distinct_messages, 'failed message')}</strong>. "]
    if copies:
        parts.append(
            f"{_plural(copies, 'dead letter is a copy', 'dead letters are copies')}: the same message at "
            "the same attempt, dead-lettered again. Settle writes a dead letter through its outbox (publish, "
            "then mark it sent); a run stopped between the two publishes it again when it restarts. A copy "
            "is counted once, here and in the reconciliation.</p>")
    else:
        parts.append(
            "None is a copy (a copy is the same message at the same attempt dead-lettered twice, which "
            "happens only when settle stops between publishing a dead letter and marking it sent; it would "
            "be counted once).</p>")
    poison = sum(n for k, n in t.messages.items() if _label(k) in poison_causes)
    parts.append(
        f"<p>{_plural(with_id, 'dead letter carries', 'dead letters carry')} a <code>meta.id</code> "
        f"({_plural(t.distinct_ids, 'distinct id')}): payments from the file that could not be settled. ")
    if t.without_id:
        injected = f"the {_plural(poison, 'poison body', 'poison bodies')} the demo put on the queue, "
        parts.append(
            f"{_plural(t.without_id, 'has', 'have')} none: {injected if poison else ''}"
            "bytes no consumer could read as an envelope (not UTF-8, not JSON, an unsupported version), kept "
            "byte for byte for inspection; they carry no payment and no value. ")
    parts.append("Value is each dead-lettered payment's <code>data.amount_cents</code> in its currency, each "
                 "payment once. Nothing here is lost: <code>babelq dlq redrive</code> puts chosen messages "
                 "back on their queue (poison stays).</p>")
    return "".join(parts)


def by_cause_table(t: Triage) -> str:
    groups: dict[str, list[TriageKey]] = {}
    for key in t.rows:
        groups.setdefault(_label(key), []).append(key)
    order = sorted(groups, key=lambda label: (-sum(t.messages[k] for k in groups[label]), label))
    body = []
    for label in order:
        keys = groups[label]
        reasons = sorted({k[0] or "-" for k in keys})
        value = t.value_by_currency(keys)
        body.append(row([
            cell(f"<strong>{esc(label)}</strong>"),
            cell(esc(", ".join(reasons))),
            cell(count(sum(t.rows[k] for k in keys)), num=True),
            cell(count(sum(t.messages[k] for k in keys)), num=True),
            cell(_values(value), num=True),
            cell(count(sum(t.unvalued[k] for k in keys)), num=True),
        ], attrs={"data-cause": label}))
    headers = [("Cause", False), ("Reason", False), ("Dead letters", True), ("Failed messages", True),
               ("Value (payments)", True), ("Without value", True)]
    return table(headers, body, ident="dlq-by-cause")


def detail_table(t: Triage) -> str:
    body = []
    for key, n in t.rows.most_common(DETAIL_ROWS):
        reason, cause, urn, error, queue = key
        first, last = t.failed_at.get(key, (None, None))
        stamps = [] if first is None or last is None else sorted({first, last})
        when = " to<br>".join(f'<span class="nowrap">{iso_ms(ms)}</span>' for ms in stamps) or "—"
        body.append(row([
            cell(count(n), num=True),
            cell(esc(cause or reason or "-")),
            cell(esc(urn or "-"), cls="urn"),
            cell(esc(queue or "-")),
            cell(_error(error), cls="wrap"),
            cell(when),
        ]))
    more = len(t.rows) - DETAIL_ROWS
    headers = [("Dead letters", True), ("Cause", False), ("URN", False), ("Queue", False), ("Error", False),
               ("Failed at (UTC)", False)]
    note = f'<p class="note">{_plural(more, "more group")} not shown.</p>' if more > 0 else ""
    return table(headers, body, ident="dlq-detail") + note


def dlq_section(t: Triage, poison_causes: tuple[str, ...]) -> str:
    by_cause: Counter[str] = Counter()
    for key, n in t.messages.items():
        by_cause[_label(key)] += n
    bars = [Bar(label, float(n), _plural(n, "message"), PALETTE[i % len(PALETTE)])
            for i, (label, n) in enumerate(sorted(by_cause.items(), key=lambda item: (-item[1], item[0])))]
    chart = bar_chart("Failed messages by cause", bars, ident="dlq-chart") if bars else ""
    if not t.total:
        return f'<h2 id="dlq">Dead-letter queue</h2><p>{esc(t.dlq)} is empty.</p>'
    return (
        '<h2 id="dlq">Dead-letter queue</h2>' + explanation(t, poison_causes)
        + "<h3>By cause</h3>" + by_cause_table(t) + chart
        + "<h3>Detail</h3>" + detail_table(t)
        + '<p class="note">Errors as the dead letters carry them, with epoch milliseconds shown as ISO-8601 '
        "UTC (the dead letters themselves are unchanged); <code>babelq dlq</code> prints the same groups.</p>"
    )
