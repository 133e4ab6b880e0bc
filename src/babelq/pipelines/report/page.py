"""The demo's HTML report, for the payments operator who has to sign the run off.

It answers, top to bottom: did it balance (the verdict, and which check or currency did not);
what ran (file, times in ISO-8601 UTC, broker, ledger, Spark master); does the money add up
(per currency: the file's total = posted + rejected + dead-lettered, :mod:`.value`); which
checks passed (a table with a status column, apart from the data); where every row went (nested
lines, with their share of the file); what sits on the dead-letter queue and what it is worth
(:mod:`.dlq`); where the time went (:mod:`.timing`).

One self-contained file (inline CSS and SVG, no script: :mod:`.html`), owner-only, with every
URL's password masked; :func:`babelq.pipelines.report.export.export_report` makes a PNG or PDF
of it for an email.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from babelq import __version__
from babelq.pipelines.demo_result import POISON_CAUSES
from babelq.pipelines.report.display import count, iso_s
from babelq.pipelines.report.dlq import dlq_section
from babelq.pipelines.report.html import cell, esc, page, row, status, table
from babelq.pipelines.report.timing import time_section
from babelq.pipelines.report.value import value_section
from babelq.urls import redact, redact_text

if TYPE_CHECKING:
    from babelq.pipelines.demo_result import DemoResult


def write_report(result: DemoResult, path: str | Path) -> Path:
    """Write the report of ``result`` to ``path`` (mode 0600); returns the path."""
    out = Path(path)
    # owner-only: the report names the broker and the data of a payments run
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older report may have been world-readable
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(redact_text(render(result)))
    return out


def render(r: DemoResult) -> str:
    name = r.generated.path.name
    body = [
        f"<h1>Payments run: {esc(name)}</h1>",
        f'<p class="muted">babelq demo · {count(r.generated.rows)} rows · started {iso_s(r.started_at)} · '
        f"finished {iso_s(r.finished_at)} · {r.seconds:,.1f} s · posted through {esc(_bank_name(r))}</p>",
        verdict(r),
        cards(r),
        facts(r),
        value_section(r.value_lines(), r.generated.rows, name, r.triage.dlq),
        checks(r),
        rows(r),
        dlq_section(r.triage, POISON_CAUSES),
        time_section(r.clock.stages, r.seconds),
        f'<p class="note">Written by babelq {esc(__version__)}. Amounts, counts and checks are the ones the '
        "command printed; every URL has its password masked.</p>",
    ]
    return page(f"Payments run {name}: {'balanced' if r.balanced else 'NOT BALANCED'}", "\n".join(body))


def _bank_name(r: DemoResult) -> str:
    """The core banking the run posted through, short: its rules are in the Run facts."""
    return r.settle.bank.split(" (", 1)[0]


def verdict(r: DemoResult) -> str:
    if r.balanced:
        return ('<div id="verdict" class="verdict" data-balanced="true"><strong>BALANCED</strong><span>'
                f"Every row of {esc(r.generated.path.name)} is posted, rejected at ingest or dead-lettered, "
                "each valid payment is in the ledger once, and every currency's value adds up.</span></div>")
    failed = [esc(c.said()) for c in r.checks if not c.ok]
    failed += [f"value of {esc(v.currency or 'rows without an integer amount')}"
               f"{' (amount out of range)' if v.part else ''} does not add up"
               for v in r.value_lines() if not v.ok]
    if r.doubles:
        failed.append(f"{count(len(r.doubles))} references posted more than once")
    items = "".join(f"<li>{line}</li>" for line in failed)
    return (f'<div id="verdict" class="verdict fail" data-balanced="false"><strong>NOT BALANCED</strong>'
            f"<div>The run does not reconcile:<ul>{items}</ul></div></div>")


def cards(r: DemoResult) -> str:
    dead = sum(n for c, n in r.dlq_by_cause().items() if c not in POISON_CAUSES)
    rows_in = r.generated.rows

    def card(what: str, n: int, of_file: bool = True) -> str:
        share = f" · {100 * n / rows_in:.1f}% of the file" if of_file and rows_in else ""
        return (f'<div class="card"><div class="n">{count(n)}</div>'
                f'<div class="what">{esc(what)}{share}</div></div>')

    return ('<div class="cards">' + card("rows in the file", rows_in, False)
            + card("posted", r.ledger_entries) + card("rejected at ingest", r.ingest.rejected)
            + card("dead-lettered payments", dead)
            + card("poison bodies (not file rows)", r.injected_poison, False) + "</div>")


def facts(r: DemoResult) -> str:
    stats = r.settle.stats
    pairs = [
        ("Input file", esc(f"{r.generated.path.name} (in {r.generated.path.parent})")),
        ("File SHA-256", f'<span class="digest">{esc(r.ingest.digest or "—")}</span>'),
        ("Batch id", esc(r.ingest.batch_id)),
        ("Rows in the file", count(r.generated.rows)),
        ("Started (UTC)", iso_s(r.started_at)),
        ("Finished (UTC)", iso_s(r.finished_at)),
        ("Wall time", f"{r.seconds:,.1f} s"),
        ("Spark master", esc(r.master or "—")),
        ("Broker", esc(redact(r.broker))),
        ("Queue → DLQ", f'{esc(r.queue)} → <a href="#dlq">{esc(r.triage.dlq)}</a>'),
        ("Rejected rows", _link(r.out, r.ingest.rejects_path)),
        ("Ledger", _link(r.out, r.ledger)),
        ("Core banking", esc(r.settle.bank)),
        ("Settle", f"{count(stats.batches)} micro-batches, {count(stats.count('retried'))} retries, "
                   f"{count(stats.count('duplicate'))} duplicates dropped"),
    ]
    items = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs)
    return f'<h2 id="run">Run</h2><dl class="facts" id="facts">{items}</dl>'


def _link(folder: Path, where: str) -> str:
    """``where`` as a link relative to the report's folder when it is a local path there (the
    report can move with its folder), else as text (a database URL, a path elsewhere)."""
    if not where:
        return "—"
    path = Path(where.split(" (tables ", 1)[0])
    try:
        inside = path.is_absolute() and path.exists() and path.resolve().is_relative_to(folder.resolve())
    except OSError:
        inside = False
    if not inside:
        return esc(where)
    relative = path.resolve().relative_to(folder.resolve()).as_posix() + ("/" if path.is_dir() else "")
    return f'<a href="{esc(relative)}">{esc(where)}</a>'


def checks(r: DemoResult) -> str:
    body = [row([cell(esc(c.name)), cell(c.value(c.expected), num=True), cell(c.value(c.actual), num=True),
                 cell(status(c.ok))], cls="" if c.ok else "mismatch", attrs={"data-ok": str(c.ok).lower()})
            for c in r.checks]
    if r.doubles:
        shown = ", ".join(f"{ref} ×{n}" for ref, n in r.doubles)
        body.append(row([cell(esc(f"references posted more than once: {shown}"), cls="wrap"),
                         cell("0", num=True), cell(count(len(r.doubles)), num=True), cell(status(False))],
                        cls="mismatch", attrs={"data-ok": "false"}))
    headers = [("Check", False), ("Expected", True), ("Actual", True), ("Status", False)]
    return '<h2 id="checks">Checks</h2>' + table(headers, body, ident="checks-table")


def rows(r: DemoResult) -> str:
    rows_in = r.generated.rows
    body = []
    for line in r.breakdown():
        share = f"{100 * line.count / rows_in:.2f}%" if rows_in and not line.label.startswith(
            ("poison", "dead-lettered: ")) else ""
        cls = " ".join(c for c in (f"level-{line.level}" if line.level else "group",
                                   "subtotal" if line.subtotal else "") if c)
        body.append(row([cell(esc(line.label)), cell(count(line.count), num=True), cell(share, num=True)],
                        cls=cls))
    headers = [("Where every row went", False), ("Rows", True), ("Share of the file", True)]
    return ('<h2 id="rows">Rows</h2>' + table(headers, body, ident="rows-table", cls="narrow")
            + '<p class="note">Poison bodies are not rows of the file: the demo puts them on the queue as a '
            "misbehaving producer would, and each must end on the dead-letter queue.</p>")
