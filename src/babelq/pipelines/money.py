"""Amounts as a payments operator reads them: integer minor units per currency, never floats.

A bulk file, the ledger and the DLQ all carry ``amount_cents``: an integer of the currency's
minor unit. Sums stay integers (Python's are unbounded), so a reconciliation of value is exact
to the cent; only display divides by the minor unit, by integer arithmetic, with the decimals
ISO 4217 gives the currency (:func:`babelq.pipelines.currencies.minor_units`). A code that is
not ISO 4217 (a file can hold ``A$`` or ``usd``) has no known unit: its amounts are shown as the
integers written, labelled as minor units, rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from babelq.pipelines.currencies import minor_units


@dataclass(slots=True)
class Tally:
    """How many payments, and the sum of their amounts in one currency's minor units."""

    count: int = 0
    minor: int = 0

    def add(self, count: int, minor: int) -> None:
        self.count += count
        self.minor += minor

    def plus(self, *others: Tally) -> Tally:
        return Tally(self.count + sum(o.count for o in others), self.minor + sum(o.minor for o in others))


class ValueGroup(NamedTuple):
    """Rows of a bulk file that share an ingest outcome and a currency code, with their value.

    ``reason`` is the first reject reason (None: valid, published); ``currency`` the code as
    written, trimmed (``""`` when blank); ``valued`` counts the rows whose amount is an integer
    and ``minor`` sums those amounts; ``rows - valued`` rows have no integer amount."""

    reason: str | None
    currency: str
    rows: int
    valued: int
    minor: int


def format_minor(minor: int, currency: str) -> str:
    """``minor`` units of ``currency`` as a decimal with thousands separators: ``123456789`` AUD is
    ``1,234,567.89``, JPY ``123,456,789``, KWD ``123,456.789``; a non-ISO code keeps the integer."""
    decimals = minor_units(currency) or 0
    sign = "-" if minor < 0 else ""
    whole, part = divmod(abs(minor), 10**decimals)
    return f"{sign}{whole:,}" + (f".{part:0{decimals}d}" if decimals else "")


def format_money(minor: int, currency: str) -> str:
    """``AUD 1,234,567.89``; a code that is not ISO 4217 reads ``1,234 minor units (XYZ)``."""
    if minor_units(currency) is None:
        return f"{minor:,} minor units ({currency or 'no currency'})"
    return f"{currency} {format_minor(minor, currency)}"


def parse_minor(text: str, currency: str) -> int:
    """The inverse of :func:`format_minor` (what a reader of the report checks a figure with)."""
    decimals = minor_units(currency) or 0
    digits = text.strip().replace(",", "")
    negative = digits.startswith("-")
    whole, _, part = digits.lstrip("-").partition(".")
    if len(part) != decimals or not whole.isdigit() or (part and not part.isdigit()):
        raise ValueError(f"{text!r} is not an amount of {currency} ({decimals} decimals)")
    value: int = int(whole) * 10**decimals + (int(part) if part else 0)
    return -value if negative else value
