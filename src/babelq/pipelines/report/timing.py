"""The report's time: where the run's wall time went, and the throughput of the steps that move payments.

Two questions an operator asks, kept apart: *what took the time* (every step, including
``spark.start`` and the demo's own ``generate`` and ``inject.poison``, plus an "other" part for
what no step measures, so the parts add up to the total) and *how fast payments move*
(``ingest.validate``, ``ingest.publish`` and ``settle``: the steps that carry every row; a step
that handles a few rows would only show its fixed cost as a rate).
"""

from __future__ import annotations

from collections.abc import Sequence

from babelq.pipelines.report.display import count
from babelq.pipelines.report.html import PALETTE, Bar, bar_chart, esc, stacked_bar
from babelq.pipelines.stages import Stage

#: steps of the demo that a production run does not have (it receives a file; nobody injects poison)
DEMO_ONLY = ("generate", "inject.poison")
#: the steps whose rate is the pipeline's throughput
THROUGHPUT = ("ingest.validate", "ingest.publish", "settle")
_DEMO_GREY, _OTHER_GREY = "#b8bdc4", "#dde0e4"


def colours(stages: Sequence[Stage]) -> dict[str, str]:
    """One colour per step name, the same in every chart (demo-only steps grey)."""
    out: dict[str, str] = {}
    for stage in stages:
        if stage.name not in out:
            own = sum(1 for name in out if name not in DEMO_ONLY)
            out[stage.name] = _DEMO_GREY if stage.name in DEMO_ONLY else PALETTE[own % len(PALETTE)]
    return out


def _seconds(seconds: float, total: float) -> str:
    share = 100 * seconds / total if total > 0 else 0.0
    shown = f"{seconds:.2f}" if seconds < 1 else f"{seconds:,.1f}"
    return f"{shown} s ({'<1' if 0 < share < 1 else f'{share:.0f}'}%)"


def parts(stages: Sequence[Stage], total: float) -> list[Bar]:
    """One bar per step in run order (demo-only steps grey and marked), then "other": the rest of
    ``total``. The values add up to ``total``."""
    colour = colours(stages)
    bars = [Bar(f"{s.name} (demo only)" if s.name in DEMO_ONLY else s.name, s.seconds,
                _seconds(s.seconds, total), colour[s.name]) for s in stages]
    rest = max(0.0, total - sum(s.seconds for s in stages))
    bars.append(Bar("other (setup, reconciliation)", rest, _seconds(rest, total), _OTHER_GREY))
    return bars


def time_section(stages: Sequence[Stage], total: float) -> str:
    steps = parts(stages, total)
    fast = [s for s in stages if s.name in THROUGHPUT and s.rows and s.seconds > 0]
    colour = colours(stages)
    rates = [Bar(s.name, s.rate, f"{s.rate_text()} ({count(s.rows)} {s.unit})", colour[s.name])
             for s in fast]
    title = f"Wall time: {total:,.1f} s"
    return (
        '<h2 id="time">Time</h2>'
        + stacked_bar(title, steps, ident="time-split")
        + '<div class="charts">'
        + bar_chart(f"Seconds per step (they add up to {total:,.1f} s)", steps, width=540, label_width=200,
                    ident="time-chart")
        + (bar_chart("Throughput of the payment steps", rates, width=520, label_width=120,
                     ident="throughput-chart") if rates else "")
        + "</div>"
        + '<p class="note"><code>spark.start</code> is the JVM and Spark session starting (absent when the '
        "demo runs on a session it was given). <em>Demo only</em>: <code>generate</code> writes the test "
        "file and <code>inject.poison</code> puts poison bodies on the queue; a production run has neither. "
        "<em>Other</em>: what no step measures (preparing the output folder, opening the ledger, the "
        f"reconciliation's queries). Throughput is shown for {esc(', '.join(THROUGHPUT))}, the steps every "
        "row passes through; <code>ingest.rejects</code> and <code>dlq.triage</code> handle a few rows each, "
        "so their time is fixed cost, shown above.</p>"
    )
