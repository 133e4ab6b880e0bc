"""The ``babelq`` data source class Spark instantiates: it parses options and hands out readers/writers."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from babelq.spark.datasource.batch_reader import BabelqBatchReader
from babelq.spark.datasource.options import SourceOptions
from babelq.spark.datasource.rows import READ_SCHEMA
from babelq.spark.datasource.stream_reader import stream_reader
from babelq.spark.datasource.writer import BabelqStreamWriter, BabelqWriter, check_write_schema

NAME = "babelq"


class BabelqDataSource(DataSource):
    """``format("babelq")``: envelopes on a broker queue as a DataFrame, and back."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return READ_SCHEMA

    def _options(self, *, need_queue: bool = True) -> SourceOptions:
        opts: Any = self.options
        return SourceOptions.parse(dict(opts), need_queue=need_queue)

    def reader(self, schema: StructType) -> DataSourceReader:
        return BabelqBatchReader(self._options())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return stream_reader(self._options())

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = self._options(need_queue=False)
        check_write_schema(schema.fieldNames(), options)
        return BabelqWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        options = self._options(need_queue=False)
        check_write_schema(schema.fieldNames(), options)
        return BabelqStreamWriter(options)
