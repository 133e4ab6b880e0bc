"""The demo end to end at a small size: the reconciliation balances and the report is self-contained."""

from __future__ import annotations

import re
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
    # the demo posts through the simulator, whose refusals are among its defects, and says so
    assert result.settle.bank.startswith("simulated core banking")
    assert "posted through simulated core banking</p>" in html


@pytest.mark.spark
@pytest.mark.slow
def test_the_demo_shows_counts_that_grow_to_each_stages_total(
    demo_2000: Any, demo_2000_progress: list[str]
) -> None:
    """The plain progress lines of the shared run: per long stage, counts that never go back and end
    at the stage's total (rows validated of the file, rows published, messages settled of those
    published plus the poison injected); settle says what is reserved while a micro-batch holds it."""
    result = demo_2000
    counts: dict[str, list[tuple[int, int | None]]] = {}
    for line in demo_2000_progress:
        found = re.match(r"stage ([\w.]+): ([\d,]+)(?: / ([\d,]+))? (rows|messages|tasks)", line)
        if found is not None and found.group(4) != "tasks":
            total = int(found.group(3).replace(",", "")) if found.group(3) else None
            counts.setdefault(found.group(1), []).append((int(found.group(2).replace(",", "")), total))
    expected = {
        "ingest.validate": result.generated.rows,
        "ingest.publish": result.ingest.published,
        "settle": result.ingest.published + result.injected_poison,
    }
    for stage, total in expected.items():
        seen = [done for done, _ in counts[stage]]
        assert seen == sorted(seen), (stage, demo_2000_progress)
        assert counts[stage][-1] == (total, total), (stage, demo_2000_progress)
    settle_lines = [line for line in demo_2000_progress if line.startswith("stage settle:")]
    assert any("reserved (being settled)" in line for line in settle_lines), settle_lines


@pytest.mark.spark
@pytest.mark.slow
def test_the_stages_table_and_every_summary_count_the_same(demo_2000: Any) -> None:
    """Rows are the file's, messages the broker's, each message once however often it came back:
    the stages table, the report, the progress line and settle's summary say the same numbers."""
    from babelq.cli.commands.settle import summary
    from babelq.pipelines.demo import render_text

    result = demo_2000
    stages = {s.name: s for s in result.clock.stages}
    settled = result.ingest.published + result.injected_poison
    stats = result.settle.stats
    assert stats.messages > stats.settled == settled  # the closed accounts came back: retried
    expected = {"generate": (result.generated.rows, "rows"),
                "ingest.publish": (result.ingest.published, "rows"),
                "inject.poison": (result.injected_poison, "messages"), "settle": (settled, "messages"),
                "dlq.triage": (result.triage.total, "messages")}
    assert {n: (stages[n].rows, stages[n].unit) for n in expected} == expected
    table = render_text(result).split("STAGES", 1)[1]
    settle_line = next(line for line in table.splitlines() if line.strip().startswith("settle "))
    assert f"{settled:,} messages" in settle_line and "messages/s" in settle_line, table
    html = (result.out / "report.html").read_text()
    assert f"({settled:,} messages)" in html and f"({result.ingest.published:,} rows)" in html
    said = summary(result.settle, queue=result.queue, timeout=300)
    assert said.startswith(f"{settled:,} messages settled in "), said
    assert f"{stats.messages:,} deliveries handled: {stats.messages - settled:,} of them" in said


def test_the_demo_keeps_the_quick_jit_for_short_runs_only() -> None:
    """C1 alone suits a short demo; a million rows run long enough for C2 to repay its compiling,
    so they keep the session's own JIT settings."""
    from babelq.pipelines.demo import QUICK_JIT_BELOW, demo_spark_conf
    from babelq.spark.session import _settings

    quick = demo_spark_conf(100_000)["spark.driver.extraJavaOptions"].split()
    assert "-XX:TieredStopAtLevel=1" in quick and "-XX:-DontCompileHugeMethods" in quick
    assert demo_spark_conf(100_000)["spark.sql.adaptive.enabled"] == "false"
    assert demo_spark_conf(QUICK_JIT_BELOW - 1) == demo_spark_conf(100_000)
    assert demo_spark_conf(1_000_000) == {}
    _, settings = _settings("local[2]", demo_spark_conf(1_000_000))
    assert "TieredStopAtLevel" not in settings["spark.driver.extraJavaOptions"]
    assert "-XX:-DontCompileHugeMethods" in settings["spark.driver.extraJavaOptions"]
    # both keep the driver's heap from growing towards spark.driver.memory
    assert "-XX:GCTimeRatio=4" in quick
    assert "-XX:GCTimeRatio=4" in settings["spark.driver.extraJavaOptions"].split()

