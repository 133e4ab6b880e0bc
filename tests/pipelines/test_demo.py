"""The demo end to end at a small size: the reconciliation balances and the report is self-contained."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.spark
@pytest.mark.slow
def test_demo_balances_at_2000_rows(demo_2000: Any) -> None:
    from babelq.pipelines.demo import render_text

    result = demo_2000

    failed = [c for c in result.checks if not c.ok]
    assert not failed, render_text(result)
    assert result.balanced and result.doubles == []
    g = result.generated
    assert result.ledger_entries == g.expected_posted > 1_800
    assert result.ingest.rejected == g.expected_rejected > 0
    lines = dict(result.reconciliation_lines())
    assert lines["rows in (bulk file)"] == g.rows and lines["poison bodies injected"] == 2
    html = (result.out / "report.html").read_text()
    assert "<svg" in html and "BALANCED" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "<script" not in html
    assert "BALANCED" in render_text(result)


def test_heartbeat_logs_progress_and_queue_depth_at_its_interval(caplog: pytest.LogCaptureFixture) -> None:
    from babelq.pipelines.demo import Heartbeat
    from babelq.pipelines.settle import SettleStats

    depths = iter([(700, 100), (0, None)])
    beat = Heartbeat(lambda: next(depths), every=0.05)
    stats = SettleStats()
    with caplog.at_level("INFO", logger="babelq.pipelines"):
        beat(stats)  # inside the interval: silent, and the queue is not asked
        assert caplog.messages == []
        beat.last -= 1.0
        beat(stats)
        stats.record({("posted", ""): 300})
        beat.last -= 1.0
        beat(stats)
    assert len(caplog.messages) == 2
    first, second = caplog.messages
    assert "0 messages settled in 0 micro-batches, 700 waiting on the queue, 100 reserved" in first
    assert "300 messages settled in 1 micro-batches, 0 waiting on the queue, ? reserved" in second
