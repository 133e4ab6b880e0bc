"""Helpers for the Spark tests: collected Spark values as the plain JSON values the core codec takes.

Not a conftest.py: a second ``conftest`` module would shadow the root one that tests import as
``from conftest import require_service``.
"""

from __future__ import annotations

from typing import Any


def plain(value: Any) -> Any:
    """A collected Spark value as a plain JSON value (Row -> dict in field order, lists, dicts)."""
    if hasattr(value, "asDict"):
        return {k: plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
