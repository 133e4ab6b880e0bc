"""User pages (README.md, docs/*.md) carry no dates, commit ids, issue numbers or development history.

Those belong to the history of the code, which git keeps, and measured results go to
``bench/RESULTS.md``. A page explains behaviour; a reader who meets "issue 12" or "764372d"
cannot follow it, and a date says only how old a claim is.

The patterns are narrow on purpose, so that what a page legitimately shows stays allowed:

* a date ``YYYY-MM-DD`` anywhere on the page, code included, unless it is the start of a
  timestamp (``2026-11-23T20:40:01Z`` in a log line shown as output) or part of a longer token
  (a key id ``2026-11``, an invoice number ``INV-2025-004211``);
* outside fenced code blocks, a commit-like token: 7 to 40 hex digits with at least one digit
  and one letter, standing alone (not part of a UUID, a traceparent or a longer word);
* outside fenced code blocks, an issue reference: ``issue 12``, ``issues 10 and 11``, ``#27``
  (but not a link's anchor ``(#4-broker-bindings)`` or ``page.md#section``);
* outside fenced code blocks, phrases that tell the code's history instead of its behaviour:
  ``what was tried``, ``tried and dropped``, ``used to be`` (``used to declare``, a purpose,
  stays allowed), ``the old code``, ``before the module existed``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
DATE = re.compile(r"(?<![\w-])20\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])(?![\w-]|T\d)")
COMMIT = re.compile(r"(?<![\w.-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
HISTORY = re.compile(
    r"\bwhat (?:was|we) tried\b|\btried and dropped\b"
    r"|\bused to (?:be|have|read|say|show|print|take|run)\b"
    r"|\bthe old (?:code|heartbeat|path|version|layout|design)\b"
    r"|\bbefore the (?:module|fix|change) existed\b",
    re.IGNORECASE,
)
ISSUE = re.compile(r"\bissues? (#?\d+|nos?\.? ?\d+)\b|(?<![\w(/&#`])#\d+(?![\w-])", re.IGNORECASE)


def prose(text: str) -> list[tuple[int, str]]:
    """The page's lines outside fenced code blocks, with their line numbers (1-based)."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        opening = _FENCE.match(line)
        if fence is None:
            if opening:
                fence = opening.group(1)
            else:
                lines.append((number, line))
        elif opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence) \
                and not line.strip()[len(opening.group(1)):].strip():
            fence = None
    return lines


def findings(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    where = path.relative_to(ROOT)
    found = [f"{where}:{number}: date {m.group(0)!r}"
             for number, line in enumerate(text.splitlines(), 1) for m in DATE.finditer(line)]
    for number, line in prose(text):
        found += [f"{where}:{number}: commit id {m.group(0)!r}" for m in COMMIT.finditer(line)]
        found += [f"{where}:{number}: issue reference {m.group(0)!r}" for m in ISSUE.finditer(line)]
        found += [f"{where}:{number}: history {m.group(0)!r}" for m in HISTORY.finditer(line)]
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_has_no_dates_commits_issues_or_history(page: Path) -> None:
    found = findings(page)
    assert not found, ("history belongs to git and measurements to bench/RESULTS.md:\n"
                       + "\n".join(found))


@pytest.mark.parametrize(("line", "flagged"), [
    ("Measured on 2026-11-22 on the shared machine", True),
    ("the code of commit 764372d, when the target was set", True),
    ("`python3 dev.py bench settle --baseline 764372d`", True),
    ("so issue 12's 5x holds as a median", True),
    ("before #27 it was delivered again", True),
    ("see [standard.md §4](standard.md#4-broker-bindings) and [below](#4-limits)", False),
    ('"ts": "2026-11-23T20:40:01.123Z"', False),
    ("(tried '2026-11', '2026-05')", False),
    ("INV-2025-004211/7, trace 1669a62d-83ab-458b-a7a9-76d9c5713541", False),
    ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", False),
    ("a deadbeef value, 1234567 rows, accepted", False),
    ("the key is the row's position, `#1` for the first", False),
    ("## What was tried and dropped", True),
    ("settle used to read every body on the driver", True),
    ("excludes reserved messages, which is why the old heartbeat read 0", True),
    ("Before the module existed the two had drifted", True),
    ("the AMQP 0-9-1 port used to declare, count and purge", False),
    ("rotate to the new key; retire the old key once nothing uses it", False),
])
def test_patterns(line: str, flagged: bool) -> None:
    hit = bool(DATE.search(line) or COMMIT.search(line) or ISSUE.search(line) or HISTORY.search(line))
    assert hit is flagged, line
