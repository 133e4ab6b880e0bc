"""Reading a bulk file into Spark and writing its rejected rows aside: what every producer of
bulk files shares (``babelq ingest``'s payments, ``babelq publish``'s any data).

CSV is read per RFC 4180, every column as text: a quoted field may hold commas, line breaks and
doubled quotes (``""``). A record with more or fewer fields than the header is not cut or padded
into a row: its text lands in the column :data:`CSV_RECORD` (null for every other record), and
:func:`with_record_errors` later says which line it starts on. Rejected rows are written as
Parquet or as RFC 4180 CSV.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from babelq.errors import ConfigurationError
from babelq.pipelines.csv_layout import csv_layout, field_count, wrong_field_counts

#: the column the CSV reader fills with a record's own text when its field count is not the
#: header's (Spark's ``columnNameOfCorruptRecord``); the producers name it ``csv_record``
CSV_RECORD = "_csv_record"
#: the reason of a CSV record with more or fewer fields than the header
FIELD_COUNT_MISMATCH = "field_count_mismatch"

_PLAIN_HEADER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def local_csv_header(path: str) -> list[str] | None:
    """The column names of a local CSV file, when reading them ourselves gives what Spark would
    (plain, unique names; no byte-order mark); ``None`` means "let Spark read the header"."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(65_536)
    except OSError:
        return None
    if first.startswith(b"\xef\xbb\xbf") or not first.endswith(b"\n"):
        return None
    try:
        names = next(csv.reader([first.decode("utf-8").rstrip("\r\n")]))
    except (UnicodeDecodeError, csv.Error, StopIteration):
        return None
    if not names or len(set(names)) != len(names) or not all(_PLAIN_HEADER.fullmatch(n) for n in names):
        return None
    return names


def read_csv(spark: Any, source: str | Path) -> Any:
    """A CSV file as a DataFrame of string columns named by its header, plus :data:`CSV_RECORD`
    unless every record is known to have the header's field count.

    For a local file the header is read here (sparing Spark a job that reads the first line), the
    file is read whole (``multiLine``, one task) only when a quoted field in it spans lines, and
    the :data:`CSV_RECORD` column is left out when :func:`~babelq.pipelines.csv_layout.csv_layout`
    saw that every line has the header's field count; a file that is not local is always read
    whole and checked, since nobody looked.
    """
    from pyspark.sql.types import StringType, StructField, StructType

    path = str(source)
    layout = csv_layout(path)
    reader = (spark.read.option("header", True).option("mode", "PERMISSIVE").option("escape", '"')
              .option("multiLine", layout is None or layout.quoted_line_breaks))
    names = local_csv_header(path)
    if names is None:
        names = list(reader.option("inferSchema", False).csv(path).columns)
    if CSV_RECORD in names:
        raise ConfigurationError(f"{source}: the column name {CSV_RECORD} is reserved for babelq's own use")
    if layout is not None and layout.fields_agree and len(names) == layout.header_fields:
        # the scan saw every record's field count: Spark is spared keeping each record's text
        return reader.schema(StructType([StructField(n, StringType()) for n in names])).csv(path)
    schema = StructType([StructField(n, StringType()) for n in [*names, CSV_RECORD]])
    return reader.option("columnNameOfCorruptRecord", CSV_RECORD).schema(schema).csv(path)


def header_fields(bulk: Any) -> int:
    """How many fields the header of ``bulk`` (:func:`read_csv`) names."""
    return sum(c != CSV_RECORD for c in bulk.columns)


def with_record_errors(spark: Any, rejects: Any, source: str | Path, header: int, misshapen: int) -> Any:
    """``rejects`` (with ``row_no`` and ``csv_record``) plus ``record_error``: for each of its
    ``misshapen`` records of the wrong field count, ``line 7: 9 fields, the header has 6`` (null
    for the other rejects).

    Spark flags such a record but does not say where it is, so the few it flagged are found here
    by reading the local file once more, in the same order; where that cannot be done (a file
    that is not local, or whose records this reading does not pair one to one with Spark's) the
    error names the field count without the line."""
    from pyspark.sql import functions as sf
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    if not misshapen:
        return rejects.withColumn("record_error", sf.lit(None).cast("string"))
    flagged = [(int(r["row_no"]), field_count(r["csv_record"])) for r in rejects.filter(
        sf.col("csv_record").isNotNull()).select("row_no", "csv_record").orderBy("row_no").collect()]
    found: list[tuple[int, int]] = []
    if Path(source).is_file():
        try:
            found = wrong_field_counts(source, header)
        except (OSError, csv.Error):
            found = []
    paired = [n for _, n in found] == [n for _, n in flagged]
    errors = [
        (row_no, (f"line {found[i][0]}: " if paired else "") + f"{n} fields, the header has {header}")
        for i, (row_no, n) in enumerate(flagged)
    ]
    schema = StructType([StructField("row_no", LongType()), StructField("record_error", StringType())])
    joined = rejects.join(sf.broadcast(spark.createDataFrame(errors, schema)), "row_no", "left")
    return joined.select(*rejects.columns, "record_error")


def write_rejects(rejects: Any, path: str, fmt: str, drop: Sequence[str] = ()) -> None:
    """Write ``rejects`` (with a ``reasons`` array) to ``path`` as ``fmt`` (``parquet`` or ``csv``):
    ``reasons`` ``;``-joined, ``reject_reason`` the first of them, the columns ``drop`` left out."""
    from pyspark.sql import functions as sf

    out = rejects.withColumn("reject_reason", sf.get("reasons", 0)).drop(*drop)
    out = out.withColumn("reasons", sf.concat_ws(";", "reasons"))
    writer = out.coalesce(1).write.mode("overwrite")
    if fmt == "csv":
        # RFC 4180 as the input: a quote doubled, where Spark's default would put a backslash
        writer.option("header", True).option("escape", '"').csv(path)
    else:
        writer.parquet(path)


#: what a CSV header check is given: the column names and the file
HeaderCheck = Callable[[list[str], Path], None]


def check_source(
    source: str | Path, *, what: str = "a bulk file", csv_file: bool | None = None,
    header: HeaderCheck | None = None,
) -> Path:
    """``source`` as a path, or a one-line ConfigurationError saying what is wrong with it.

    ``what`` names the file in the messages (``a bulk payments file``). A CSV file (``csv_file``;
    None: any file not named ``.parquet``) is refused when it is empty or not UTF-8 text, and its
    header, when it is plain enough to read here, is given to ``header`` (Spark decides the rest)."""
    path = Path(source)
    if not path.exists():
        raise ConfigurationError(f"{source}: no such file or directory")
    if path.is_dir():
        if not any(path.rglob("*.parquet")):
            raise ConfigurationError(
                f"{source}: is a directory without .parquet files; pass a file or a Parquet dataset "
                "directory")
    elif not os.access(path, os.R_OK):
        raise ConfigurationError(f"{source}: not readable (permission denied)")
    elif csv_file or (csv_file is None and path.suffix.lower() != ".parquet"):
        _check_text_head(path, what)
        names = local_csv_header(str(path))
        if names is not None and header is not None:
            header(names, path)
    return path


def _check_text_head(path: Path, what: str) -> None:
    """Refuse, before Spark starts, a text file that is empty or not UTF-8."""
    with open(path, "rb") as fh:
        head = fh.read(65_536)
    if not head.strip():
        raise ConfigurationError(f"{path}: is empty; {what} needs a header row and rows")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not merely a character cut at the end of the sample
            raise ConfigurationError(
                f"{path}: is not UTF-8 text (byte 0x{head[exc.start]:02x} at offset {exc.start}); "
                f"{what} is UTF-8 text or Parquet") from None
