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
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO

#: every byte except the quote, the comma and the line feed: what :func:`csv_layout` throws away
_NOT_MARKS = bytes(b for b in range(256) if b not in b'",\n')


@dataclass(frozen=True, slots=True)
class CsvLayout:
    """What :func:`csv_layout` found in a CSV file."""

    #: records after the header; a blank line counts as one, though Spark skips it
    records: int
    #: some quoted field spans lines, so the file must be read whole, not split at line breaks
    quoted_line_breaks: bool
    #: every line has the header's field count, and no quoted field holds a comma or a line break
    #: (False: not known); Spark then needs no check of each record's field count
    fields_agree: bool = False
    #: the header's field count, when :attr:`fields_agree`
    header_fields: int = 0


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


def _marks(fh: BinaryIO) -> Iterator[bytes]:
    """The file's quotes, commas and line feeds, in pieces of whole lines (the last may lack its
    line feed); of everything else only the place matters, and the place is all they keep."""
    rest = b""
    while data := fh.read(1 << 20):
        marks = rest + data.translate(None, _NOT_MARKS)
        cut = marks.rfind(b"\n") + 1
        if cut:
            yield marks[:cut]
        rest = marks[cut:]
    if rest:
        yield rest


@lru_cache(maxsize=4)  # ingest asks twice (the progress total, the reader); a changed file is asked anew
def _layout(path: str, size: int, mtime_ns: int) -> CsvLayout:
    del size, mtime_ns  # the cache key only
    breaks = 0  # line feeds outside quotes
    quoted = False
    inside = False  # the previous piece ended inside a quoted field
    commas = -1  # the header's, when no comma or line feed in it is quoted
    agree = True
    with open(path, "rb") as fh:
        last = b"\n"
        for marks in _marks(fh):
            last = marks[-1:]
            if not inside and 2 * marks.count(b'""') == marks.count(b'"'):
                # each quote has the next one beside it (a field's two, or a doubled quote): no comma
                # or line feed is quoted, so the commas are the field boundaries
                flat = marks.translate(None, b'"')
                breaks += flat.count(b"\n")
                if agree:
                    if commas < 0:
                        end = flat.find(b"\n")
                        commas = end if end >= 0 else len(flat)
                    whole = flat if last == b"\n" else flat + b"\n"
                    lines = whole.count(b"\n")
                    # a match ends a line that has at least the header's commas; the total says no more
                    ends = whole.count(b"," * commas + b"\n")
                    agree = ends == lines and whole.count(b",") == lines * commas
                continue
            agree = False
            # Of a run of quotes on one line only its parity matters: a doubled quote is a quote
            # inside a field, two fields' quotes cancel out.
            runs = marks.translate(None, b",").replace(b'""', b"")
            # the odd parts lie between an opening and a closing quote
            parts = (b'"' + runs if inside else runs).split(b'"')
            breaks += sum(len(p) for p in parts[0::2])
            quoted = quoted or any(parts[1::2])
            inside = len(parts) % 2 == 0
    # the header's own line break, and the last record's when the file does not end with one
    agree = agree and commas >= 0
    return CsvLayout(max(0, breaks + (last != b"\n") - 1), quoted, agree, commas + 1 if agree else 0)


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

