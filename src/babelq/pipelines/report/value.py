"""The report's money: per currency, the file's total against posted + rejected + dead-lettered.

Every amount cell carries what it shows as data (``data-kind``, ``data-currency``,
``data-count``, ``data-minor``: integer minor units), so a test or a script can check the page
against the ledger without parsing formatted text, and can check that the text says the same.
"""

from __future__ import annotations

from collections.abc import Sequence

from babelq.pipelines.money import Tally, format_minor
from babelq.pipelines.report.display import count
from babelq.pipelines.report.html import cell, esc, row, status, table
from babelq.pipelines.value_reconciliation import ValueLine

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
    attrs = {"data-kind": kind, "data-currency": line.currency or "", "data-count": tally.count,
             "data-minor": tally.minor if line.currency is not None else ""}
    return cell(f'<span class="amount">{shown}</span>{counted}', num=True, attrs=attrs)


def _label(line: ValueLine) -> str:
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


def value_section(lines: Sequence[ValueLine], rows_in: int, file_name: str, dlq: str) -> str:
    """The section: the table, a total row of rows (currencies do not add up), and what each column is."""
    body = [
        row([cell(_label(v), cls="label"), *(_amount_cell(v, kind) for kind, _ in COLUMNS), _difference(v),
             cell(status(v.ok))], cls="" if v.ok else "mismatch", attrs={"data-currency-line": v.currency})
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
        + '<p class="note">Amounts are in each currency\'s own unit (ISO 4217 minor units: two decimals '
        "for most, none for JPY, three for KWD); amounts of different currencies are never added, so the "
        f"last line totals rows only. <em>In the file</em>: every row of {esc(file_name)} whose "
        "<code>amount_cents</code> is an integer, by the currency code as written; a code that is not "
        "ISO 4217 (all rejected at ingest) keeps its integer minor units, since its unit is unknown. Rows "
        "whose amount is not an integer (<code>12.50</code>, <code>1e3</code>, blank) carry no value and "
        "are counted on their own line; ingest rejects them all. <em>Posted</em>: the ledger's own sums. "
        f"<em>Dead-lettered</em>: the payments on {esc(dlq)}, each once (value from the dead letter's "
        "<code>data.amount_cents</code>); poison bodies carry no payment and no value (see the dead-letter "
        "queue below).</p>"
    )
