"""The result of a suite run: named checks grouped by manifest block."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Check:
    """One verified statement. ``id`` (``block/name``) is unique within a run."""

    block: str
    name: str
    passed: bool
    message: str = ""

    @property
    def id(self) -> str:
        return f"{self.block}/{self.name}"


@dataclass(slots=True)
class SuiteResult:
    """Every check of one suite run, in the order they ran."""

    path: Path
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when at least one check ran and none failed."""
        return bool(self.checks) and all(check.passed for check in self.checks)

    def failures(self) -> list[Check]:
        return [check for check in self.checks if not check.passed]

    def blocks(self) -> dict[str, tuple[int, int]]:
        """block -> (passed, failed), in first-seen order."""
        table: dict[str, list[int]] = {}
        for check in self.checks:
            counts = table.setdefault(check.block, [0, 0])
            counts[0 if check.passed else 1] += 1
        return {block: (counts[0], counts[1]) for block, counts in table.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "passed": self.passed,
            "blocks": {name: {"passed": p, "failed": f} for name, (p, f) in self.blocks().items()},
            "checks": [
                {"id": c.id, "block": c.block, "name": c.name, "passed": c.passed, "message": c.message}
                for c in self.checks
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=2)


class Recorder:
    """Collects the checks of one block."""

    def __init__(self, result: SuiteResult, block: str) -> None:
        self._result = result
        self.block = block

    def check(self, name: str, passed: bool, message: str = "") -> bool:
        self._result.checks.append(Check(self.block, name, bool(passed), message))
        return bool(passed)

    def equal(self, name: str, actual: Any, expected: Any) -> bool:
        """Pass when ``actual`` equals ``expected`` as JSON, types included (1 is not "1" nor true)."""
        same = canonical(actual) == canonical(expected)
        message = "" if same else f"expected {canonical(expected)}, got {canonical(actual)}"
        return self.check(name, same, message)


def canonical(value: Any) -> str:
    """A type-strict, order-insensitive text form for comparing JSON-like values."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
