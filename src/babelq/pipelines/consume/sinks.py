"""``--sink`` to a sink: an SQL database (:mod:`~babelq.pipelines.consume.sink`) or a directory of
Parquet/ORC tables (:mod:`~babelq.pipelines.consume.files`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from babelq.pipelines.consume.files import files_target, open_files_sink
from babelq.pipelines.consume.sink import DEFAULT_PREFIX, Sink, open_sql_sink

if TYPE_CHECKING:
    from babelq.pipelines.consume.api import Pipeline


def sink_prefix(pipeline: Pipeline) -> str:
    """The prefix of babelq's tables in ``pipeline``'s sink: its own, else ``babelq_``."""
    return pipeline.prefix if pipeline.prefix is not None else DEFAULT_PREFIX


def open_sink(target: str | Path, *, prefix: str = DEFAULT_PREFIX) -> Sink:
    """A sink from ``sqlite:///path`` (or a file path), a ``postgresql://`` URL, or a files sink
    (``parquet:///dir``, ``orc:///dir``)."""
    text = str(target)
    if files_target(text) is not None:
        return open_files_sink(text, prefix=prefix)
    return open_sql_sink(text, prefix=prefix)
