"""What a ``babelq demo`` run found: its stages' results, its checks and its reconciliation.

Apart from :mod:`babelq.pipelines.demo`, which runs the stages, because the report
(:mod:`babelq.pipelines.report`) renders a result and the demo writes the report: kept in
one module, the two would import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from babelq.pipelines.dlq import Triage
from babelq.pipelines.generator import GeneratedFile
from babelq.pipelines.ingest import IngestResult
from babelq.pipelines.settle import SettleRun
from babelq.pipelines.stages import StageClock
from babelq.pipelines.value_reconciliation import ValueLine, value_lines

#: dead-letter causes of the bodies the demo injects: not rows of the file, no value
POISON_CAUSES = ("poison", "unsupported")


@dataclass(slots=True)
class Check:
    """One check of the run: ``name`` is a sentence that holds when ``actual`` is ``expected``; a
    ``yes_no`` check counts nothing (1 is yes, 0 no)."""

    name: str
    expected: int
    actual: int
    yes_no: bool = False

    @property
    def ok(self) -> bool:
        return self.expected == self.actual

    def value(self, n: int) -> str:
        """``1,958``, or ``yes``/``no`` for a yes/no check."""
        return ("yes" if n else "no") if self.yes_no else f"{n:,}"

    def said(self) -> str:
        """``Each valid payment is posted: 1,958, as expected`` (or ``..., expected 1,960``)."""
        if self.yes_no:
            return f"{self.name}: {self.value(self.actual)}"
        found = f"{self.name.rstrip('.')}: {self.value(self.actual)}"
        return f"{found}, as expected" if self.ok else f"{found}, expected {self.value(self.expected)}"


@dataclass(frozen=True, slots=True)
class Line:
    """A line of the row reconciliation: ``level`` 0 is a total, 1 a part of it, 2 a part of a part;
    ``subtotal`` lines sum the level below them."""

    label: str
    count: int
    level: int = 0
    subtotal: bool = False


@dataclass(slots=True)
class DemoResult:
    out: Path
    broker: str
    queue: str
    generated: GeneratedFile
    ingest: IngestResult
    settle: SettleRun
    triage: Triage
    ledger_entries: int
    ledger_references: int
    doubles: list[tuple[str, int]]
    clock: StageClock
    checks: list[Check] = field(default_factory=list)
    report: Path | None = None
    seconds: float = 0.0
    ledger: str = ""  #: the ledger (redacted) and, for one the demo did not create, its tables' prefix
    started_at: float = 0.0  #: epoch seconds
    finished_at: float = 0.0  #: epoch seconds, when the reconciliation was done (before the report)
    master: str = ""  #: the Spark master the run used
    #: the ledger's own totals: currency -> (entries, sum of amount_cents)
    posted_by_currency: dict[str, tuple[int, int]] = field(default_factory=dict)
    exported: Path | None = None  #: the PNG or PDF of the report
    export_note: str = ""  #: why there is none (no Chromium, or what Chromium said)

    @property
    def balanced(self) -> bool:
        return all(c.ok for c in self.checks) and not self.doubles

    def breakdown(self) -> list[Line]:
        """Where every file row went, then where every injected poison body went."""
        by_cause = self.dlq_by_cause()
        rejected = sorted(self.ingest.rejected_by_reason.items())
        dead = sorted((c, n) for c, n in by_cause.items() if c not in POISON_CAUSES)
        lines = [Line("rows in (bulk file)", self.generated.rows)]
        lines.append(Line("rejected at ingest", sum(n for _, n in rejected), 1, True))
        lines += [Line(r, n, 2) for r, n in rejected]
        lines.append(Line("posted to the ledger", self.ledger_entries, 1))
        lines.append(Line("dead-lettered", sum(n for _, n in dead), 1, True))
        lines += [Line(c, n, 2) for c, n in dead]
        lines.append(Line("poison bodies injected", self.injected_poison))
        poison = sorted((c, n) for c, n in by_cause.items() if c in POISON_CAUSES)
        lines += [Line(f"dead-lettered: {c}", n, 1) for c, n in poison]
        return lines

    def reconciliation_lines(self) -> list[tuple[str, int]]:
        """:meth:`breakdown` as indented text labels, without its subtotals (the terminal's table)."""
        out: list[tuple[str, int]] = []
        parent = ""
        for line in self.breakdown():
            if line.subtotal:
                parent = line.label
            elif line.level == 2:
                out.append((f"  {parent}: {line.label}", line.count))
            else:
                out.append(("  " * line.level + line.label, line.count))
        return out

    def value_lines(self) -> list[ValueLine]:
        """Value per currency: file = posted + rejected + dead-lettered (poison has no value)."""
        payments = [k for k in self.triage.messages if (k[1] or k[0]) not in POISON_CAUSES]
        unvalued = sum(self.triage.unvalued[k] for k in payments)
        return value_lines(self.ingest.values, self.posted_by_currency,
                           self.triage.value_by_currency(payments), unvalued)

    @property
    def injected_poison(self) -> int:
        return max(1, self.generated.rows // 1000)

    def dlq_by_cause(self) -> dict[str, int]:
        """Failed messages per cause, each counted once (copies of one dead letter are one)."""
        out: dict[str, int] = {}
        for (reason, cause, *_), n in self.triage.messages.items():
            key = cause or reason
            out[key] = out.get(key, 0) + n
        return out
