"""The demo's HTML report: one self-contained file, charts drawn here as inline SVG (no CDN, no JS).

A reader opening it offline sees throughput per stage, where dead letters came from and the
reconciliation that decides the exit code.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path

from babelq.urls import redact_text

_PALETTE = ("#2f6db5", "#d9822b", "#3a9d5d", "#b53f3f", "#7b5ea7", "#8a8a8a", "#c2a23a", "#3fa3b5")


def bar_chart(title: str, items: Sequence[tuple[str, float]], unit: str, width: int = 640) -> str:
    """A horizontal bar chart as an SVG element."""
    bar_h, gap, label_w, top = 22, 8, 190, 30
    height = top + len(items) * (bar_h + gap) + 10
    peak = max((v for _, v in items), default=0.0) or 1.0
    span = width - label_w - 110
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{html.escape(title)}">',
             f'<text x="0" y="18" font-size="15" font-weight="bold">{html.escape(title)}</text>']
    for i, (label, value) in enumerate(items):
        y = top + i * (bar_h + gap)
        w = max(1.0, span * value / peak)
        colour = _PALETTE[i % len(_PALETTE)]
        parts.append(f'<text x="{label_w - 8}" y="{y + 16}" font-size="12" text-anchor="end">'
                     f'{html.escape(label)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colour}"/>')
        parts.append(f'<text x="{label_w + w + 6:.1f}" y="{y + 16}" font-size="12">'
                     f'{value:,.0f} {html.escape(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_report(
    path: str | Path, *, title: str, balanced: bool, summary: Sequence[tuple[str, object]],
    stages: Sequence[tuple[str, float, int]], dlq_reasons: Sequence[tuple[str, int]],
    reconciliation: Sequence[tuple[str, object]], triage_text: str,
) -> Path:
    """Write the report; ``stages`` are (name, seconds, rows)."""
    verdict = "BALANCED" if balanced else "NOT BALANCED"
    colour = "#3a9d5d" if balanced else "#b53f3f"
    throughput = [(name, rows / seconds if seconds else 0.0) for name, seconds, rows in stages]
    durations = [(name, seconds) for name, seconds, _ in stages]
    doc = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 10px; text-align: left; }}
th {{ background: #f2f2f2; }}
.verdict {{ color: white; background: {colour}; padding: 6px 14px; display: inline-block; }}
pre {{ background: #f7f7f7; padding: 1em; overflow-x: auto; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="verdict">{verdict}</p>
{table(("fact", "value"), summary)}
<h2>Reconciliation</h2>
{table(("line", "count"), reconciliation)}
<h2>Throughput per stage</h2>
{bar_chart("rows per second", throughput, "rows/s")}
{bar_chart("seconds per stage", [(n, s * 1000) for n, s in durations], "ms")}
<h2>Dead letters by cause</h2>
{bar_chart("dead letters", [(k, float(v)) for k, v in dlq_reasons], "msgs") if dlq_reasons else "<p>none</p>"}
<h2>DLQ triage</h2>
<pre>{html.escape(triage_text)}</pre>
</body></html>
"""
    out = Path(path)
    # owner-only: the report names the broker and the data of a payments run
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older report may have been world-readable
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(redact_text(doc))
    return out
