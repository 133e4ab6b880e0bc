"""A deterministic stand-in for core banking, so failures are reproducible in tests and the demo.

Real core banking times out now and then and rejects closed accounts. The simulator decides
from the creditor account alone: an account ending in :data:`TRANSIENT_SUFFIX` fails its
first ``transient_failures`` attempts and then succeeds; one ending in :data:`CLOSED_SUFFIX`
always fails, so it exhausts its retries and is dead-lettered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TRANSIENT_SUFFIX = "0000"
CLOSED_SUFFIX = "9999"


class CoreBankingError(Exception):
    """A transfer core banking did not accept (the message is retried, then dead-lettered)."""


@dataclass(frozen=True, slots=True)
class CoreBankingSimulator:
    transient_failures: int = 1

    def failure(self, data: Mapping[str, Any], attempts: int) -> str | None:
        """Why core banking refuses this transfer at this attempt, or ``None`` when it accepts it."""
        account = str(data.get("creditor_account", ""))
        if account.endswith(CLOSED_SUFFIX):
            return "core banking: creditor account closed (simulated)"
        if account.endswith(TRANSIENT_SUFFIX) and attempts < self.transient_failures:
            return "core banking: timeout (simulated transient failure)"
        return None
