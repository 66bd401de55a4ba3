"""The data source Spark instantiates for ``format("kafkalite")``, and :func:`register`.

Concurrency: Spark creates and calls the data source on the driver.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
)
from pyspark.sql.types import StructType

from kafkalite.spark.formats import resolve, resolve_source, value_ddl
from kafkalite.spark.options import (
    SOURCE_NAME,
    SinkOptions,
    SourceOptions,
    SparkOptionError,
    ValueFormat,
    source_schema,
)
from kafkalite.spark.reader import KafkaliteBatchReader, KafkaliteStreamReader, RejectedStreamReader
from kafkalite.spark.writer import KafkaliteBatchWriter, KafkaliteStreamWriter, SinkColumns

# --- the data source ---------------------------------------------------------------------------------


class KafkaliteDataSource(DataSource):
    """``format("kafkalite")`` for spark.read / readStream / write / writeStream."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        """The source schema. Spark calls this when a read is defined (``load()`` of read and
        readStream), so the source options are validated here, as far as they can be before
        the kind of query is known; reader() / streamReader() check the rest."""
        options = resolve_source(SourceOptions.parse(self.options, streaming=None))
        value_format = options.settings.value_format
        return source_schema(options.settings.include_headers,
                             value_ddl(value_format) if value_format is not None else None)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaliteBatchReader(resolve_source(SourceOptions.parse(self.options, streaming=False)))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            options = resolve_source(SourceOptions.parse(self.options, streaming=True))
        except SparkOptionError as error:
            # PySpark 4's stream runner hides an exception raised here behind an
            # UnboundLocalError of its own cleanup; raised from a planning call it is reported
            return RejectedStreamReader(error)
        return KafkaliteStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> KafkaliteBatchWriter:
        if overwrite:
            raise SparkOptionError("mode", "kafkalite topics are append-only: use mode(\"append\")")
        options = SinkOptions.parse(self.options, streaming=False)
        return KafkaliteBatchWriter(options, SinkColumns.check(schema, options.topic, _sink_format(options)))

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaliteStreamWriter:
        options = SinkOptions.parse(self.options, streaming=True)
        return KafkaliteStreamWriter(options, SinkColumns.check(schema, options.topic, _sink_format(options)))


def _sink_format(options: SinkOptions) -> ValueFormat | None:
    return resolve(options.value_format) if options.value_format is not None else None


def register(spark: Any) -> None:
    """Register ``format("kafkalite")`` with a SparkSession."""
