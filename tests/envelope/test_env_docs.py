"""Every Python example in docs/envelope.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "envelope.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_document_has_examples() -> None:
    assert len(EXAMPLES) >= 6


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_runs(index: int) -> None:
    exec(compile(EXAMPLES[index], f"{DOC.name}[example {index}]", "exec"), {})
