"""Writing: sink columns to producer records, and the batch and streaming writers.

Batch writes are at-least-once; streaming writes are exactly-once per micro-batch through the
sink journal (:mod:`kafkalite.spark.journal`). Concurrency: ``write`` runs on executors from
pickled copies (one producer per task); ``commit``/``abort`` on the driver.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, ShortType, StringType, StructType

from kafkalite.errors import KafkaliteError
from kafkalite.spark.clients import SinkRow, open_producer
from kafkalite.spark.formats import encode_column
from kafkalite.spark.journal import SinkJournal, WrittenRecords
from kafkalite.spark.options import SinkOptions, SparkOptionError, ValueFormat
from kafkalite.spark.pauses import pause_for_tests

# One logger for the whole data source, as when it was one module: log settings keep working.
log = logging.getLogger("kafkalite.spark")


_BATCH_ID_PROPERTY = "streaming.sql.batchId"
_QUERY_ID_PROPERTY = "sql.streaming.queryId"


# --- writing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SinkColumns:
    """Which sink columns the written DataFrame has, and whether key/value are strings."""

    value_is_string: bool
    key: bool = False
    key_is_string: bool = False
    topic: bool = False
    partition: bool = False
    headers: bool = False
    #: The resolved format of a typed value column (valueFormat avro or json).
    value_format: ValueFormat | None = None

    @classmethod
    def check(cls, schema: StructType, topic_option: str | None,
              value_format: ValueFormat | None = None) -> SinkColumns:
        fields = {item.name.lower(): item.dataType for item in schema.fields}

        def text_or_binary(name: str) -> bool:
            data_type = fields[name]
            if isinstance(data_type, (StringType, BinaryType)):
                return isinstance(data_type, StringType)
            raise SparkOptionError(name, f"the {name} column must be string or binary, got {data_type.simpleString()}")

        if "value" not in fields:
            raise SparkOptionError("value", "the DataFrame written to kafkalite needs a value column "
                                            "(string or binary)")
        value_is_string = text_or_binary("value") if value_format is None else False
        key = "key" in fields
        key_is_string = text_or_binary("key") if key else False
        topic = "topic" in fields
        if topic and not isinstance(fields["topic"], StringType):
            raise SparkOptionError("topic", f"the topic column must be a string, got {fields['topic'].simpleString()}")
        if not topic and not topic_option:
            raise SparkOptionError("topic", "set the topic option or give the DataFrame a topic column")
        partition = "partition" in fields
        if partition and not isinstance(fields["partition"], (IntegerType, LongType, ShortType)):
            raise SparkOptionError("partition", "the partition column must be an integer, got "
                                                f"{fields['partition'].simpleString()}")
        headers = "headers" in fields
        if headers:
            data_type = fields["headers"]
            element = data_type.elementType if isinstance(data_type, ArrayType) else None
            ok = isinstance(element, StructType)
            if isinstance(element, StructType):
                inner = {item.name: item.dataType for item in element.fields}
                ok = set(inner) == {"key", "value"} and isinstance(inner["key"], StringType) \
                    and isinstance(inner["value"], BinaryType)
            if not ok:
                raise SparkOptionError("headers", "the headers column must be array<struct<key: string, "
                                                  f"value: binary>>, got {data_type.simpleString()}")
        return cls(value_is_string, key, key_is_string, topic and not topic_option, partition, headers, value_format)




def _binary_list(column: pa.Array, is_string: bool) -> list[bytes | None]:
    if is_string:
        column = column.cast(pa.binary())
    values: list[bytes | None] = column.to_pylist()
    return values


def arrow_rows(batch: pa.RecordBatch, columns: SinkColumns, topic_option: str | None) -> list[SinkRow]:
    """(topic, partition, key, value, headers) per row of an input Arrow batch."""
    names = {name.lower(): index for index, name in enumerate(batch.schema.names)}
    count = batch.num_rows
    if columns.value_format is not None:
        values = encode_column(batch.column(names["value"]), columns.value_format)
    else:
        values = _binary_list(batch.column(names["value"]), columns.value_is_string)
    keys = _binary_list(batch.column(names["key"]), columns.key_is_string) if columns.key else [None] * count
    if columns.topic:
        topics = batch.column(names["topic"]).to_pylist()
        for index, topic in enumerate(topics):
            if not topic:
                raise SparkOptionError("topic", f"row {index} of the batch has no topic (set the topic option or fill "
                                                f"the topic column)")
    else:
        topics = [topic_option] * count
    partitions = batch.column(names["partition"]).to_pylist() if columns.partition else [None] * count
    if columns.headers:
        headers = [tuple((item["key"], item["value"]) for item in row) if row else ()
                   for row in batch.column(names["headers"]).to_pylist()]
    else:
        headers = [()] * count
    return list(zip(topics, partitions, keys, values, headers))


def send_rows(producer: Any, rows: Sequence[SinkRow]) -> list[Any]:
    """Send rows through the bulk path, grouped by (topic, partition); returns the futures."""
    groups: dict[tuple[str, int | None], list[SinkRow]] = {}
    for row in rows:
        groups.setdefault((row[0], row[1]), []).append(row)
    futures = []
    for (topic, partition), chosen in groups.items():
        keys = [row[2] for row in chosen]
        headers = [list(row[4]) for row in chosen]
        futures.append(producer.send_batch(
            topic, [row[3] for row in chosen], keys=keys if any(key is not None for key in keys) else None,
            partition=partition, headers=headers if any(headers) else None))
    return futures


def _wait(futures: Iterable[Any]) -> int:
    written = 0
    for future in futures:
        written += sum(item.record_count for item in future.get())
    return written


@dataclass
class WriteResult(WriterCommitMessage):
    """What one write task reports to the driver."""

    records: int = 0
    skipped: int = 0
    sink_id: str | None = None
    batch_id: int | None = None
    partition_id: int | None = None
    attempt_key: str | None = None
    note: str = ""


class KafkaliteBatchWriter(DataSourceArrowWriter):
    """Batch writes (at-least-once). write() runs on executors; commit/abort on the driver."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        producer = open_producer(self.options, "kafkalite-spark-writer")
        written = 0
        try:
            for batch in iterator:
                rows = arrow_rows(batch, self.columns, self.options.topic)
                written += _wait(send_rows(producer, rows))
        finally:
            producer.close()
        return WriteResult(records=written)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(message.records for message in messages if isinstance(message, WriteResult))
        log.info("kafkalite batch write committed: %d records", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(message.records for message in messages if isinstance(message, WriteResult))
        log.warning("kafkalite batch write aborted after %d records were written (they stay in the topics)", total)


class KafkaliteStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writes, exactly-once per micro-batch through the sink journal (module
    docstring). write() runs on executors; commit()/abort() on the driver, each in a new
    process."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        if not self.options.exactly_once:
            producer = open_producer(self.options, "kafkalite-spark-writer")
            written = 0
            try:
                for batch in iterator:
                    written += _wait(send_rows(producer, arrow_rows(batch, self.columns, self.options.topic)))
            finally:
                producer.close()
            return WriteResult(records=written)
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_text = context.getLocalProperty(_BATCH_ID_PROPERTY) if context is not None else None
        sink_id = context.getLocalProperty(_QUERY_ID_PROPERTY) if context is not None else None
        if context is None or batch_text is None or not sink_id:
            raise KafkaliteError("exactly-once writes need Spark's micro-batch id and query id on the task "
                                 "(set exactlyOnce to false to write without them)")
        batch_id = int(batch_text)
        partition_id = context.partitionId()
        journal = SinkJournal(self.options, sink_id)
        state = journal.read()
        if batch_id <= state.committed_batch:
            skipped = sum(batch.num_rows for batch in iterator)
            return WriteResult(skipped=skipped, sink_id=sink_id, batch_id=batch_id, partition_id=partition_id,
                               note=f"batch {batch_id} was committed before")
        earlier = state.attempts.get((batch_id, partition_id), [])
        if any(item.key in state.confirmed for item in earlier):
            skipped = sum(batch.num_rows for batch in iterator)
            return WriteResult(skipped=skipped, sink_id=sink_id, batch_id=batch_id, partition_id=partition_id,
                               note="an earlier attempt of this task succeeded")
        written_before = WrittenRecords(self.options, earlier) if earlier else None
        producer = open_producer(self.options, f"kafkalite-spark-sink-{batch_id}-{partition_id}")
        started_ms = int(time.time() * 1000)
        key = journal.attempt_key(batch_id, partition_id, uuid.uuid4().hex)
        written = dropped = 0
        try:
            # the attempt record is this producer's first record: its batch carries the producer id
            journal.record_attempt(producer, key, batch_id, partition_id, started_ms, done=False)
            pause_for_tests("task-started")
            for index, batch in enumerate(iterator):
                rows = arrow_rows(batch, self.columns, self.options.topic)
                if written_before is not None:
                    rows, removed = written_before.remove_written(rows)
                    dropped += removed
                written += _wait(send_rows(producer, rows))
                if index == 0:
                    pause_for_tests("mid-write")
            journal.record_attempt(producer, key, batch_id, partition_id, started_ms, done=True, records=written)
            pause_for_tests("task-done")
        finally:
            producer.close()
        return WriteResult(records=written, skipped=dropped, sink_id=sink_id, batch_id=batch_id,
                           partition_id=partition_id, attempt_key=key)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        results = [message for message in messages if isinstance(message, WriteResult)]
        sink_ids = {message.sink_id for message in results if message.sink_id}
        if not self.options.exactly_once or not sink_ids:
            return
        for sink_id in sink_ids:
            SinkJournal(self.options, sink_id).commit_batch(batchId)
        log.info("kafkalite sink committed batch %d: %d records written, %d skipped", batchId,
                 sum(message.records for message in results), sum(message.skipped for message in results))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("kafkalite sink batch %d aborted; a replay of it writes only what is missing", batchId)
        results = [message for message in messages if isinstance(message, WriteResult)]
        if not self.options.exactly_once:
            return
        by_sink: dict[str, list[str]] = {}
        for message in results:
            if message.sink_id and message.attempt_key:
                by_sink.setdefault(message.sink_id, []).append(message.attempt_key)
        for sink_id, keys in by_sink.items():
            try:
                SinkJournal(self.options, sink_id).confirm_attempts(batchId, keys)
            except KafkaliteError as exc:  # the replay then scans for these tasks' rows instead
                log.warning("kafkalite sink batch %d: cannot record the tasks that succeeded: %s", batchId, exc)
