"""The ``kafkalite`` PySpark data source: batch and Structured Streaming reads and writes.

After :func:`register` (or auto-discovery of the ``pyspark_kafkalite`` shim), Spark reads and
writes kafkalite topics with the options and schema of Spark's own Kafka source::

    register(spark)
    df = (spark.read.format("kafkalite")
          .option("kafkalite.bootstrap.servers", "127.0.0.1:9092")     # or kafka.bootstrap.servers
          .option("subscribe", "orders").load())
    df.selectExpr("key", "value").write.format("kafkalite") \\
        .option("kafkalite.bootstrap.servers", "127.0.0.1:9092").option("topic", "copy") \\
        .mode("append").save()

Source schema: ``key binary, value binary, topic string, partition int, offset long,
timestamp timestamp, timestampType int`` and, with ``includeHeaders``, ``headers
array<struct<key string, value binary>>`` (null for a record without headers). Options (names
are case-insensitive, as in Spark): one of ``subscribe`` / ``subscribePattern`` / ``assign``;
``startingOffsets``, ``endingOffsets`` (batch), ``startingTimestamp``,
``startingOffsetsByTimestamp``, ``startingOffsetsByTimestampStrategy``, ``endingTimestamp``,
``endingOffsetsByTimestamp`` (batch), ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``,
``maxTriggerDelay``, ``failOnDataLoss``, ``includeHeaders``, ``minPartitions``,
``maxRecordsPerPartition``, ``kafkaConsumer.pollTimeoutMs``, ``kafka.isolation.level``
(``read_committed``, the default, or ``read_uncommitted``), and for typed values
``valueFormat`` (``avro``/``json``), ``schema.registry.url``, ``valueSubject``,
``valueSchemaVersion`` (:mod:`.formats`). A bad or unknown option raises
:class:`SparkOptionError` naming it, at ``load()`` (``schema()``) unless it depends on the kind
of query. ``assign`` of a missing topic or partition raises UnknownTopicOrPartitionError;
``subscribe`` of a missing topic reads nothing and logs a warning. Sink columns: ``value``
(required), ``key``, ``headers``, ``topic`` (or the ``topic`` option, which wins),
``partition``; extra columns are ignored.

Reading. Offsets are planned per topic-partition on the driver and read by executors in
half-open ranges ``[from, until)``, never past the end offset a consumer of the source's
isolation level sees: the last stable offset under read_committed (an open transaction holds
reads there until it ends; aborted records are skipped), the high watermark under
read_uncommitted. Transaction markers take an offset each and are never rows.
``minPartitions`` / ``maxRecordsPerPartition`` split big ranges. Executors fetch through
:class:`~kafkalite.client.KafkaConsumer`'s bulk path (whole record batches, prefetched) and
decode each record batch straight into a pyarrow RecordBatch with vectorised kernels
(:class:`ArrowBatchDecoder`): no Python object is made per record on the common path.
Streaming offsets are the JSON ``{"topic": {"partition": next_offset}}`` that Spark keeps in
its checkpoint, so a restarted query resumes exactly where it committed and a planned but
uncommitted batch is replayed with the same ranges (exactly-once reads). Partitions that appear
later start at their earliest offset; deleted or truncated data follows ``failOnDataLoss``
(raise :class:`DataLossError`, or log a warning and skip what is gone).

Writing. Batch writes (``mode("append")``) are at-least-once, as Spark's Kafka sink is.
Streaming writes are exactly-once per micro-batch through a *sink journal*: a small compacted
topic (``__kafkalite_spark_sinks`` by default, option ``sinkJournalTopic``) where, keyed by
the streaming query id,

1. the driver's ``commit(messages, batchId)`` records the last committed batch id (after every
   task succeeded), then deletes (tombstones) the task records of the batches up to it;
2. each write task, before writing data, records an *attempt* (batch id, Spark partition,
   start time) with the same idempotent producer that then writes the data, so the attempt's
   record batch carries that producer's id; after the data is acknowledged it marks the
   attempt done.

A replayed micro-batch (same batchId after a failure or restart) is skipped as a whole when the
journal says it was committed. When a batch fails, the driver's ``abort(messages, batchId)``
records which attempts Spark counted successful (their results reached the driver); a replayed
task with such an attempt is skipped. Every other earlier attempt — one that did not finish,
and one that marked itself done but whose task was killed (a killed task's input can end early
without an error) or whose driver died before ``abort`` — makes the new attempt scan the topics
it writes, from the earliest such attempt's start time, for record batches of those attempts'
producer ids and write only the rows not already
there (compared as a multiset of topic, partition, key, value, headers). Within an attempt the
idempotent producer removes duplicates caused by retries. This relies on what Spark requires of
a replayed micro-batch anyway: the same rows reach the same Spark partitions. Not covered: two
attempts of one task running at once (speculative execution; off by default for streaming),
and a producer-id change inside one attempt (it only follows a failed send, which fails the
attempt, but records sent after the change in the same flush are not found by a later scan).

Where code runs (concurrency contract):

* Driver, planning process (one long-lived Python process per query for streaming reads):
  :class:`KafkaliteDataSource` construction and ``schema()``/``reader()``/``streamReader()``/
  ``writer()``/``streamWriter()``; ``KafkaliteBatchReader.partitions()``; the stream reader's
  ``initialOffset``, ``latestOffset``, ``partitions``, ``commit``, ``reportLatestOffset``,
  ``prepareForTriggerAvailableNow``. These use a :class:`ClusterClient` (admin client) kept on
  the reader and dropped when it is pickled.
* Driver, commit process (a fresh Python process per call): the writers' ``commit``/``abort``.
* Executors (Python workers, from pickled copies): every ``read(partition)`` and ``write()``.
  They get everything from the pickled :class:`OffsetRangePartition` or writer object and open
  their own consumer or producer, closed before they return. Nothing here is shared between
  threads.

The package must be importable on executors (installed kafkalite, PYTHONPATH or --py-files),
and executors need pyarrow. It is the only part of kafkalite that imports pyspark.

Modules, by role (every public name is re-exported here):

* :mod:`.options`: option parsing and validation, the source schema, the source's errors;
* :mod:`.offsets`: offsets in Spark's JSON form, rate limits, the driver's cluster queries
  (:class:`ClusterClient`) and the split of offset ranges into input partitions;
* :mod:`.arrow`: the executor-side decoder of record batches into Arrow;
* :mod:`.formats`: typed values (Avro / JSON Schema through the schema registry);
* :mod:`.clients`: the consumer and producer opened per task;
* :mod:`.reader`: range reads and the batch and streaming readers;
* :mod:`.writer`: sink columns to records and the batch and streaming writers;
* :mod:`.journal`: the sink journal of exactly-once streaming writes;
* :mod:`.source`: :class:`KafkaliteDataSource` and :func:`register`;
* :mod:`.pauses`: the test-only pause points (:func:`pause_for_tests`).
"""

from kafkalite.spark.arrow import (
    ArrowBatchDecoder,
    arrow_schema,
)
from kafkalite.spark.clients import SinkRow
from kafkalite.spark.journal import (
    AttemptRecord,
    JournalState,
    SinkJournal,
    WrittenRecords,
)
from kafkalite.spark.offsets import (
    ClusterClient,
    OffsetRangePartition,
    Offsets,
    offsets_from_json,
    offsets_to_json,
    plan_partitions,
    rate_limit,
)
from kafkalite.spark.options import (
    BASE_SCHEMA,
    DEFAULT_JOURNAL_TOPIC,
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    DEFAULT_POLL_TIMEOUT_MS,
    FETCH_MAX_BYTES,
    FETCH_MAX_PARTITION_BYTES,
    HEADERS_FIELD,
    IDLE_CHECK_MS,
    ISOLATION_LEVELS,
    JOURNAL_PARTITIONS,
    SCAN_CLOCK_MARGIN_MS,
    SOURCE_NAME,
    YIELD_BYTES,
    YIELD_ROWS,
    DataLossError,
    OffsetSpec,
    ReadSettings,
    SinkOptions,
    SourceOptions,
    SparkOptionError,
    Subscription,
    parse_duration_ms,
    report_data_loss,
    source_schema,
    spark_name,
)
from kafkalite.spark.pauses import (
    PAUSE_DIRECTORY_ENV,
    PAUSE_POINT_ENV,
    PAUSE_POINTS,
    pause_for_tests,
)
from kafkalite.spark.reader import (
    KafkaliteBatchReader,
    KafkaliteStreamReader,
    RejectedStreamReader,
    read_offset_range,
)
from kafkalite.spark.source import (
    KafkaliteDataSource,
    register,
)
from kafkalite.spark.writer import (
    KafkaliteBatchWriter,
    KafkaliteStreamWriter,
    SinkColumns,
    WriteResult,
    arrow_rows,
    send_rows,
)

__all__ = [
    "ArrowBatchDecoder", "AttemptRecord", "BASE_SCHEMA", "ClusterClient", "DEFAULT_JOURNAL_TOPIC",
    "DEFAULT_MAX_TRIGGER_DELAY_MS", "DEFAULT_POLL_TIMEOUT_MS", "DataLossError", "FETCH_MAX_BYTES",
    "FETCH_MAX_PARTITION_BYTES", "HEADERS_FIELD", "IDLE_CHECK_MS", "ISOLATION_LEVELS", "JOURNAL_PARTITIONS",
    "JournalState",
    "KafkaliteBatchReader", "KafkaliteBatchWriter", "KafkaliteDataSource", "KafkaliteStreamReader",
    "KafkaliteStreamWriter", "OffsetRangePartition", "OffsetSpec", "Offsets", "PAUSE_DIRECTORY_ENV", "PAUSE_POINTS",
    "PAUSE_POINT_ENV", "ReadSettings", "RejectedStreamReader", "SCAN_CLOCK_MARGIN_MS", "SOURCE_NAME", "SinkColumns",
    "SinkJournal", "SinkOptions", "SinkRow", "SourceOptions", "SparkOptionError", "Subscription", "WriteResult",
    "WrittenRecords", "YIELD_BYTES", "YIELD_ROWS", "arrow_rows", "arrow_schema", "offsets_from_json",
    "offsets_to_json", "parse_duration_ms", "pause_for_tests", "plan_partitions", "rate_limit", "read_offset_range",
    "register", "report_data_loss", "send_rows", "source_schema", "spark_name",
]
