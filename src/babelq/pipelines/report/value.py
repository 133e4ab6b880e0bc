"""The report's money: per currency, the file's total against posted + rejected + dead-lettered.

Every amount cell carries what it shows as data (``data-kind``, ``data-currency``,
``data-count``, ``data-minor``: integer minor units), so a test or a script can check the page
against the ledger without parsing formatted text, and can check that the text says the same.
"""

from __future__ import annotations

from collections.abc import Sequence

from babelq.pipelines.money import Tally, format_minor
from babelq.pipelines.report.display import count
from babelq.pipelines.report.html import BLUE, GREY, ORANGE, RED, cell, esc, row, status, table, text_width
from babelq.pipelines.value_reconciliation import OUT_OF_RANGE, ValueLine

#: (data-kind, column header) of the amount columns, in order
COLUMNS = (
    ("file", "In the file"),
    ("posted", "Posted (ledger)"),
    ("rejected", "Rejected at ingest"),
    ("dead", "Dead-lettered"),
    ("accounted", "Posted + rejected + dead-lettered"),  # = the file's, line by line
)


def _tally(line: ValueLine, kind: str) -> Tally:
    return line.accounted if kind == "accounted" else getattr(line, kind)


def _amount_cell(line: ValueLine, kind: str) -> str:
    tally = _tally(line, kind)
    noun = "row" if line.currency is None or kind in ("file", "rejected") else "payment"
    counted = f'<span class="count">{count(tally.count)} {noun}{"" if tally.count == 1 else "s"}</span>'
    shown = "—" if line.currency is None else esc(format_minor(tally.minor, line.currency))
    attrs = {"data-kind": kind, "data-currency": line.currency or "", "data-part": line.part,
             "data-count": tally.count,
             "data-minor": tally.minor if line.currency is not None else ""}
    return cell(f'<span class="amount">{shown}</span>{counted}', num=True, attrs=attrs)


def _label(line: ValueLine) -> str:
    if line.part == OUT_OF_RANGE:
        return f'{esc(line.currency or "(blank)")}<span class="tag">amount out of range</span>'
    if line.currency is None:
        return 'no integer amount<span class="tag">no value</span>'
    if not line.iso:
        return f'{esc(line.currency or "(blank)")}<span class="tag">not ISO 4217</span>'
    return f"<strong>{esc(line.currency)}</strong>"


def _difference(line: ValueLine) -> str:
    diff = line.difference
    if line.ok:
        return cell('<span class="amount">0</span>', num=True)
    money = "" if line.currency is None else esc(format_minor(diff.minor, line.currency))
    return cell(f'<span class="amount">{money or "—"}</span><span class="count">{diff.count:+,} rows</span>',
                num=True, attrs={"data-kind": "difference"})


#: (kind, legend, colour) of the value chart's parts
_SHARES = (("posted", "posted", BLUE), ("rejected", "rejected at ingest", ORANGE),
           ("dead", "dead-lettered", RED))


def value_chart(lines: Sequence[ValueLine], *, width: int = 1100) -> str:
    """One bar per ISO currency: its value in the file split into posted, rejected and
    dead-lettered, each in proportion to that currency's own total (currencies are never added
    or compared), and grey for what is accounted for nowhere. Inline SVG, no script."""
    shown = [v for v in lines if v.iso and not v.part and v.file.minor > 0]
    if not shown:
        return ""
    bar_h, gap, top = 18, 8, 48
    label_w = max(60, *(text_width(v.currency or "") + 12 for v in shown))
    texts = {v.currency: " · ".join(f"{legend} {100 * max(0, _tally(v, kind).minor) / v.file.minor:.1f}%"
                                    for kind, legend, _ in _SHARES) for v in shown}
    text_w = max(text_width(t) for t in texts.values()) + 12
    span = width - label_w - text_w
    height = top + len(shown) * (bar_h + gap)
    title = "Value by currency: where each currency's total in the file went"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="{esc(title)}" id="value-chart">',
           f'<text x="0" y="16" font-size="14" font-weight="600" fill="#1f2328">{esc(title)}</text>']
    x = 0.0
    for _, legend, colour in (*_SHARES, ("", "not accounted for", GREY)):
        out.append(f'<rect x="{x:.1f}" y="26" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{x + 18:.1f}" y="36" font-size="12" fill="#1f2328">{esc(legend)}</text>')
        x += 18 + text_width(legend) + 24
    for i, v in enumerate(shown):
        y = top + i * (bar_h + gap)
        out.append(f'<text x="{label_w - 8}" y="{y + 13}" font-size="12" font-weight="600" text-anchor="end" '
                   f'fill="#1f2328">{esc(v.currency)}</text>')
        out.append(f'<rect x="{label_w}" y="{y}" width="{span}" height="{bar_h}" fill="{GREY}"/>')
        at = float(label_w)
        for kind, _, colour in _SHARES:
            share = min(1.0, max(0, _tally(v, kind).minor) / v.file.minor)
            out.append(f'<rect x="{at:.1f}" y="{y}" width="{span * share:.1f}" height="{bar_h}" '
                       f'fill="{colour}" data-currency="{esc(v.currency)}" data-kind="{kind}"/>')
            at += span * share
        out.append(f'<text x="{label_w + span + 8}" y="{y + 13}" font-size="12" fill="#1f2328">'
                   f"{esc(texts[v.currency])}</text>")
    out.append("</svg>")
    return "".join(out)


def value_section(lines: Sequence[ValueLine], rows_in: int, file_name: str, dlq: str) -> str:
    """The section: the table, a total row of rows (currencies do not add up), and what each column is."""
    body = [
        row([cell(_label(v), cls="label"), *(_amount_cell(v, kind) for kind, _ in COLUMNS), _difference(v),
             cell(status(v.ok))], cls="" if v.ok else "mismatch",
            attrs={"data-currency-line": v.currency, "data-part": v.part})
        for v in lines
    ]
    totals = {kind: sum(_tally(v, kind).count for v in lines) for kind, _ in COLUMNS}
    all_ok = all(v.ok for v in lines) and totals["file"] == rows_in
    foot = row([
        cell("all lines (rows)", cls="label"),
        *(cell(count(totals[kind]), num=True, attrs={"data-kind": f"total-{kind}"}) for kind, _ in COLUMNS),
        cell(f"{totals['accounted'] - totals['file']:+,}" if totals["accounted"] != totals["file"] else "0",
             num=True),
        cell(status(all_ok)),
    ], cls="total")
    headers = [("Currency", False), *((title, True) for _, title in COLUMNS), ("Difference", True),
               ("Status", False)]
    return (
        '<h2 id="value">Value by currency</h2>'
        + table(headers, body, ident="value-table", foot=[foot])
        + value_chart(lines)
        + '<p class="note">Amounts are in each currency\'s own unit (ISO 4217 minor units: two decimals '
        "for most, none for JPY, three for KWD); amounts of different currencies are never added, so the "
        f"last line totals rows only. <em>In the file</em>: every row of {esc(file_name)} whose "
        "<code>amount_cents</code> is an integer, by the currency code as written; a code that is not "
        "ISO 4217 (all rejected at ingest) keeps its integer minor units, since its unit is unknown. Rows "
        "whose amount is not an integer (<code>12.50</code>, <code>1e3</code>, blank) carry no value and "
        "are counted on their own line; ingest rejects them all. So are, per currency, the rows whose "
        "integer amount is out of range (rejected too): summed with the rest they would swamp the "
        "currency's real total. <em>Posted</em>: the ledger's own sums. "
        f"<em>Dead-lettered</em>: the payments on {esc(dlq)}, each once (value from the dead letter's "
        "<code>data.amount_cents</code>); poison bodies carry no payment and no value (see the dead-letter "
        "queue below).</p>"
    )
