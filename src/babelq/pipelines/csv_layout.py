"""A local CSV file's shape, read here before (or after) Spark reads it, per RFC 4180.

:func:`csv_layout` counts the records after the header and says whether any quoted field holds a
line break, in one pass at C speed (no Python per row): Spark's CSV reader splits a file into
parallel tasks at line breaks, which cuts such a record in two, so only a file that has one is
read whole (``multiLine``). :func:`wrong_field_counts` finds the records whose field count is not
the header's, with the line each starts on; Spark flags such records but cannot say where they
are, so this runs only when it flagged some.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

#: every byte except the quote and the line feed: what :func:`csv_layout` throws away
_NOT_MARKS = bytes(b for b in range(256) if b not in b'"\n')


@dataclass(frozen=True, slots=True)
class CsvLayout:
    """What :func:`csv_layout` found in a CSV file."""

    #: records after the header; a blank line counts as one, though Spark skips it
    records: int
    #: some quoted field spans lines, so the file must be read whole, not split at line breaks
    quoted_line_breaks: bool


def csv_layout(source: str | Path) -> CsvLayout | None:
    """The layout of the local CSV file ``source``; None when it is not a readable local file."""
    path = Path(source)
    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    if not path.is_file():
        return None
    try:
        return _layout(str(path), st.st_size, st.st_mtime_ns)
    except OSError:
        return None


@lru_cache(maxsize=4)  # ingest asks twice (the progress total, the reader); a changed file is asked anew
def _layout(path: str, size: int, mtime_ns: int) -> CsvLayout:
    del size, mtime_ns  # the cache key only
    breaks = 0  # line feeds outside quotes
    quoted = False
    inside = False  # the previous chunk ended inside a quoted field
    last = b"\n"
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            last = chunk[-1:]
            # Only the quotes and line feeds matter, and of a run of quotes on one line only its
            # parity does: a doubled quote is a quote inside a field, two fields' quotes cancel out.
            marks = chunk.translate(None, _NOT_MARKS).replace(b'""', b"")
            if inside:
                marks = b'"' + marks
            if b'"' not in marks:
                breaks += len(marks)
                continue
            parts = marks.split(b'"')  # the odd parts lie between an opening and a closing quote
            breaks += sum(len(p) for p in parts[0::2])
            quoted = quoted or any(parts[1::2])
            inside = len(parts) % 2 == 0
    # the header's own line break, and the last record's when the file does not end with one
    return CsvLayout(max(0, breaks + (last != b"\n") - 1), quoted)


def field_count(record: str) -> int:
    """How many fields the CSV text of one record has."""
    row = next(csv.reader(io.StringIO(record, newline="")), [])
    return len(row)


def wrong_field_counts(source: str | Path, expected: int) -> list[tuple[int, int]]:
    """(line it starts on, its field count) of each record after the header of the local CSV file
    ``source`` whose field count is not ``expected``, in file order (blank lines are no records)."""
    found: list[tuple[int, int]] = []
    with open(source, newline="", encoding="utf-8-sig", errors="replace") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        start = reader.line_num + 1
        for row in reader:
            blank = len(row) <= 1 and not "".join(row).strip()
            if not blank and len(row) != expected:
                found.append((start, len(row)))
            start = reader.line_num + 1
    return found

