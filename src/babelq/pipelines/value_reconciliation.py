"""Reconciliation by value: per currency, the bulk file's total = posted + rejected + dead-lettered.

Counting rows proves every payment went somewhere; an operator also needs the money to add
up, currency by currency, since a payment posted with the wrong amount or currency balances the
counts and not the books. Each side comes from where it ends up, never from a recount of what
the pipeline meant to do:

* **in the file**: every row of the bulk file whose ``amount_cents`` is an integer (ingest's own
  rule), by the currency code as written; computed in the Spark job ingest counts rows with;
* **rejected at ingest**: the same, for the rows ingest rejected;
* **posted**: the ledger's sums (:meth:`~babelq.pipelines.ledger.Ledger.totals_by_currency`);
* **dead-lettered**: the payments on the DLQ (:class:`~babelq.pipelines.dlq.Triage`, each
  ``meta.id`` once).

Rows without an integer amount (``12.50``, ``1e3``, blank) have no value to add: they are one
line of their own, counted (ingest rejects them all), so every currency's sums stay exact. So
are dead letters of payments whose data carries no readable amount. The rows whose integer amount
ingest refused as out of range are a line of their own per currency, and a code that is not ISO
4217 (``A$``, ``usd``) is one too; its amounts are the integers written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from babelq.pipelines.currencies import minor_units
from babelq.pipelines.money import Tally, ValueGroup

#: rows whose integer amount ingest refused as out of range: a line of their own per currency, since
#: their sums (often absurd) would swamp the currency's real total
OUT_OF_RANGE = "amount_out_of_range"


@dataclass(slots=True)
class ValueLine:
    """One currency (or, with ``currency`` None, the rows without an integer amount); ``part``
    :data:`OUT_OF_RANGE` holds that currency's rows whose amount was out of range."""

    currency: str | None
    file: Tally = field(default_factory=Tally)
    posted: Tally = field(default_factory=Tally)
    rejected: Tally = field(default_factory=Tally)
    dead: Tally = field(default_factory=Tally)
    part: str = ""

    @property
    def accounted(self) -> Tally:
        return self.posted.plus(self.rejected, self.dead)

    @property
    def difference(self) -> Tally:
        """accounted - file: zero when the line reconciles."""
        got = self.accounted
        return Tally(got.count - self.file.count, got.minor - self.file.minor)

    @property
    def ok(self) -> bool:
        return self.accounted == self.file

    @property
    def iso(self) -> bool:
        return self.currency is not None and minor_units(self.currency) is not None


def value_lines(
    groups: Sequence[ValueGroup],
    posted: Mapping[str, tuple[int, int]],
    dead: Mapping[str, Tally],
    dead_without_amount: int = 0,
) -> list[ValueLine]:
    """The lines, ISO currencies first (most payments in the file first), then other codes, then
    the line of rows without an integer amount."""
    lines: dict[tuple[str | None, str], ValueLine] = {}

    def line(currency: str | None, part: str = "") -> ValueLine:
        return lines.setdefault((currency, part), ValueLine(currency, part=part))

    for g in groups:
        if g.valued:
            valued = line(g.currency, OUT_OF_RANGE if g.reason == OUT_OF_RANGE else "")
            valued.file.add(g.valued, g.minor)
            if g.reason is not None:
                valued.rejected.add(g.valued, g.minor)
        if g.rows > g.valued:
            line(None).file.add(g.rows - g.valued, 0)
            if g.reason is not None:
                line(None).rejected.add(g.rows - g.valued, 0)
    for currency, (n, minor) in posted.items():
        line(currency).posted.add(n, minor)
    for currency, tally in dead.items():
        line(currency).dead.add(tally.count, tally.minor)
    if dead_without_amount:
        line(None).dead.add(dead_without_amount, 0)

    def order(v: ValueLine) -> tuple[int, int, str]:
        if v.currency is None:
            return (3, 0, "")
        if v.part:
            return (2, -v.file.count, v.currency)
        return (0 if v.iso else 1, -v.file.count, v.currency)

    return sorted(lines.values(), key=order)
