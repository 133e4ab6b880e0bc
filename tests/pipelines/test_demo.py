"""The demo end to end at a small size: the reconciliation balances and the report is self-contained."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_demo_balances_at_2000_rows(spark: Any, tmp_path: Path) -> None:
    from babelq.pipelines.demo import render_text, run_demo

    result = run_demo(rows=2_000, out=tmp_path / "demo", spark=spark, timeout=300)

    failed = [c for c in result.checks if not c.ok]
    assert not failed, render_text(result)
    assert result.balanced and result.doubles == []
    g = result.generated
    assert result.ledger_entries == g.expected_posted > 1_800
    assert result.ingest.rejected == g.expected_rejected > 0
    lines = dict(result.reconciliation_lines())
    assert lines["rows in (bulk file)"] == g.rows and lines["poison bodies injected"] == 2
    html = (tmp_path / "demo" / "report.html").read_text()
    assert "<svg" in html and "BALANCED" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "<script" not in html
    assert "BALANCED" in render_text(result)
