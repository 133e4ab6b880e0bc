"""The building blocks of the demo's HTML report: escaping, tables, the stylesheet, SVG charts.

Self-contained on purpose: the page is one file an operator can open offline or attach to a
ticket, so the CSS is inline, the charts are inline SVG drawn here, and there is no script, CDN
or web font. Laid out for a 1200-pixel-wide window, the width of its PNG export
(:mod:`babelq.pipelines.report.export`). Long texts (URLs, dead-letter errors) wrap instead of
running off the right edge; numbers are right-aligned in tabular figures.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

BLUE, ORANGE, GREEN, RED, PURPLE, GREY, OCHRE, TEAL = (
    "#2f6db5", "#d9822b", "#3a9d5d", "#b53f3f", "#7b5ea7", "#9aa0a6", "#c2a23a", "#3fa3b5")
PALETTE = (BLUE, ORANGE, GREEN, RED, PURPLE, OCHRE, TEAL)

CSS = """
* { box-sizing: border-box; }
body { margin: 0; background: #fff; color: #1f2328; font: 14px/1.45 system-ui, -apple-system, "Segoe UI",
  Roboto, "DejaVu Sans", Arial, sans-serif; }
main { max-width: 1160px; margin: 0 auto; padding: 24px 28px 40px; }
h1 { font-size: 24px; margin: 0 0 2px; }
h2 { font-size: 18px; margin: 30px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #d9dde3; }
h3 { font-size: 15px; margin: 18px 0 6px; }
p { margin: 6px 0; }
.muted, .note { color: #5f6670; }
.note { font-size: 13px; max-width: 1000px; }
.verdict { display: flex; gap: 16px; align-items: baseline; margin: 14px 0; padding: 12px 18px;
  border-radius: 6px; color: #fff; background: #2e7d4f; }
.verdict.fail { background: #b3261e; }
.verdict strong { font-size: 20px; letter-spacing: .04em; white-space: nowrap; }
.verdict ul { margin: 4px 0 0; padding-left: 18px; }
.cards { display: grid; grid-template-columns: repeat(5, 1fr); gap: 12px; margin: 12px 0; }
.card { border: 1px solid #d9dde3; border-radius: 6px; padding: 10px 14px; }
.card .n { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .what { color: #5f6670; font-size: 13px; }
dl.facts { display: grid; grid-template-columns: max-content minmax(0, 1fr) max-content minmax(0, 1fr);
  gap: 4px 18px; margin: 8px 0; }
dl.facts dt { color: #5f6670; white-space: nowrap; }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
.digest { font: 12px ui-monospace, "DejaVu Sans Mono", monospace; overflow-wrap: anywhere; }
a { color: #2f6db5; }
table { border-collapse: collapse; width: 100%; margin: 8px 0 4px; }
th, td { padding: 5px 10px; text-align: left; vertical-align: top; border-bottom: 1px solid #e3e6ea; }
thead th { background: #f3f5f8; border-bottom: 2px solid #c8ced6; font-weight: 600; }
th.num { text-align: right; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.narrow { max-width: 820px; }
td.label { min-width: 150px; }
code, .nowrap { white-space: nowrap; }
td.urn { min-width: 300px; overflow-wrap: anywhere; }
td .count { display: block; color: #5f6670; font-size: 12px; }
td.wrap { overflow-wrap: anywhere; }
tr.level-1 > td:first-child { padding-left: 30px; }
tr.level-2 > td:first-child { padding-left: 52px; }
tr.group > td { background: #f8f9fb; font-weight: 600; }
tr.total > td { border-top: 2px solid #c8ced6; font-weight: 600; }
tr.mismatch > td { background: #fdeceb; }
.status { display: inline-block; min-width: 46px; padding: 1px 8px; border-radius: 10px; text-align: center;
  font-size: 12px; font-weight: 700; }
.status.ok { background: #e2f2e7; color: #2e7d4f; }
.status.fail { background: #b3261e; color: #fff; }
.tag { display: inline-block; margin-left: 6px; padding: 0 6px; border-radius: 8px; background: #eef0f3;
  color: #5f6670; font-size: 11px; font-weight: 400; white-space: nowrap; }
.charts { display: flex; flex-wrap: wrap; gap: 8px 36px; align-items: flex-start; }
svg { display: block; margin: 6px 0; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif; }
"""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def attributes(attrs: Mapping[str, object] | None) -> str:
    """`` name="value"`` for each item whose value is not empty or None."""
    return "".join(f' {name}="{esc(value)}"' for name, value in (attrs or {}).items()
                   if value is not None and value != "")


def cell(content: str, *, num: bool = False, cls: str = "", attrs: Mapping[str, object] | None = None) -> str:
    """A ``<td>``; ``content`` is HTML (escape text with :func:`esc`)."""
    classes = " ".join(c for c in ("num" if num else "", cls) if c)
    return f"<td{attributes({'class': classes, **(attrs or {})})}>{content}</td>"


def row(cells: Iterable[str], *, cls: str = "", attrs: Mapping[str, object] | None = None) -> str:
    return f"<tr{attributes({'class': cls, **(attrs or {})})}>{''.join(cells)}</tr>"


def table(headers: Sequence[tuple[str, bool]], rows: Iterable[str], *, ident: str = "",
          foot: Iterable[str] = (), cls: str = "") -> str:
    """A table; ``headers`` are (text, numeric) pairs, ``rows`` from :func:`row`."""
    head = "".join(f"<th{attributes({'class': 'num' if num else ''})}>{esc(text)}</th>"
                   for text, num in headers)
    tail = "".join(foot)
    return (f"<table{attributes({'id': ident, 'class': cls})}><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody>{f'<tfoot>{tail}</tfoot>' if tail else ''}</table>")


def status(ok: bool) -> str:
    return f'<span class="status {"ok" if ok else "fail"}">{"ok" if ok else "FAIL"}</span>'


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar: its label, length, the value as printed beside it, and its colour."""

    label: str
    value: float
    text: str
    colour: str = BLUE


def text_width(text: str, size: float = 12.0) -> int:
    """A width in pixels no narrower than ``text`` drawn at ``size`` in the page's sans-serif: SVG
    text does not wrap, so a chart makes room for it by this."""
    narrow = sum(1 for ch in text if ch in " ,.:;()|il'!-")
    return int((len(text) - narrow) * size * 0.64 + narrow * size * 0.34) + 1


def bar_chart(title: str, bars: Sequence[Bar], *, width: int = 560, label_width: int = 200,
              ident: str = "") -> str:
    """A horizontal bar chart as an inline SVG element (bars scaled to the largest)."""
    bar_h, gap, top = 20, 7, 28
    height = top + len(bars) * (bar_h + gap) + 6
    peak = max((b.value for b in bars), default=0.0) or 1.0
    label_width = max([label_width, *(text_width(b.label) + 8 for b in bars)])
    # the longest bar ends where the widest value text still fits inside the chart
    span = max(40, width - label_width - 6 - max((text_width(b.text) for b in bars), default=0) - 4)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{esc(title)}"{attributes({"id": ident})}>',
             f'<text x="0" y="16" font-size="14" font-weight="600" fill="#1f2328">{esc(title)}</text>']
    for i, bar in enumerate(bars):
        y = top + i * (bar_h + gap)
        length = max(1.0, span * bar.value / peak) if bar.value > 0 else 0.0
        parts.append(f'<text x="{label_width - 8}" y="{y + 14}" font-size="12" text-anchor="end" '
                     f'fill="#1f2328">{esc(bar.label)}</text>')
        parts.append(f'<rect x="{label_width}" y="{y}" width="{length:.1f}" height="{bar_h}" rx="2" '
                     f'fill="{bar.colour}"/>')
        parts.append(f'<text x="{label_width + length + 6:.1f}" y="{y + 14}" font-size="12" '
                     f'fill="#1f2328">{esc(bar.text)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def stacked_bar(title: str, parts: Sequence[Bar], *, width: int = 1100, ident: str = "") -> str:
    """One bar split into ``parts`` in proportion (a timeline of where the time went), with a legend."""
    total = sum(max(0.0, p.value) for p in parts) or 1.0
    bar_y, bar_h, legend_y = 26, 26, 72
    per_row = 4
    rows = (len(parts) + per_row - 1) // per_row
    height = legend_y + rows * 20 + 4
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="{esc(title)}"{attributes({"id": ident})}>',
           f'<text x="0" y="16" font-size="14" font-weight="600" fill="#1f2328">{esc(title)}</text>']
    x = 0.0
    for p in parts:
        w = width * max(0.0, p.value) / total
        out.append(f'<rect x="{x:.1f}" y="{bar_y}" width="{w:.1f}" height="{bar_h}" fill="{p.colour}" '
                   f'stroke="#fff" stroke-width="1"/>')
        x += w
    col = width / per_row
    for i, p in enumerate(parts):
        lx, ly = (i % per_row) * col, legend_y + (i // per_row) * 20
        out.append(f'<rect x="{lx:.1f}" y="{ly - 10}" width="12" height="12" fill="{p.colour}"/>')
        out.append(f'<text x="{lx + 18:.1f}" y="{ly}" font-size="12" fill="#1f2328">'
                   f'{esc(p.label)}: {esc(p.text)}</text>')
    out.append("</svg>")
    return "".join(out)


def page(title: str, body: str) -> str:
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=1200"><title>{esc(title)}</title>'
            f"<style>{CSS}</style></head><body><main>\n{body}\n</main></body></html>\n")
