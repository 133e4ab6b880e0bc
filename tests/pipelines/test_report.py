"""The operator's report: money per currency that reconciles to the ledger, a page that renders, its PNG.

Three layers. Pure tests build a small result by hand (no Spark) and read the HTML: formatting,
the reconciliation by value, a run that does not balance saying so. Chromium tests export that
page to PNG and PDF and look at the pixels. The demo test reads the report of a real 2,000-row
run (the session's ``demo_2000``) and checks what it shows against the ledger and the bulk file,
both read here independently, and that Chromium renders it.
"""

from __future__ import annotations

import csv
import re
import sqlite3
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from png_pixels import Png, read_png

from babelq.envelope import annotate, poison_record
from babelq.errors import ConfigurationError
from babelq.pipelines.money import Tally, ValueGroup, format_minor, format_money, parse_minor
from babelq.transports import Outgoing, open_transport
from conftest import require_chromium
from payment_fixtures import transfer

VERDICT_GREEN = (46, 125, 79)  # .verdict's background
VERDICT_RED = (179, 38, 30)  # .verdict.fail's


# -- reading the page ---------------------------------------------------------------------------


class Cells(HTMLParser):
    """Every element with a ``data-kind``: its attributes and its text by class (amount, count)."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[dict[str, str]] = []
        self._open: list[tuple[dict[str, str], str]] = []  # (cell, class of the span being read)
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = {k: v or "" for k, v in attrs}
        if "id" in named:
            self.ids.add(named["id"])
        if tag == "td" and "data-kind" in named:
            self._open.append((named, ""))
        elif tag == "span" and self._open:
            cell, _ = self._open[-1]
            self._open[-1] = (cell, named.get("class", ""))

    def handle_data(self, data: str) -> None:
        if self._open:
            cell, span = self._open[-1]
            cell[f"text-{span or 'cell'}"] = cell.get(f"text-{span or 'cell'}", "") + data

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self._open:
            self._open[-1] = (self._open[-1][0], "")
        elif tag == "td" and self._open:
            self.cells.append(self._open.pop()[0])


def cells(html: str, kind: str) -> dict[str, dict[str, str]]:
    """currency (``AUD/amount_out_of_range`` for a part of it) -> the cell of ``kind`` (``file``,
    ``posted``, ``rejected``, ``dead``, ...)."""
    parser = Cells()
    parser.feed(html)
    return {c.get("data-currency", "") + (f"/{c['data-part']}" if c.get("data-part") else ""): c
            for c in parser.cells if c["data-kind"] == kind}


def shown(cell: dict[str, str], currency: str) -> tuple[int, int]:
    """(count, minor units) as the cell's *text* says them, checked against its data attributes."""
    amount = parse_minor(cell["text-amount"], currency)
    counted = int(cell["text-count"].split()[0].replace(",", ""))
    assert (counted, amount) == (int(cell["data-count"]), int(cell["data-minor"])), cell
    return counted, amount


# -- a small result, by hand --------------------------------------------------------------------


def synthetic(tmp_path: Path, *, posted_aud: tuple[int, int] = (6, 6_000),
              broker: str = "redis://:s3cret@127.0.0.1:6379/15") -> Any:
    """A 10-row run: 7 AUD and 1 JPY valid (one AUD expired on the DLQ), 1 row of amount 12.50, 1 in XYZ;
    one poison body on the DLQ."""
    from babelq.pipelines.demo import DemoResult, _checks
    from babelq.pipelines.dlq import triage
    from babelq.pipelines.generator import GeneratedFile
    from babelq.pipelines.ingest import IngestResult
    from babelq.pipelines.settle import SettleRun, SettleStats
    from babelq.pipelines.stages import Stage, StageClock

    transport = open_transport(f"sqlite://{tmp_path}/q.db")
    expired = annotate(transfer("PAY-7", "payments", amount_cents=1_000), "failed", cause="expired",
                       error="expired: meta.expire_at 1795618231431 passed 86461169 ms before handling")
    transport.publish_many("payments.dlq", [Outgoing(expired.encode()),
                                            Outgoing(poison_record(b"\xff", original_queue="payments",
                                                                   error="body is not valid UTF-8"))])
    dlq = triage(transport, "payments.dlq")
    transport.close()
    generated = GeneratedFile(tmp_path / "payments.csv", 10,
                              Counter({"amount_not_integer": 1, "currency_unknown": 1, "expired": 1}))
    values = [ValueGroup(None, "AUD", 7, 7, 7_000), ValueGroup(None, "JPY", 1, 1, 500),
              ValueGroup("amount_not_integer", "AUD", 1, 0, 0),
              ValueGroup("currency_unknown", "XYZ", 1, 1, 999)]
    ingested = IngestResult("bulk_test", 10, 8, 2, {"amount_not_integer": 1, "currency_unknown": 1},
                            str(tmp_path / "rejects"), digest="ab" * 32, values=values)
    clock = StageClock([Stage("generate", 0.05, 10), Stage("spark.start", 3.0),
                        Stage("ingest.validate", 2.0, 10), Stage("ingest.publish", 1.5, 8),
                        Stage("inject.poison", 0.01, 1), Stage("settle", 4.0, 9),
                        Stage("dlq.triage", 0.01, 2)])
    settled = SettleRun(SettleStats(), 4.0, True)
    result = DemoResult(tmp_path, broker, "payments", generated, ingested, settled, dlq, posted_aud[0] + 1,
                        posted_aud[0] + 1, [], clock)
    result.posted_by_currency = {"AUD": posted_aud, "JPY": (1, 500)}
    result.ledger, result.master = str(tmp_path / "ledger.db"), "local[2]"
    result.started_at, result.seconds = 1_795_700_000.0, 12.0
    result.finished_at = result.started_at + result.seconds
    result.checks = _checks(result)
    return result


def write(result: Any) -> tuple[Path, str]:
    from babelq.pipelines.report import write_report

    path = write_report(result, result.out / "report.html")
    return path, path.read_text(encoding="utf-8")


# -- pure ---------------------------------------------------------------------------------------


def test_amounts_are_shown_in_each_currencys_minor_unit() -> None:
    assert format_minor(123_456_789, "AUD") == "1,234,567.89"
    assert format_minor(123_456_789, "JPY") == "123,456,789"  # ISO 4217: no minor unit
    assert format_minor(123_456_789, "KWD") == "123,456.789"
    assert format_minor(-5, "EUR") == "-0.05"
    assert format_money(1_234, "XYZ") == "1,234 minor units (XYZ)"  # not ISO 4217: not guessed
    for minor, currency in ((123_456_789, "AUD"), (-5, "EUR"), (7, "JPY"), (1_000, "BHD")):
        assert parse_minor(format_minor(minor, currency), currency) == minor
    with pytest.raises(ValueError, match="2 decimals"):
        parse_minor("12.5", "AUD")


def test_epoch_milliseconds_in_an_error_are_shown_as_iso_8601() -> None:
    from babelq.pipelines.report.display import readable_error

    text = "expired: meta.expire_at 1795618231431 passed 86461169 ms before handling"
    assert readable_error(text) == (
        "expired: meta.expire_at 2026-11-25T14:50:31.431Z passed 86,461,169 ms (24.0 h) before handling")
    assert readable_error("core banking: account 1234567890123456 closed") == (
        "core banking: account 1234567890123456 closed")  # 16 digits: not a time


def test_value_lines_reconcile_each_currency_and_show_a_difference() -> None:
    from babelq.pipelines.value_reconciliation import value_lines

    groups = [ValueGroup(None, "AUD", 3, 3, 300), ValueGroup("amount_out_of_range", "AUD", 1, 1, -50),
              ValueGroup("amount_not_integer", "USD", 2, 0, 0),
              ValueGroup("currency_unknown", "usd", 1, 1, 9)]
    lines = value_lines(groups, {"AUD": (2, 200)}, {"AUD": Tally(1, 100)})
    assert [(v.currency, v.part) for v in lines] == [("AUD", ""), ("usd", ""), ("AUD", "amount_out_of_range"),
                                                     (None, "")]
    aud, usd, out_of_range, no_amount = lines
    assert aud.file == Tally(3, 300) and aud.accounted == Tally(3, 300) and aud.ok
    # an out-of-range amount is never summed into its currency's total
    assert out_of_range.file == out_of_range.rejected == Tally(1, -50) and out_of_range.ok
    assert usd.iso is False and usd.rejected == Tally(1, 9) and usd.ok
    assert no_amount.file == Tally(2, 0) and no_amount.rejected == Tally(2, 0) and no_amount.ok

    short = value_lines(groups, {"AUD": (2, 190)}, {"AUD": Tally(1, 100)})[0]
    assert not short.ok and short.difference == Tally(0, -10)


def test_the_time_chart_adds_up_to_the_total_with_demo_only_steps_marked() -> None:
    from babelq.pipelines.report.timing import parts
    from babelq.pipelines.stages import Stage

    stages = [Stage("generate", 1.0, 10), Stage("spark.start", 10.0), Stage("settle", 20.0, 5)]
    bars = parts(stages, 48.0)
    assert [b.label for b in bars] == ["generate (demo only)", "spark.start", "settle",
                                       "other (setup, reconciliation)"]
    assert sum(b.value for b in bars) == pytest.approx(48.0)
    assert bars[-1].text == "17.0 s (35%)"


def test_a_balanced_report_shows_money_checks_and_the_dlq_in_operator_terms(tmp_path: Path) -> None:
    result = synthetic(tmp_path)
    path, html = write(result)

    assert path.stat().st_mode & 0o777 == 0o600
    assert 'id="verdict" class="verdict" data-balanced="true"' in html
    posted = cells(html, "posted")
    assert shown(posted["AUD"], "AUD") == (6, 6_000) and posted["AUD"]["text-amount"] == "60.00"
    assert shown(posted["JPY"], "JPY") == (1, 500) and posted["JPY"]["text-amount"] == "500"
    assert shown(cells(html, "dead")["AUD"], "AUD") == (1, 1_000)
    assert cells(html, "file")["XYZ"]["text-amount"] == "999"  # minor units as written
    assert cells(html, "file")[""]["text-count"] == "1 row"  # the 12.50 row: counted, no value
    assert cells(html, "total-file")[""]["text-cell"] == "10"
    # checks in their own table, with a status column
    assert re.search(r'<table id="checks-table">.*<th>Status</th>', html)
    assert html.count('class="status ok"') >= 10 and 'class="status fail"' not in html
    # nested rows are styled, not indented with spaces
    assert '<tr class="level-2"><td>amount_not_integer</td>' in html
    # times and errors in ISO-8601, counts with separators, the dead letters explained
    assert '<span class="nowrap">2026-11-25T14:50:31.431Z</span> passed 86,461,169 ms (24.0 h)' in html
    assert "1795618231431" not in html
    assert "started 2026-11-26T" in html
    assert ("<strong>2 dead letters</strong> on payments.dlq stand for <strong>2 failed messages</strong>"
            in html)
    assert "1 has none: the 1 poison body the demo put on the queue" in html
    assert "AUD 10.00" in html  # the expired payment's value on the DLQ
    assert "other (setup, reconciliation)" in html and "spark.start" in html
    # the file's whole SHA-256; checks as sentences, a yes/no one as yes or no; links to what the run left
    assert "ab" * 32 in html
    assert re.search(r"<td>Settle stopped on an empty queue</td><td class=\"num\">yes</td>"
                     r"<td class=\"num\">yes</td>", html)
    assert '<a href="#dlq">payments.dlq</a>' in html and 'id="dlq"' in html
    # a value chart: a bar per ISO currency, split in proportion to that currency's own total
    chart = re.search(r'<svg[^>]*id="value-chart">.*?</svg>', html)
    assert chart is not None and "<script" not in chart.group(0)
    assert re.findall(r'data-currency="(\w+)" data-kind="posted"', chart.group(0)) == ["AUD", "JPY"]
    assert "posted 85.7% · rejected at ingest 0.0% · dead-lettered 14.3%" in chart.group(0)
    (tmp_path / "rejects").mkdir()
    (tmp_path / "ledger.db").touch()
    _, html = write(result)
    assert '<a href="rejects/">' in html and '<a href="ledger.db">' in html
    # self-contained, no script, the broker's password masked
    assert "<script" not in html and "s3cret" not in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")


def test_the_report_and_the_demo_summary_say_core_banking_was_simulated(tmp_path: Path) -> None:
    from babelq.pipelines.demo import render_text

    result = synthetic(tmp_path)  # a run as the demo makes it: settle's default bank
    _, html = write(result)
    assert re.search(r'<p class="muted">babelq demo · [^<]* · posted through simulated core banking</p>',
                     html)
    assert re.search(r"<dt>Core banking</dt><dd>simulated core banking \(creditor accounts ending 0000 fail "
                     r"once, 9999 always fail \(dead-lettered\)\)</dd>", html)
    assert "\ncore banking: simulated core banking (" in render_text(result)

    result.settle.bank = "core banking mybank:post"
    _, html = write(result)
    assert "posted through core banking mybank:post</p>" in html and "simulated" not in html


def test_a_report_that_does_not_reconcile_says_which_currency_loudly(tmp_path: Path) -> None:
    result = synthetic(tmp_path, posted_aud=(6, 5_990))  # the ledger holds 0.10 AUD less than it should
    assert not result.balanced
    _, html = write(result)

    assert 'class="verdict fail" data-balanced="false"><strong>NOT BALANCED</strong>' in html
    assert "value of AUD does not add up" in html
    assert re.search(
        r'<tr class="mismatch" data-currency-line="AUD">.*?<span class="status fail">FAIL</span>', html)
    assert re.search(r'data-kind="difference"><span class="amount">-0.10</span>', html)
    assert re.search(r"Lines of the value table that add up[^<]*</td><td class=\"num\">4</td>"
                     r"<td class=\"num\">3</td>", html)


def test_an_export_asked_for_without_chromium_is_one_line_naming_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from babelq.cli import main as cli_main
    from babelq.pipelines.report.export import resolve_export

    monkeypatch.setenv("BABELQ_CHROMIUM", str(tmp_path / "no-such-chromium"))
    assert resolve_export("auto") is None and resolve_export("none") is None
    with pytest.raises(ConfigurationError, match=r"^export pdf: no Chromium found") as raised:
        resolve_export("pdf")
    assert "\n" not in str(raised.value)
    # the CLI refuses before Spark starts (this takes no time) and names its option
    assert cli_main.main(["demo", "--out", str(tmp_path / "out"), "--export", "png"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("babelq demo: error: --export png: no Chromium found") and "\n" not in err
    assert not (tmp_path / "out").exists()


# -- Chromium -----------------------------------------------------------------------------------


def looks_like_a_page(png: Png, verdict: tuple[int, int, int]) -> None:
    """Not blank, not cut: many colours, content from top to bottom, the verdict's colour at the top."""
    colours = Counter(png.pixel(x, y) for y in range(0, png.height, 7) for x in range(0, png.width, 5))
    assert len(colours) > 50, f"{len(colours)} colours: a blank or flat picture"
    white = (255, 255, 255)
    inked = [y for y in range(png.height) if any(png.pixel(x, y) != white for x in range(0, png.width, 3))]
    assert len(inked) > png.height * 0.3, "mostly empty rows"
    assert inked[-1] > png.height - 120, "blank space at the bottom: the page was measured wrong"
    assert any(png.pixel(x, y) == verdict for y in range(0, 240) for x in range(0, png.width, 4)), \
        "no verdict banner at the top"


#: run in the page by Chromium at the export's width: every text it cannot show whole (an SVG text
#: outside its chart, a box whose content overflows it, a page wider than the window)
_CLIPPED = """<script>
const cut = [];
for (const svg of document.querySelectorAll('svg')) {
  const w = svg.width.baseVal.value, h = svg.height.baseVal.value;
  for (const t of svg.querySelectorAll('text')) {
    const b = t.getBBox();
    if (b.x < -0.5 || b.y < -0.5 || b.x + b.width > w + 0.5 || b.y + b.height > h + 0.5)
      cut.push((svg.id || 'svg') + ': ' + t.textContent);
  }
}
for (const el of document.querySelectorAll('body *')) {
  if (el instanceof HTMLElement && getComputedStyle(el).overflowX !== 'visible'
      && el.scrollWidth > el.clientWidth + 1) cut.push(el.tagName + ': ' + el.textContent.slice(0, 80));
}
if (document.documentElement.scrollWidth > window.innerWidth)
  cut.push('page: ' + document.documentElement.scrollWidth + ' px wide');
document.body.setAttribute('data-clipped', JSON.stringify(cut));
</script>"""


def clipped_texts(report: Path, work: Path) -> list[str]:
    """What Chromium, laying ``report`` out at the export's width, cannot show whole."""
    import html
    import json

    from babelq.pipelines.report.export import dump_dom

    probe = work / "clip-probe.html"
    page = report.read_text(encoding="utf-8").replace("</body>", _CLIPPED + "</body>")
    probe.write_text(page, encoding="utf-8")
    found = re.search(r'data-clipped="([^"]*)"', dump_dom(probe))
    assert found is not None, "Chromium ran no measuring script"
    return list(json.loads(html.unescape(found.group(1))))


def test_no_text_of_the_report_is_clipped_at_the_exported_width(tmp_path: Path) -> None:
    """Figures of a 100,000-row run: the longest labels and values the charts hold."""
    require_chromium()
    from babelq.pipelines.stages import Stage, StageClock

    result = synthetic(tmp_path)
    result.clock = StageClock([Stage("generate", 1.2, 100_000), Stage("spark.start", 6.1),
                               Stage("ingest.validate", 4.3, 100_000), Stage("ingest.publish", 18.67, 98_176),
                               Stage("inject.poison", 0.02, 100, "messages"),
                               Stage("settle", 18.68, 98_276, "messages"),
                               Stage("dlq.triage", 0.4, 1_016, "messages")])
    result.seconds = 61.0
    path, _ = write(result)
    assert clipped_texts(path, tmp_path) == []


def test_the_report_exports_to_png_and_pdf_as_the_browser_draws_it(tmp_path: Path) -> None:
    require_chromium()
    from babelq.pipelines.report.export import WIDTH, export_report

    path, _ = write(synthetic(tmp_path, posted_aud=(6, 5_990)))
    png_path = export_report(path, "png")
    assert png_path == tmp_path / "report.png" and png_path.stat().st_mode & 0o777 == 0o600
    png = read_png(png_path)
    assert png.width == WIDTH and 1_500 < png.height < 8_000
    looks_like_a_page(png, VERDICT_RED)

    pdf = export_report(path, "pdf").read_bytes()
    assert pdf.startswith(b"%PDF-") and len(pdf) > 10_000
    assert re.search(rb"/Count 1\b", pdf), "one page, the page's own size"


# -- the demo -----------------------------------------------------------------------------------


def ledger_totals(ledger: Path) -> dict[str, tuple[int, int]]:
    """The ledger's totals per currency, read with plain SQL (not babelq's Ledger class)."""
    with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT currency, COUNT(*), SUM(amount_cents) FROM ledger_entries GROUP BY 1")
        return {str(c): (int(n), int(total)) for c, n, total in rows}


def file_totals(bulk: Path) -> dict[str, tuple[int, int]]:
    """The bulk file's rows with an integer amount, per currency as written (the report's rule)."""
    out: dict[str, tuple[int, int]] = {}
    with bulk.open(newline="", encoding="utf-8") as fh:
        for record in csv.DictReader(fh):
            amount = record["amount_cents"].strip()
            if re.fullmatch(r"-?[0-9]{1,18}", amount):
                n, total = out.get(record["currency"].strip(), (0, 0))
                out[record["currency"].strip()] = (n + 1, total + int(amount))
    return out


@pytest.mark.spark
@pytest.mark.slow
def test_the_demo_report_renders_and_its_totals_are_the_ledgers(demo_2000: Any) -> None:
    from babelq.pipelines.currencies import minor_units
    from babelq.pipelines.report.export import dump_dom

    result = demo_2000
    html = (result.out / "report.html").read_text(encoding="utf-8")

    # what the page says was posted is what the ledger holds, currency by currency
    ledger = ledger_totals(result.out / "ledger.db")
    assert len(ledger) >= 4
    posted = cells(html, "posted")
    assert {c: shown(posted[c], c) for c in ledger} == ledger
    # and the file's totals are the bulk file's, read here with csv: a currency's line plus its line
    # of out-of-range amounts, which are never summed into it
    in_file = file_totals(result.generated.path)
    file_cells = cells(html, "file")
    out_of_range = [key for key in file_cells if key.endswith("/amount_out_of_range")]
    assert out_of_range, "the 2,000-row file has rows whose amount is out of range"

    def unit(key: str) -> str:
        currency = key.split("/", maxsplit=1)[0]
        return currency if minor_units(currency) is not None else "XXX"

    seen: dict[str, tuple[int, int]] = {}
    for key in file_cells:
        if key:
            n, total = shown(file_cells[key], unit(key))
            before = seen.get(key.split("/")[0], (0, 0))
            seen[key.split("/")[0]] = (before[0] + n, before[1] + total)
    assert seen == in_file
    # posted + rejected + dead-lettered = the file, for every line, as shown
    for key in file_cells:
        if key:
            parts = [shown(cells(html, kind)[key], unit(key)) for kind in ("posted", "rejected", "dead")]
            total_shown = (sum(p[0] for p in parts), sum(p[1] for p in parts))
            assert total_shown == shown(file_cells[key], unit(key)), key
    for key in out_of_range:  # ingest rejects every one of them
        assert shown(cells(html, "rejected")[key], unit(key)) == shown(file_cells[key], unit(key)), key
    assert cells(html, "total-file")[""]["text-cell"] == f"{result.generated.rows:,}"
    assert 'class="status fail"' not in html

    # Chromium lays the page out: the verdict and every section are in the DOM it built
    require_chromium()
    dom = dump_dom(result.out / "report.html")
    for ident in ("verdict", "value-table", "checks-table", "rows-table", "dlq-by-cause", "dlq-detail",
                  "time-chart", "throughput-chart", "value-chart"):
        assert f'id="{ident}"' in dom, ident
    assert 'data-balanced="true"' in dom and dom.count("<svg") >= 4
    assert clipped_texts(result.out / "report.html", result.out.parent) == []

    # and its PNG, written by the demo itself beside the report, is a real picture of it
    assert result.exported == result.out / "report.png", result.export_note
    png = read_png(result.exported)
    assert png.width == 1200 and png.height > 2_500
    looks_like_a_page(png, VERDICT_GREEN)
