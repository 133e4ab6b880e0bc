"""Comments and docstrings under ``src/`` and ``examples/`` say why, not what a run measured.

A comment keeps the decision and its reason ("C2 compiles Spark's generated code at a CPU cost a
short run never earns back"); the figures behind it, with their date, machine and baseline, go
to ``bench/RESULTS.md``, and the story of how the code got there stays in git. A timing in a
comment cannot be checked, goes stale with the next change and means nothing on another machine.

What is flagged, in the text of one comment block or docstring (line breaks do not hide a
phrase), is narrow on purpose, so that what a comment legitimately says stays allowed (a default
"every 10 s", a limit "at most 100 ms", "the depth is measured on its bytes", "a key is used to
sign", a format example in a docstring):

* a measurement compared with another figure: ``21-24 s ... against 27-29 s``,
  ``1.4 us instead of 25 us``, ``185k -> 280k rows/s``, ``fell from 25 s to 13 s``;
* a ratio of change: ``about 25% slower``, ``2x faster``;
* a figure a run produced: ``took 17.0-18.4 s``, ``peaked at 1,121 MB``, ``ran 20.7k messages/s``,
  ``three runs each``;
* a lab-book label: ``measured: ...``, ``measured on the development machine``;
* history: ``they used to carry a copy each``, ``Before, any key ...`` (a passive "used to" follows
  a form of "be": "the port that declares", not "the port used to declare");
* an issue reference: ``issue 10``.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT

_NUM = r"\d[\d,]*(?:\.\d+)?"
_RANGE = rf"{_NUM}(?:\s?(?:-|–|to)\s?{_NUM})?"
_UNIT = (r"(?:(?:ms|µs|us|ns|s|sec|seconds|min|minutes|h|[KMGT]i?B|kB)(?![\w/])|%|x(?!\w)|×"
         r"|k?\s?(?:rows|msgs?|messages)?/s(?!\w))")
#: a figure with a unit of time, memory, ratio or rate: ``21-24 s``, ``1,121 MB``, ``20.7k messages/s``
MEASURE = rf"(?<![\w.]){_RANGE}\s?k?\s?{_UNIT}"

PATTERNS: dict[str, re.Pattern[str]] = {
    "a measurement compared with another": re.compile(
        rf"{MEASURE}[^.;:]{{0,60}}?\b(?:against|instead of|vs\.?|versus|compared (?:with|to))\s+"
        rf"(?:about\s+|some\s+|~)?{_NUM}"
        rf"|(?<![\w.]){_RANGE}\s?k?\s?(?:{_UNIT})?\s*(?:->|→)\s*{_NUM}\s?k?\s?{_UNIT}"
        rf"|\b(?:fell|rose|dropped|went|grew|shrank|came down)\s+from\s+(?:about\s+)?{MEASURE}\s+to\b",
        re.IGNORECASE),
    "a ratio of change": re.compile(
        rf"(?<![\w.]){_RANGE}\s?(?:%|x(?!\w)|×)\s+(?:faster|slower|shorter|longer|lower|higher|"
        r"smaller|bigger|better|worse)\b", re.IGNORECASE),
    "a figure a run produced": re.compile(
        rf"\b(?:took|peaked at|peaks at|grew by|grew to|fell to|rose to|ran|spent|saved)\s+"
        rf"(?:about\s+|some\s+|roughly\s+|~)?{MEASURE}"
        r"|\b(?:two|three|four|five|\d+) (?:runs|rounds) each\b", re.IGNORECASE),
    "a lab-book label": re.compile(
        r"\bmeasured\s*:|\b(?:measured|timed|profiled) on the development machine\b", re.IGNORECASE),
    "history": re.compile(
        r"(?<!\bis )(?<!\bare )(?<!\bwas )(?<!\bwere )(?<!\bbe )(?<!\bbeen )(?<!\bbeing )"
        r"\b[Uu]sed to\b|\bBefore(?: this| that)?, "),
    "an issue reference": re.compile(r"\bissues? (?:#|no\.? ?)?\d+\b", re.IGNORECASE),
}


def blocks(source: str) -> Iterator[tuple[int, str]]:
    """Every comment block and docstring of a module, as (first line, text).

    Comment lines that follow each other make one block (so a phrase broken over two lines is
    still found); a docstring is any string standing alone as a statement (module, class,
    function and attribute docstrings alike)."""
    run: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line, text = token.start[0], token.string.lstrip("#:").strip()
        if run and run[-1][0] != line - 1:
            yield run[0][0], "\n".join(t for _, t in run)
            run = []
        run.append((line, text))
    if run:
        yield run[0][0], "\n".join(t for _, t in run)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            yield node.value.lineno, node.value.value


def findings_in(source: str, where: str) -> list[str]:
    found = []
    for first, text in blocks(source):
        flat = re.sub(r"\s+", " ", text)
        for what, pattern in PATTERNS.items():
            for m in pattern.finditer(flat):
                line = first + text[:_offset(text, m.start())].count("\n")
                found.append(f"{where}:{line}: {what}: {m.group(0)!r}")
    return found


def _offset(text: str, flat_index: int) -> int:
    """The index in ``text`` of the character at ``flat_index`` of its whitespace-collapsed form."""
    flat = 0
    index = 0
    for piece in re.finditer(r"\s+|\S", text):
        if flat >= flat_index:
            return piece.start()
        flat += 1 if piece.group(0).isspace() else len(piece.group(0))
        index = piece.end()
    return index


def findings(root: Path) -> list[str]:
    """Every lab note in the comments and docstrings of the ``.py`` files under ``root``."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        found += findings_in(path.read_text(encoding="utf-8"), str(path.relative_to(root.parent)))
    return found


@pytest.mark.parametrize("tree", ["src", "examples"])
def test_comments_give_reasons_not_lab_notes(tree: str) -> None:
    found = findings(ROOT / tree)
    assert not found, ("a comment says why; figures go to bench/RESULTS.md and history to git:\n"
                       + "\n".join(found))


@pytest.mark.parametrize(("comment", "flagged"), [
    # lab notes, as comments carried them
    ("the 100k demo 21-24 s with C1 alone against 27-29 s,\n300k 35 s against 42 s", True),
    ("about 1.4 us instead of\n25 us per 100 KB of base64 text", True),
    ("(measured: 185k -> 280k rows/s for one column)", True),
    ("and its wall time fell from 25-31 s to 13-20 s.", True),
    ("beyond it the projection runs interpreted, about 25% slower.", True),
    ("took 17.0-18.4 s of CPU with the archive", True),
    ("the 100k demo's JVM peaked at 1,121-1,181 MB against 989-1,000 MB, same walls", True),
    ("At 100,000 a settle on 2 cores ran 20.7k messages/s, at 20,000 14.4k", True),
    ("the 1M demo took them with C1 alone, three runs each", True),
    ("(measured on the development machine: ``pyspark.worker`` from the zip)", True),
    ("They used to carry a copy each, and the copies drifted", True),
    ("Before, any key we did not know went to redis-py", True),
    ("(Before this, a body decode accepted came back)", True),
    ("after every visibility timeout (issue 10).", True),
    # what comments legitimately say
    ("accumulators with each heartbeat, every 10 s by default.", False),
    ("How long after a ``release`` the client asks for redelivery (at least 100 ms).", False),
    ("down, the next fetch waits 0.1 s, then 0.2, 0.4... up to 5 s while it stays down", False),
    ("document deeper than 254 levels is measured on its bytes.", False),
    ("timestamp set to now so the delay is measured from the parking (see docs).", False),
    ("``stage ingest.publish: 40,000 / 98,203 rows (41%), 12,300 rows/s, ETA 5 s``", False),
    ("``86,461,169 ms (24.0 h)``; below a minute only the milliseconds.", False),
    ("Delays are rounded *up* to two significant digits (never early, at most ~10% late)", False),
    ("epoch milliseconds from 2001-09-09 to 2286", False),
    ("the AMQP 0-9-1 port that declares, counts and purges; a key is used to sign", False),
    ("refused to publish <urn> to 'orders'; a tuple is made several times faster", False),
    ("Before that it imports what the daemon's workers will import", False),
    ("finished before, published again on request", False),
    ("a ``traceparent`` of ``#1`` for the first row; no longer held by this consumer", False),
])
def test_patterns(comment: str, flagged: bool) -> None:
    assert bool(findings_in(f'"""{comment}"""\n', "x.py")) is flagged, comment
    assert bool(findings_in("".join(f"# {line}\n" for line in comment.splitlines()), "x.py")) is flagged


def test_a_finding_names_the_line_of_the_phrase() -> None:
    source = 'x = 1\n\n\ndef f() -> None:\n    """Fine.\n\n    It took 3.5 s\n    on a quiet machine."""\n'
    assert findings_in(source, "m.py") == ["m.py:7: a figure a run produced: 'took 3.5 s'"]
    comment = "# first line\n# second, used to\n# be otherwise\n"
    assert findings_in(comment, "m.py") == ["m.py:2: history: 'used to'"]
