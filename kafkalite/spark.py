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
``maxRecordsPerPartition``, ``kafkaConsumer.pollTimeoutMs``. A bad or unknown option raises
:class:`SparkOptionError` naming it, at ``load()`` (``schema()``) unless it depends on the kind
of query. ``assign`` of a missing topic or partition raises UnknownTopicOrPartitionError;
``subscribe`` of a missing topic reads nothing and logs a warning. Sink columns: ``value``
(required), ``key``, ``headers``, ``topic`` (or the ``topic`` option, which wins),
``partition``; extra columns are ignored.

Reading. Offsets are planned per topic-partition on the driver and read by executors in
half-open ranges ``[from, until)``, never past the high watermark (the end offset a consumer
sees). ``minPartitions`` / ``maxRecordsPerPartition`` split big ranges. Executors fetch through
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
journal says it was committed; a task whose earlier attempt finished is skipped; a task whose
earlier attempt started but did not finish scans the topics it writes, from the attempt's start
time, for record batches of that attempt's producer id and writes only the rows not already
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

The module must be importable on executors (installed kafkalite, PYTHONPATH or --py-files),
and executors need pyarrow. This is the only kafkalite module that imports pyspark.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import os
import re
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, ShortType, StringType, StructType

from kafkalite import protocol
from kafkalite.client.types import TopicPartition
from kafkalite.errors import ConfigError, CorruptRecordError, KafkaliteError, KafkaTimeoutError, OffsetOutOfRangeError
from kafkalite.record.batch import ATTR_TIMESTAMP_TYPE, Record, RecordBatch, UniformRun, run_timestamp_deltas

log = logging.getLogger(__name__)

SOURCE_NAME = "kafkalite"
BASE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
               "timestampType int")
HEADERS_FIELD = "headers array<struct<key: string, value: binary>>"
DEFAULT_JOURNAL_TOPIC = "__kafkalite_spark_sinks"
JOURNAL_PARTITIONS = 8
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
FETCH_MAX_PARTITION_BYTES = 8 * 1024 * 1024
FETCH_MAX_BYTES = 64 * 1024 * 1024
SCAN_CLOCK_MARGIN_MS = 5 * 60 * 1000
YIELD_ROWS = 65_536
IDLE_CHECK_MS = 2_000
YIELD_BYTES = 16 * 1024 * 1024

_BATCH_ID_PROPERTY = "streaming.sql.batchId"
_QUERY_ID_PROPERTY = "sql.streaming.queryId"


# --- errors ------------------------------------------------------------------------------------


class SparkOptionError(ConfigError):
    """A data source option is missing, unknown or malformed; ``option`` names it."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"kafkalite option '{option}': {message}")
        self.option = option


class DataLossError(KafkaliteError):
    """Offsets a query needs are gone (retention, deletion, truncation) and failOnDataLoss is true."""


_DATA_LOSS_HINT = ("Some data may have been lost because it is not available in kafkalite any more: it aged out, "
                   "or the topic was deleted or truncated before the query read it. If you want the query to "
                   "go on in such cases, set the source option 'failOnDataLoss' to 'false'.")


def report_data_loss(fail_on_data_loss: bool, message: str) -> None:
    """Raise DataLossError, or log a warning, following ``failOnDataLoss``."""
    if fail_on_data_loss:
        raise DataLossError(f"{message}. {_DATA_LOSS_HINT}")
    log.warning("%s. Some data may have been lost; going on because failOnDataLoss is false.", message)


# --- test-only fault injection -------------------------------------------------------------------


PAUSE_POINT_ENV = "KAFKALITE_SPARK_TEST_PAUSE_AT"
PAUSE_DIRECTORY_ENV = "KAFKALITE_SPARK_TEST_PAUSE_DIR"
PAUSE_POINTS = ("source-planned", "task-started", "mid-write", "task-done", "commit")


def pause_for_tests(point: str) -> None:
    """FOR TESTS ONLY: block forever at the named point of the source's or sink's protocol, so
    a fault test can kill the driver exactly there. Does nothing unless the environment sets
    ``KAFKALITE_SPARK_TEST_PAUSE_AT`` to ``point`` or ``point:N`` and
    ``KAFKALITE_SPARK_TEST_PAUSE_DIR`` to a directory. Every arrival at the point (in any
    driver or worker process of the run) leaves a ``reached-<point>-*`` file there; the N-th
    arrival and every later one (N defaults to 1) writes ``paused-<point>-<pid>`` and blocks
    its thread until the process is killed. The points (:data:`PAUSE_POINTS`):

    * ``source-planned``: the stream reader's ``partitions()``: Spark has logged the
      micro-batch's offsets but not run or committed it;
    * ``task-started``: a write task recorded its attempt as started, nothing written yet;
    * ``mid-write``: a write task had its first Arrow batch of rows acknowledged;
    * ``task-done``: a write task recorded its attempt as done; the batch is not committed;
    * ``commit``: the driver's commit recorded the batch as committed in the sink journal but
      has not cleaned the journal up, and Spark has not recorded the commit.

    Concurrency: any thread of any process; the files are the only shared state.
    """
    wanted = os.environ.get(PAUSE_POINT_ENV, "")
    name, _, count = wanted.partition(":")
    if name != point:
        return
    directory = os.environ.get(PAUSE_DIRECTORY_ENV, "")
    if not directory:
        return
    with open(os.path.join(directory, f"reached-{point}-{uuid.uuid4().hex}"), "w"):
        pass
    reached = sum(1 for entry in os.listdir(directory) if entry.startswith(f"reached-{point}-"))
    if reached < (int(count) if count else 1):
        return
    marker = os.path.join(directory, f"paused-{point}-{os.getpid()}")
    with open(marker + ".tmp", "w") as handle:
        handle.write(f"{point} reached {reached} times\n")
    os.replace(marker + ".tmp", marker)
    log.warning("test pause at %s (%s=%s): blocking until killed", point, PAUSE_POINT_ENV, wanted)
    threading.Event().wait()


# --- options -----------------------------------------------------------------------------------


_BOOTSTRAP_KEYS = ("kafkalite.bootstrap.servers", "kafka.bootstrap.servers")
_SOURCE_KEYS = {
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets", "startingtimestamp",
    "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy", "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay",
    "failondataloss", "includeheaders", "minpartitions", "maxrecordsperpartition", "kafkaconsumer.polltimeoutms",
    *_BOOTSTRAP_KEYS,
}
# options Spark itself adds to a writer's (writeStream's checkpointLocation and queryName)
_SPARK_SINK_KEYS = {"checkpointlocation", "queryname", "path"}
_SINK_KEYS = {"topic", "exactlyonce", "sinkjournaltopic", "kafkalite.acks", "kafka.acks", "kafkalite.compression.type",
              "kafka.compression.type", "kafkalite.linger.ms", "kafka.linger.ms", *_SPARK_SINK_KEYS, *_BOOTSTRAP_KEYS}
_STREAM_ONLY_KEYS = {"maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"}
_BATCH_ONLY_KEYS = {"endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"}
_SPARK_NAMES = {
    "subscribepattern": "subscribePattern", "startingoffsets": "startingOffsets", "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp", "endingtimestamp": "endingTimestamp",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp", "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
    "startingoffsetsbytimestampstrategy": "startingOffsetsByTimestampStrategy",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger", "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay", "failondataloss": "failOnDataLoss", "includeheaders": "includeHeaders",
    "minpartitions": "minPartitions", "maxrecordsperpartition": "maxRecordsPerPartition",
    "kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs", "exactlyonce": "exactlyOnce",
    "sinkjournaltopic": "sinkJournalTopic", "checkpointlocation": "checkpointLocation", "queryname": "queryName",
}


def spark_name(key: str) -> str:
    """The option's name as Spark's documentation spells it (options arrive lowercased)."""
    return _SPARK_NAMES.get(key, key)


def _lowercase(options: Mapping[str, str]) -> dict[str, str]:
    return {str(key).lower(): str(value) for key, value in options.items() if value is not None}


def _check_known(options: Mapping[str, str], known: set[str], role: str) -> None:
    """Unknown names are reported as they arrive: Spark hands a Python data source its options
    with lowercased names, so the spelling the user wrote is gone; the hint names the closest
    known option as Spark's documentation spells it."""
    for key in sorted(options):
        if key not in known:
            hint = ""
            if key.startswith(("kafka.", "kafkalite.")):
                hint = " (client settings other than bootstrap.servers are not supported)"
            else:
                close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
                if close:
                    hint = f" (did you mean {spark_name(close[0])}?)"
            raise SparkOptionError(spark_name(key), f"unknown option for a kafkalite {role}{hint}")


def _bootstrap(options: Mapping[str, str]) -> str:
    for key in _BOOTSTRAP_KEYS:
        value = options.get(key, "").strip()
        if value:
            return value
    raise SparkOptionError("kafkalite.bootstrap.servers",
                           "required (host:port[,host:port...]; kafka.bootstrap.servers is accepted too)")


def _boolean(options: Mapping[str, str], key: str, default: bool) -> bool:
    if key not in options:
        return default
    value = options[key].strip().lower()
    if value in ("true", "false"):
        return value == "true"
    raise SparkOptionError(spark_name(key), f"must be true or false, got {options[key]!r}")


def _positive_int(options: Mapping[str, str], key: str) -> int | None:
    if key not in options:
        return None
    text = options[key].strip()
    try:
        value = int(text)
    except ValueError:
        raise SparkOptionError(spark_name(key), f"must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise SparkOptionError(spark_name(key), f"must be a positive integer, got {text!r}")
    return value


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d|milliseconds?|seconds?|minutes?|hours?|days?)?\s*$", re.I)
_DURATION_MS = {"ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "second": 1000, "seconds": 1000,
                "m": 60_000, "min": 60_000, "minute": 60_000, "minutes": 60_000, "h": 3_600_000, "hour": 3_600_000,
                "hours": 3_600_000, "d": 86_400_000, "day": 86_400_000, "days": 86_400_000}


def parse_duration_ms(option: str, text: str) -> int:
    """``"15m"``, ``"30s"``, ``"500ms"``, ``"1h"`` or plain milliseconds → milliseconds."""
    match = _DURATION.match(text)
    if not match:
        raise SparkOptionError(option, f"must be a duration such as 500ms, 30s, 15m or 1h, got {text!r}")
    unit = (match.group(2) or "ms").lower()
    return int(match.group(1)) * _DURATION_MS[unit]


def _json_object(option: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SparkOptionError(option, f"is not valid JSON ({exc.msg}): {text!r}") from None
    if not isinstance(value, dict) or not all(isinstance(topic, str) for topic in value):
        raise SparkOptionError(option, f"must be a JSON object keyed by topic, got {text!r}")
    return value


def _partition_map(option: str, text: str, what: str) -> dict[TopicPartition, int]:
    """``{"topic": {"0": number, ...}, ...}`` → ``{TopicPartition: number}``."""
    result: dict[TopicPartition, int] = {}
    for topic, partitions in _json_object(option, text).items():
        if not isinstance(partitions, dict):
            raise SparkOptionError(option, f"the value for topic {topic!r} must be an object of partition → {what}")
        for partition, number in partitions.items():
            try:
                index = int(partition)
            except (TypeError, ValueError):
                raise SparkOptionError(option, f"partition {partition!r} of topic {topic!r} is not a number") from None
            if isinstance(number, bool) or not isinstance(number, int):
                raise SparkOptionError(option, f"the {what} of {topic}-{index} must be an integer, got {number!r}")
            result[TopicPartition(topic, index)] = number
    return result


@dataclass(frozen=True)
class Subscription:
    """What a query reads: fixed topics, a topic pattern, or fixed partitions."""

    kind: str  # "subscribe" | "subscribePattern" | "assign"
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[TopicPartition, ...] = ()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Subscription:
        given = [key for key in ("subscribe", "subscribepattern", "assign") if key in options]
        if len(given) != 1:
            names = ", ".join(spark_name(key) for key in given) or "none"
            raise SparkOptionError("subscribe", "exactly one of subscribe, subscribePattern or assign is needed, "
                                                f"got {names}")
        key = given[0]
        text = options[key].strip()
        if key == "subscribe":
            topics = tuple(sorted({topic.strip() for topic in text.split(",") if topic.strip()}))
            if not topics:
                raise SparkOptionError("subscribe", "needs a comma-separated list of topics")
            return cls("subscribe", topics=topics)
        if key == "subscribepattern":
            if not text:
                raise SparkOptionError("subscribePattern", "needs a regular expression")
            try:
                re.compile(text)
            except re.error as exc:
                raise SparkOptionError("subscribePattern", f"is not a valid regular expression: {exc}") from None
            return cls("subscribePattern", pattern=text)
        chosen: set[TopicPartition] = set()
        for topic, partitions in _json_object("assign", text).items():
            if not isinstance(partitions, list) or not all(
                    isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in partitions):
                raise SparkOptionError("assign", f"topic {topic!r} needs a list of partition numbers, "
                                                 f"e.g. {{\"{topic}\":[0,1]}}")
            chosen.update(TopicPartition(topic, item) for item in partitions)
        if not chosen:
            raise SparkOptionError("assign", "needs at least one partition, e.g. {\"topic\":[0,1]}")
        return cls("assign", partitions=tuple(sorted(chosen)))


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends: earliest, latest, per-partition offsets (-2 earliest, -1
    latest), one timestamp for every partition, or a timestamp per partition."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    option: str
    offsets: tuple[tuple[TopicPartition, int], ...] = ()
    timestamp: int = -1

    @property
    def by_partition(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)


def _offset_spec(options: Mapping[str, str], prefix: str, streaming: bool | None) -> OffsetSpec | None:
    """The spec of ``starting*`` or ``ending*`` options; precedence as in Spark: a global
    timestamp, then timestamps per partition, then offsets. ``streaming`` None (not known yet)
    skips the checks that depend on the kind of query."""
    batch = streaming is False
    single = f"{prefix}timestamp"
    per_partition = f"{prefix}offsetsbytimestamp"
    offsets_key = f"{prefix}offsets"
    if single in options:
        text = options[single].strip()
        try:
            value = int(text)
        except ValueError:
            raise SparkOptionError(spark_name(single), f"must be a timestamp in epoch milliseconds, got {text!r}") \
                from None
        if value < 0:
            raise SparkOptionError(spark_name(single), f"must not be negative, got {value}")
        return OffsetSpec("timestamp", spark_name(single), timestamp=value)
    if per_partition in options:
        mapping = _partition_map(spark_name(per_partition), options[per_partition], "timestamp")
        for tp, value in mapping.items():
            if value < 0 and value not in (protocol.EARLIEST_TIMESTAMP, protocol.LATEST_TIMESTAMP):
                raise SparkOptionError(spark_name(per_partition), f"the timestamp of {tp.topic}-{tp.partition} "
                                                                  f"must be ≥ 0 (or -2/-1), got {value}")
        return OffsetSpec("timestamps", spark_name(per_partition), offsets=tuple(sorted(mapping.items())))
    if offsets_key in options:
        text = options[offsets_key].strip()
        option = spark_name(offsets_key)
        if text.lower() in ("earliest", "latest"):
            kind = text.lower()
            if prefix == "starting" and kind == "latest" and batch:
                raise SparkOptionError(option, "cannot be latest for batch queries")
            if prefix == "ending" and kind == "earliest":
                raise SparkOptionError(option, "cannot be earliest for batch queries")
            return OffsetSpec(kind, option)
        mapping = _partition_map(option, text, "offset")
        for tp, value in mapping.items():
            if value < protocol.EARLIEST_TIMESTAMP:
                raise SparkOptionError(option, f"the offset of {tp.topic}-{tp.partition} must be ≥ 0, -2 (earliest) "
                                               f"or -1 (latest), got {value}")
            if prefix == "starting" and value == protocol.LATEST_TIMESTAMP and batch:
                raise SparkOptionError(option, f"cannot be -1 (latest) for batch queries ({tp.topic}-{tp.partition})")
            if prefix == "ending" and value == protocol.EARLIEST_TIMESTAMP:
                raise SparkOptionError(option, f"cannot be -2 (earliest) for batch queries ({tp.topic}-{tp.partition})")
        return OffsetSpec("offsets", option, offsets=tuple(sorted(mapping.items())))
    return None


@dataclass(frozen=True)
class ReadSettings:
    """What an executor needs to read a range (travels inside each partition)."""

    bootstrap_servers: str
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS


@dataclass(frozen=True)
class SourceOptions:
    """Validated source options (see the module docstring for their meaning)."""

    settings: ReadSettings
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    starting_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    max_records_per_partition: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, str], streaming: bool | None) -> SourceOptions:
        """Validate ``raw``; ``streaming`` None checks everything that does not depend on the
        kind of query (what ``load()`` can check before Spark says which it is)."""
        options = _lowercase(raw)
        role = {True: "streaming source", False: "batch source", None: "source"}[streaming]
        _check_known(options, _SOURCE_KEYS, role)
        mode_only = {True: _BATCH_ONLY_KEYS, False: _STREAM_ONLY_KEYS, None: set()}[streaming]
        for key in sorted(mode_only):
            if key in options:
                kind = "streaming" if streaming else "batch"
                raise SparkOptionError(spark_name(key), f"is not valid for {kind} queries")
        settings = ReadSettings(
            bootstrap_servers=_bootstrap(options),
            fail_on_data_loss=_boolean(options, "failondataloss", True),
            include_headers=_boolean(options, "includeheaders", False),
            poll_timeout_ms=_positive_int(options, "kafkaconsumer.polltimeoutms") or DEFAULT_POLL_TIMEOUT_MS)
        strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise SparkOptionError("startingOffsetsByTimestampStrategy", f"must be error or latest, got {strategy!r}")
        starting = _offset_spec(options, "starting", streaming) or OffsetSpec(
            "latest" if streaming else "earliest", "startingOffsets")
        ending = _offset_spec(options, "ending", streaming) or OffsetSpec("latest", "endingOffsets")
        delay = DEFAULT_MAX_TRIGGER_DELAY_MS
        if "maxtriggerdelay" in options:
            delay = parse_duration_ms("maxTriggerDelay", options["maxtriggerdelay"])
        return cls(settings=settings, subscription=Subscription.parse(options), starting=starting, ending=ending,
                   starting_strategy=strategy,
                   max_offsets_per_trigger=_positive_int(options, "maxoffsetspertrigger"),
                   min_offsets_per_trigger=_positive_int(options, "minoffsetspertrigger"),
                   max_trigger_delay_ms=delay,
                   min_partitions=_positive_int(options, "minpartitions"),
                   max_records_per_partition=_positive_int(options, "maxrecordsperpartition"))


@dataclass(frozen=True)
class SinkOptions:
    """Validated sink options."""

    bootstrap_servers: str
    topic: str | None = None
    exactly_once: bool = True
    journal_topic: str = DEFAULT_JOURNAL_TOPIC
    acks: str = "all"
    compression_type: str | None = None
    linger_ms: int = 5

    @classmethod
    def parse(cls, raw: Mapping[str, str], streaming: bool) -> SinkOptions:
        options = _lowercase(raw)
        _check_known(options, _SINK_KEYS, "streaming sink" if streaming else "batch sink")
        topic = options.get("topic", "").strip() or None
        acks = (options.get("kafkalite.acks") or options.get("kafka.acks") or "all").strip().lower()
        if acks not in ("all", "-1", "1", "0"):
            raise SparkOptionError("kafka.acks", f"must be all, -1, 1 or 0, got {acks!r}")
        exactly_once = _boolean(options, "exactlyonce", True)
        if streaming and exactly_once and acks not in ("all", "-1"):
            raise SparkOptionError("kafka.acks", "exactly-once streaming writes need acks=all "
                                                 "(or set exactlyOnce to false)")
        compression = (options.get("kafkalite.compression.type") or options.get("kafka.compression.type") or "").strip()
        if compression and compression not in ("none", "gzip", "lz4", "zstd"):
            raise SparkOptionError("kafka.compression.type", f"must be none, gzip, lz4 or zstd, got {compression!r}")
        linger = options.get("kafkalite.linger.ms") or options.get("kafka.linger.ms") or "5"
        try:
            linger_ms = int(linger)
        except ValueError:
            raise SparkOptionError("kafka.linger.ms", f"must be an integer, got {linger!r}") from None
        journal = options.get("sinkjournaltopic", DEFAULT_JOURNAL_TOPIC).strip() or DEFAULT_JOURNAL_TOPIC
        return cls(bootstrap_servers=_bootstrap(options), topic=topic, exactly_once=exactly_once,
                   journal_topic=journal, acks=acks,
                   compression_type=None if compression in ("", "none") else compression, linger_ms=max(0, linger_ms))


def source_schema(include_headers: bool) -> str:
    return f"{BASE_SCHEMA}, {HEADERS_FIELD}" if include_headers else BASE_SCHEMA


_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
_HEADERS_TYPE = pa.list_(pa.field("element", _HEADER_STRUCT))


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects from read() (Spark's own conversion of the source schema)."""
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
              pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
              pa.field("timestamp", _TIMESTAMP_TYPE), pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", _HEADERS_TYPE))
    return pa.schema(fields)


# --- offsets: JSON form and arithmetic ---------------------------------------------------------


Offsets = dict[TopicPartition, int]


def offsets_to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """``{"topic": {"partition": offset}}``, topics and partitions in order (Spark compares the
    serialised form, so equal offsets must serialise equally)."""
    result: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        result.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return result


def offsets_from_json(value: Mapping[str, Any] | None) -> Offsets:
    result: Offsets = {}
    for topic, partitions in (value or {}).items():
        for partition, offset in dict(partitions).items():
            result[TopicPartition(str(topic), int(partition))] = int(offset)
    return result


def rate_limit(limit: int, start: Offsets, end: Offsets, earliest_of_new: Offsets) -> Offsets:
    """Spread ``limit`` records over the partitions in proportion to what each has available
    (Spark's rule: a partition with something to read gets at least one record)."""
    sizes: dict[TopicPartition, int] = {}
    for tp, until in end.items():
        begin = start.get(tp, earliest_of_new.get(tp))
        if begin is not None and until - begin > 0:
            sizes[tp] = until - begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(end)
    limited: Offsets = {}
    for tp, until in end.items():
        size = sizes.get(tp)
        if size is None:
            limited[tp] = until
            continue
        begin = start.get(tp, earliest_of_new.get(tp, 0))
        share = limit * (size / total)
        records = math.ceil(share) if share < 1 else math.floor(share)
        limited[tp] = min(until, begin + records)
    return limited


# --- driver-side cluster access ----------------------------------------------------------------


class ClusterClient:
    """Topic, partition and offset look-ups for planning (driver only; one thread)."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.admin = self._connect()
        self._warned_missing: set[str] = set()

    def _connect(self) -> Any:
        from kafkalite.client.admin import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, client_id="kafkalite-spark-driver")

    def close(self) -> None:
        self.admin.close()

    def _list_offsets(self, query: dict[TopicPartition, int]) -> dict[TopicPartition, Any]:
        from kafkalite.errors import UnknownTopicOrPartitionError

        answers: dict[TopicPartition, Any]
        try:
            answers = self.admin.list_offsets(query)
        except UnknownTopicOrPartitionError:
            # the admin client's cached metadata may predate partitions added since: start afresh
            self.admin.close()
            self.admin = self._connect()
            answers = self.admin.list_offsets(query)
        return answers

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """Current partitions of the subscription, sorted (missing topics have none)."""
        if subscription.kind == "assign":
            return sorted(subscription.partitions)
        if subscription.kind == "subscribe":
            described = self.admin.describe_topics(list(subscription.topics))
        else:
            pattern = re.compile(subscription.pattern)
            described = [topic for topic in self.admin.describe_topics(None)
                         if pattern.fullmatch(topic["name"]) and not topic.get("is_internal")
                         and not topic["name"].startswith("__")]
        result: list[TopicPartition] = []
        for topic in described:
            if topic.get("error_code"):
                if subscription.kind == "subscribe" and topic["name"] not in self._warned_missing:
                    # Spark's behaviour: a subscribed topic that does not exist has no rows (yet)
                    self._warned_missing.add(topic["name"])
                    log.warning("kafkalite source: subscribed topic %s does not exist (error %s); it is read "
                                "when it appears", topic["name"], topic["error_code"])
                continue
            self._warned_missing.discard(topic["name"])
            result.extend(TopicPartition(topic["name"], item["partition_index"]) for item in topic["partitions"])
        return sorted(result)

    def check_assigned(self, subscription: Subscription, timeout_s: float = 3.0) -> None:
        """Raise UnknownTopicOrPartitionError naming the assigned topics or partitions that do
        not exist (``assign``), after up to ``timeout_s`` for a topic that was just created to
        show in the metadata."""
        from kafkalite.errors import UnknownTopicOrPartitionError

        if subscription.kind != "assign":
            return
        wanted = sorted(subscription.partitions)
        topics = sorted({tp.topic for tp in wanted})
        deadline = time.monotonic() + timeout_s
        while True:
            described = {topic["name"]: topic for topic in self.admin.describe_topics(topics)}
            missing: list[str] = []
            for tp in wanted:
                topic = described.get(tp.topic)
                if topic is None or topic.get("error_code") == UnknownTopicOrPartitionError.errno:
                    missing.append(f"topic {tp.topic}")
                elif topic.get("error_code") or not topic["partitions"]:
                    continue  # another problem (no leader yet...): planning reports it if it lasts
                elif tp.partition not in {item["partition_index"] for item in topic["partitions"]}:
                    missing.append(f"partition {tp.topic}-{tp.partition} (the topic has "
                                   f"{len(topic['partitions'])} partitions)")
            if not missing:
                return
            if time.monotonic() >= deadline:
                raise UnknownTopicOrPartitionError("the assign option names what does not exist: "
                                                   + ", ".join(dict.fromkeys(missing)))
            time.sleep(0.2)

    def offsets_at(self, partitions: Iterable[TopicPartition], timestamp: int) -> Offsets:
        wanted = list(partitions)
        if not wanted:
            return {}
        answers = self._list_offsets(dict.fromkeys(wanted, timestamp))
        return {tp: answers[tp].offset for tp in wanted}

    def earliest(self, partitions: Iterable[TopicPartition]) -> Offsets:
        return self.offsets_at(partitions, protocol.EARLIEST_TIMESTAMP)

    def latest(self, partitions: Iterable[TopicPartition]) -> Offsets:
        return self.offsets_at(partitions, protocol.LATEST_TIMESTAMP)

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        if not timestamps:
            return {}
        answers = self._list_offsets(dict(timestamps))
        result: dict[TopicPartition, int | None] = {}
        for tp in timestamps:
            offset = answers[tp].offset if tp in answers else -1
            result[tp] = offset if offset is not None and offset >= 0 else None
        return result

    def resolve(self, spec: OffsetSpec, partitions: Sequence[TopicPartition], *, starting: bool,
                strategy: str = "error") -> Offsets:
        """Turn a spec into offsets for ``partitions`` (raising SparkOptionError for a spec that
        does not fit them)."""
        if spec.kind == "earliest":
            return self.earliest(partitions)
        if spec.kind == "latest":
            return self.latest(partitions)
        if spec.kind == "timestamp":
            wanted = dict.fromkeys(partitions, spec.timestamp)
        else:
            given = spec.by_partition
            missing = sorted(set(partitions) - set(given))
            extra = sorted(set(given) - set(partitions))
            if missing or extra:
                parts = []
                if missing:
                    parts.append("no entry for " + ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing))
                if extra:
                    parts.append("entries for partitions the query does not read: "
                                 + ", ".join(f"{tp.topic}-{tp.partition}" for tp in extra))
                raise SparkOptionError(spec.option, "must name every partition the query reads; " + "; ".join(parts))
            if spec.kind == "offsets":
                special = {tp: value for tp, value in given.items() if value < 0}
                result = {tp: value for tp, value in given.items() if value >= 0}
                earliest = [tp for tp, value in special.items() if value == protocol.EARLIEST_TIMESTAMP]
                latest = [tp for tp, value in special.items() if value == protocol.LATEST_TIMESTAMP]
                result.update(self.earliest(earliest))
                result.update(self.latest(latest))
                return result
            wanted = {tp: given[tp] for tp in partitions}
        special_earliest = [tp for tp, value in wanted.items() if value == protocol.EARLIEST_TIMESTAMP]
        special_latest = [tp for tp, value in wanted.items() if value == protocol.LATEST_TIMESTAMP]
        by_time = {tp: value for tp, value in wanted.items() if value >= 0}
        result = {**self.earliest(special_earliest), **self.latest(special_latest)}
        found = self.offsets_for_times(by_time)
        unmatched = [tp for tp, offset in found.items() if offset is None]
        result.update({tp: offset for tp, offset in found.items() if offset is not None})
        if unmatched:
            if starting and strategy == "error":
                raise SparkOptionError(spec.option, "no record at or after the timestamp in "
                                       + ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(unmatched))
                                       + " (set startingOffsetsByTimestampStrategy to latest to start at the end)")
            result.update(self.latest(unmatched))
        return result


@dataclass(frozen=True)
class OffsetRangePartition(InputPartition):
    """One Spark task's slice of one topic-partition: offsets ``[from_offset, until_offset)``."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    settings: ReadSettings

    @property
    def value(self) -> str:  # InputPartition's description
        return f"{self.topic}-{self.partition}[{self.from_offset},{self.until_offset})"

    def __repr__(self) -> str:
        return f"OffsetRangePartition({self.value})"


def plan_partitions(start: Offsets, end: Offsets, settings: ReadSettings, min_partitions: int | None,
                    max_records_per_partition: int | None) -> list[OffsetRangePartition]:
    """Offset ranges → Spark partitions, splitting big ranges (Spark's rule: with minPartitions
    above the number of topic-partitions, each range gets parts in proportion to its size; with
    maxRecordsPerPartition, no part is larger)."""
    ranges = [(tp, start[tp], end[tp]) for tp in sorted(end) if tp in start and end[tp] > start[tp]]
    total = sum(until - begin for _, begin, until in ranges)
    parts: list[OffsetRangePartition] = []
    for tp, begin, until in ranges:
        size = until - begin
        pieces = 1
        if min_partitions is not None and min_partitions > len(ranges) and total > 0:
            pieces = max(1, math.ceil(size / (total / min_partitions)))
        if max_records_per_partition is not None:
            pieces = max(pieces, math.ceil(size / max_records_per_partition))
        pieces = min(pieces, size)
        for index in range(pieces):
            low = begin + size * index // pieces
            high = begin + size * (index + 1) // pieces
            parts.append(OffsetRangePartition(tp.topic, tp.partition, low, high, settings))
    return parts


# --- executor-side decoding ----------------------------------------------------------------------


_INT32 = pa.int32()
_INT64 = pa.int64()


def _scalar(value: int) -> pa.Scalar:
    # typed scalars: handing pyarrow a bare Python int costs an import attempt per call
    return pa.scalar(value, _INT64)


class _Ramp:
    """0, 1, 2, ... (int64), grown on demand and sliced: cheap."""

    def __init__(self) -> None:
        self.size = 0
        self.wide = pa.array([], _INT64)

    def int64(self, count: int) -> pa.Array:
        if count > self.size:
            self.size = max(count, 2 * self.size, 8192)
            self.wide = pa.array(range(self.size), _INT64)
        return self.wide.slice(0, count)


_RAMP = _Ramp()


class ArrowBatchDecoder:
    """Decodes record batches of one topic-partition into pyarrow RecordBatches of the source
    schema. Executor side; one instance per read task.

    Validation is record/'s, so this decoder accepts exactly what the broker, the consumer and
    the dump tool accept: the bulk shape is recognised and checked by
    :meth:`RecordBatch.uniform_runs` and then cut into columns with a few vectorised kernels at
    the positions it checked (no Python object per record); any other batch is decoded by
    :meth:`RecordBatch.records` and its columns built from the records.
    """

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self._constants_size = 0
        self._topic_column = pa.array([], pa.string())
        self._partition_column = pa.array([], _INT32)
        self._type_columns = (pa.array([], _INT32), pa.array([], _INT32))

    def _constants(self, count: int) -> None:
        if count <= self._constants_size:
            return
        size = max(count, 2 * self._constants_size, 8192)
        self._topic_column = pa.array([self.topic] * size, pa.string())
        self._partition_column = pa.array([self.partition] * size, _INT32)
        self._type_columns = (pa.array([0] * size, _INT32), pa.array([1] * size, _INT32))
        self._constants_size = size

    def decode(self, batch: RecordBatch, min_offset: int, max_offset: int) -> pa.RecordBatch | None:
        """The batch's records with ``min_offset <= offset < max_offset``, or None if none.
        Damage raises CorruptRecordError naming the partition and the batch's offset."""
        try:
            payload = batch.payload()
            data = payload if isinstance(payload, bytes) else payload.tobytes()
            runs = batch.uniform_runs(data)
            if runs is not None:
                columns = self._run_columns(data, runs, batch)
            else:
                columns = self._record_columns(batch.records(), batch)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{self.topic}-{self.partition}: {exc.detail}", exc.position) from exc
        count = len(columns["offset"])
        self._constants(count)
        log_append = bool(batch.attributes & ATTR_TIMESTAMP_TYPE)
        arrays = [columns["key"], columns["value"], self._topic_column.slice(0, count),
                  self._partition_column.slice(0, count), columns["offset"], columns["timestamp"],
                  self._type_columns[1 if log_append else 0].slice(0, count)]
        if self.include_headers:
            arrays.append(columns["headers"])
        decoded = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        offsets = columns["offset"]
        if min_offset > batch.base_offset or max_offset <= batch.base_offset + batch.last_offset_delta:
            keep = pc.and_(pc.greater_equal(offsets, _scalar(min_offset)), pc.less(offsets, _scalar(max_offset)))
            decoded = decoded.filter(keep)
        return decoded if decoded.num_rows else None

    @staticmethod
    def _timestamps(millis: pa.Array) -> pa.Array:
        return pc.multiply(millis, _scalar(1000)).cast(_TIMESTAMP_TYPE)

    def _run_columns(self, data: bytes, runs: list[UniformRun], batch: RecordBatch) -> dict[str, pa.Array]:
        """Columns of the bulk shape: each run is a fixed-size binary array over the payload
        buffer, its keys and values cut out with one kernel each."""
        buffer = pa.py_buffer(data)
        keys: list[pa.Array] = []
        values: list[pa.Array] = []
        offsets: list[pa.Array] = []
        millis: list[pa.Array] = []
        log_append = bool(batch.attributes & ATTR_TIMESTAMP_TYPE)
        for run in runs:
            count = run.record_count
            records = pa.Array.from_buffers(pa.binary(run.stride), count,
                                            [None, buffer.slice(run.start, count * run.stride)])
            for at, length, out in ((run.key_at, run.key_length, keys), (run.value_at, run.value_length, values)):
                if length < 0:
                    out.append(pa.nulls(count, pa.binary()))
                else:
                    out.append(pc.binary_slice(records, at, at + length).cast(pa.binary()))
            offsets.append(pc.add(_RAMP.int64(count), _scalar(batch.base_offset + run.first_delta)))
            if log_append or not run.timestamp_columns:
                millis.append(pa.repeat(_scalar(batch.max_timestamp if log_append
                                                else batch.base_timestamp + run.timestamp_delta), count))
            else:
                millis.append(pc.add(pa.array(run_timestamp_deltas(run), _INT64), _scalar(batch.base_timestamp)))
        total = sum(run.record_count for run in runs)
        return {"key": pa.concat_arrays(keys), "value": pa.concat_arrays(values),
                "offset": pa.concat_arrays(offsets), "timestamp": self._timestamps(pa.concat_arrays(millis)),
                "headers": pa.nulls(total, _HEADERS_TYPE)}

    def _record_columns(self, records: list[Record], batch: RecordBatch) -> dict[str, pa.Array]:
        """Columns of records decoded by record/ (batches of any other shape)."""
        if batch.attributes & ATTR_TIMESTAMP_TYPE:
            millis = pa.repeat(_scalar(batch.max_timestamp), len(records))
        else:
            millis = pa.array([record.timestamp for record in records], _INT64)
        columns = {"key": pa.array([record.key for record in records], pa.binary()),
                   "value": pa.array([record.value for record in records], pa.binary()),
                   "offset": pa.array([record.offset for record in records], _INT64),
                   "timestamp": self._timestamps(millis)}
        if self.include_headers:
            columns["headers"] = pa.array(
                [[{"key": name, "value": value} for name, value in record.headers] if record.headers else None
                 for record in records], _HEADERS_TYPE)
        return columns


# --- executor-side reading ----------------------------------------------------------------------


def _consumer(bootstrap_servers: str, client_id: str) -> Any:
    from kafkalite.client.consumer import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=bootstrap_servers, client_id=client_id, enable_auto_commit=False,
                         auto_offset_reset="none", allow_auto_create_topics=False,
                         max_partition_fetch_bytes=FETCH_MAX_PARTITION_BYTES, fetch_max_bytes=FETCH_MAX_BYTES,
                         fetch_max_wait_ms=200)


def read_offset_range(part: OffsetRangePartition) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``part`` as pyarrow RecordBatches (executor side), several record
    batches combined into one of about YIELD_ROWS rows (Spark handles big batches faster).

    Data that is gone (below the log start, or above a truncated end) follows failOnDataLoss.
    """
    if part.from_offset >= part.until_offset:
        return
    settings = part.settings
    tp = TopicPartition(part.topic, part.partition)
    decoder = ArrowBatchDecoder(part.topic, part.partition, settings.include_headers)
    consumer = _consumer(settings.bootstrap_servers, "kafkalite-spark-reader")
    try:
        consumer.assign([tp])
        consumer.seek(tp, part.from_offset)
        position = part.from_offset
        idle_since = time.monotonic()
        pending: list[pa.RecordBatch] = []
        pending_rows = pending_bytes = 0
        while position < part.until_offset:
            try:
                fetched = consumer.poll_batches(timeout_ms=500)
            except OffsetOutOfRangeError:
                position = _after_out_of_range(consumer, tp, position, part)
                if position < part.until_offset:
                    consumer.seek(tp, position)
                continue
            if not fetched:
                idle_ms = (time.monotonic() - idle_since) * 1000
                if idle_ms >= min(IDLE_CHECK_MS, settings.poll_timeout_ms):
                    position = _after_stall(consumer, tp, position, part, idle_ms >= settings.poll_timeout_ms)
                    if idle_ms >= settings.poll_timeout_ms:
                        idle_since = time.monotonic()
                continue
            idle_since = time.monotonic()
            for item in fetched:
                low = max(item.first_offset, position)
                high = min(item.next_offset, part.until_offset)
                if low >= high:
                    continue
                decoded = decoder.decode(item.batch, low, high)
                position = high
                if decoded is not None:
                    pending.append(decoded)
                    pending_rows += decoded.num_rows
                    pending_bytes += decoded.nbytes
                if position >= part.until_offset:
                    break
            if pending_rows >= YIELD_ROWS or pending_bytes >= YIELD_BYTES:
                yield pa.concat_batches(pending) if len(pending) > 1 else pending[0]
                pending, pending_rows, pending_bytes = [], 0, 0
        if pending:
            yield pa.concat_batches(pending) if len(pending) > 1 else pending[0]
    finally:
        consumer.close()


def _after_out_of_range(consumer: Any, tp: TopicPartition, position: int, part: OffsetRangePartition) -> int:
    """Where to go on after the broker said ``position`` is out of range."""
    begin: int = consumer.beginning_offsets([tp])[tp]
    end: int = consumer.end_offsets([tp])[tp]
    if position < begin:
        report_data_loss(part.settings.fail_on_data_loss,
                         f"cannot read offsets [{position}, {min(begin, part.until_offset)}) of "
                         f"{tp.topic}-{tp.partition}: the log starts at {begin} now")
        return min(begin, part.until_offset)
    report_data_loss(part.settings.fail_on_data_loss,
                     f"cannot read offsets [{max(position, end)}, {part.until_offset}) of {tp.topic}-{tp.partition}: "
                     f"the log ends at {end} now (it was truncated)")
    return part.until_offset


def _after_stall(consumer: Any, tp: TopicPartition, position: int, part: OffsetRangePartition,
                 timed_out: bool) -> int:
    """Nothing arrived for a while: the log may have been truncated below the range's end (data
    loss), or a broker is slow (give up after pollTimeoutMs)."""
    end = consumer.end_offsets([tp])[tp]
    if end <= position:
        report_data_loss(part.settings.fail_on_data_loss,
                         f"offsets [{position}, {part.until_offset}) of {tp.topic}-{tp.partition} are not there: "
                         f"the log ends at {end} now")
        return part.until_offset
    if not timed_out:
        return position
    raise KafkaTimeoutError(f"no records of {tp.topic}-{tp.partition} from offset {position} arrived within "
                        f"{part.settings.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs) although the log ends "
                        f"at {end}")


# --- readers ---------------------------------------------------------------------------------------


class KafkaliteBatchReader(DataSourceReader):
    """Batch reads: partitions() plans on the driver, read() runs on executors."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = self.options
        cluster = ClusterClient(options.settings.bootstrap_servers)
        try:
            cluster.check_assigned(options.subscription)
            partitions = cluster.partitions(options.subscription)
            start = cluster.resolve(options.starting, partitions, starting=True, strategy=options.starting_strategy)
            end = cluster.resolve(options.ending, partitions, starting=False)
        finally:
            cluster.close()
        for tp in partitions:
            if start[tp] > end[tp]:
                raise SparkOptionError(options.starting.option,
                                       f"the starting offset {start[tp]} of {tp.topic}-{tp.partition} is after the "
                                       f"ending offset {end[tp]} ({options.ending.option})")
        return list(plan_partitions(start, end, options.settings, options.min_partitions,
                                    options.max_records_per_partition))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRangePartition):
            return iter(())  # Spark hands one empty partition to a plan without partitions
        return read_offset_range(partition)


class KafkaliteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads. Planning methods run in one long-lived driver process; read() runs on
    executors from a pickled copy (the cluster client and timing state are not pickled)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._cluster: ClusterClient | None = None
        self._available_now_target: Offsets | None = None
        self._last_trigger_ms = 0.0
        self._latest_seen: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_cluster": None, "_available_now_target": None, "_last_trigger_ms": 0.0,
                "_latest_seen": None}

    @property
    def cluster(self) -> ClusterClient:
        if self._cluster is None:
            self._cluster = ClusterClient(self.options.settings.bootstrap_servers)
        return self._cluster

    # -- planning (driver) ------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        options = self.options
        self.cluster.check_assigned(options.subscription)
        partitions = self.cluster.partitions(options.subscription)
        start = self.cluster.resolve(options.starting, partitions, starting=True, strategy=options.starting_strategy)
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        partitions = self.cluster.partitions(self.options.subscription)
        self._available_now_target = self.cluster.latest(partitions)

    def _latest(self) -> Offsets:
        if self._available_now_target is not None:
            return dict(self._available_now_target)
        partitions = self.cluster.partitions(self.options.subscription)
        return self.cluster.latest(partitions)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offsets_from_json(start)
        latest = self._latest()
        self._latest_seen = latest
        if isinstance(limit, ReadAllAvailable):
            return offsets_to_json(latest)
        new_partitions = [tp for tp in latest if tp not in begin]
        earliest_of_new = self.cluster.earliest(new_partitions) if new_partitions else {}
        minimum = self.options.min_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            minimum = limit.min_rows
        if minimum is not None and self._available_now_target is None and self._delay(minimum, begin, latest,
                                                                                       earliest_of_new):
            return start
        if isinstance(limit, ReadMaxRows):
            return offsets_to_json(rate_limit(limit.max_rows, begin, latest, earliest_of_new))
        return offsets_to_json(latest)

    def _delay(self, minimum: int, begin: Offsets, latest: Offsets, earliest_of_new: Offsets) -> bool:
        """minOffsetsPerTrigger: wait for more records unless maxTriggerDelay has passed."""
        now = time.time() * 1000
        if now - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        available = sum(max(0, until - begin.get(tp, earliest_of_new.get(tp, until))) for tp, until in latest.items())
        if available < minimum:
            return True
        self._last_trigger_ms = now
        return False

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return offsets_to_json(self._latest_seen) if self._latest_seen is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        pause_for_tests("source-planned")
        options = self.options
        begin = offsets_from_json(start)
        until = offsets_from_json(end)
        fail = options.settings.fail_on_data_loss
        gone = sorted(set(begin) - set(until))
        if gone:
            report_data_loss(fail, "partitions " + ", ".join(f"{tp.topic}-{tp.partition}" for tp in gone)
                             + " are gone")
        new = [tp for tp in until if tp not in begin]
        if new:
            earliest = self.cluster.earliest(new)
            for tp in new:
                if earliest[tp] != 0:
                    report_data_loss(fail, f"added partition {tp.topic}-{tp.partition} starts from {earliest[tp]} "
                                           f"instead of 0")
                begin[tp] = earliest[tp]
        for tp in sorted(until):
            if until[tp] < begin[tp]:
                report_data_loss(fail, f"the offset of {tp.topic}-{tp.partition} went back from {begin[tp]} to "
                                       f"{until[tp]}")
                begin[tp] = until[tp]
        return list(plan_partitions({tp: begin[tp] for tp in until}, until, options.settings, options.min_partitions,
                                    options.max_records_per_partition))

    def commit(self, end: dict[str, Any]) -> None:
        """Spark checkpoints offsets itself; nothing to keep here."""

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    # -- executors ------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRangePartition):
            return iter(())
        return read_offset_range(partition)


class RejectedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream reader for options that only fail for streaming queries: every planning call
    raises the option error (driver side)."""

    def __init__(self, error: SparkOptionError) -> None:
        self.error = error

    def initialOffset(self) -> dict[str, Any]:
        raise self.error

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        raise self.error

    def getDefaultReadLimit(self) -> ReadLimit:
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        raise self.error

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing was read."""

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise self.error


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

    @classmethod
    def check(cls, schema: StructType, topic_option: str | None) -> SinkColumns:
        fields = {item.name.lower(): item.dataType for item in schema.fields}

        def text_or_binary(name: str) -> bool:
            data_type = fields[name]
            if isinstance(data_type, (StringType, BinaryType)):
                return isinstance(data_type, StringType)
            raise SparkOptionError(name, f"the {name} column must be string or binary, got {data_type.simpleString()}")

        if "value" not in fields:
            raise SparkOptionError("value", "the DataFrame written to kafkalite needs a value column "
                                            "(string or binary)")
        value_is_string = text_or_binary("value")
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
        return cls(value_is_string, key, key_is_string, topic and not topic_option, partition, headers)


SinkRow = tuple[str, int | None, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def _binary_list(column: pa.Array, is_string: bool) -> list[bytes | None]:
    if is_string:
        column = column.cast(pa.binary())
    values: list[bytes | None] = column.to_pylist()
    return values


def arrow_rows(batch: pa.RecordBatch, columns: SinkColumns, topic_option: str | None) -> list[SinkRow]:
    """(topic, partition, key, value, headers) per row of an input Arrow batch."""
    names = {name.lower(): index for index, name in enumerate(batch.schema.names)}
    count = batch.num_rows
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


def _producer(options: SinkOptions, client_id: str) -> Any:
    from kafkalite.client.producer import KafkaProducer

    settings: dict[str, Any] = {"bootstrap_servers": options.bootstrap_servers, "client_id": client_id,
                                "acks": options.acks, "linger_ms": options.linger_ms,
                                "enable_idempotence": options.acks in ("all", "-1")}
    if options.compression_type:
        settings["compression_type"] = options.compression_type
    return KafkaProducer(**settings)


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
        producer = _producer(self.options, "kafkalite-spark-writer")
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


# --- the sink journal (exactly-once streaming writes) ------------------------------------------


@dataclass
class AttemptRecord:
    """One write-task attempt as the journal shows it."""

    key: str
    batch_id: int
    partition_id: int
    done: bool
    started_ms: int
    producer_id: int
    producer_epoch: int


@dataclass
class JournalState:
    committed_batch: int = -1
    attempts: dict[tuple[int, int], list[AttemptRecord]] = field(default_factory=dict)
    keys_by_batch: dict[int, list[str]] = field(default_factory=dict)


class SinkJournal:
    """The sink's journal in a compacted topic (see the module docstring). One sink (streaming
    query id) lives in one partition of the topic. Used by write tasks and by the driver's
    commit; every call opens and closes its own clients."""

    def __init__(self, options: SinkOptions, sink_id: str) -> None:
        self.options = options
        self.sink_id = sink_id
        self.topic = options.journal_topic
        self._partition: int | None = None

    def commit_key(self) -> str:
        return f"{self.sink_id}/commit"

    def attempt_key(self, batch_id: int, partition_id: int, attempt_id: str) -> str:
        return f"{self.sink_id}/attempt/{batch_id}/{partition_id}/{attempt_id}"

    def partition(self) -> int:
        if self._partition is None:
            count = self._ensure_topic()
            self._partition = zlib.crc32(self.sink_id.encode("utf-8")) % count
        return self._partition

    def _ensure_topic(self) -> int:
        from kafkalite.client.admin import KafkaAdminClient
        from kafkalite.client.types import NewTopic
        from kafkalite.errors import TopicAlreadyExistsError

        admin = KafkaAdminClient(bootstrap_servers=self.options.bootstrap_servers, client_id="kafkalite-spark-journal")
        try:
            for _ in range(50):
                described = admin.describe_topics([self.topic])
                if described and not described[0].get("error_code") and described[0]["partitions"]:
                    return len(described[0]["partitions"])
                brokers = len(admin.describe_cluster()["brokers"]) or 1
                try:
                    admin.create_topics([NewTopic(self.topic, JOURNAL_PARTITIONS, min(3, brokers), topic_configs={
                        "cleanup.policy": "compact", "segment.bytes": str(1024 * 1024),
                        "min.cleanable.dirty.ratio": "0.1"})])
                except TopicAlreadyExistsError:
                    pass
                time.sleep(0.1)
            raise KafkaliteError(f"the sink journal topic {self.topic} did not become available")
        finally:
            admin.close()

    def read(self) -> JournalState:
        """Everything the journal holds for this sink (latest value per key)."""
        tp = TopicPartition(self.topic, self.partition())
        consumer = _consumer(self.options.bootstrap_servers, "kafkalite-spark-journal")
        latest: dict[str, tuple[dict[str, Any] | None, int, int]] = {}
        prefix = self.sink_id + "/"
        try:
            consumer.assign([tp])
            begin = consumer.beginning_offsets([tp])[tp]
            end = consumer.end_offsets([tp])[tp]
            for item in _fetch_range(consumer, tp, begin, end, timeout_ms=60_000):
                for record in item.records():
                    key = (record.key or b"").decode("utf-8", errors="replace")
                    if not key.startswith(prefix):
                        continue
                    value = json.loads(record.value) if record.value is not None else None
                    latest[key] = (value, item.batch.producer_id, item.batch.producer_epoch)
        finally:
            consumer.close()
        state = JournalState()
        for key, (value, producer_id, producer_epoch) in latest.items():
            if value is None:
                continue
            if key == self.commit_key():
                state.committed_batch = max(state.committed_batch, int(value["batch_id"]))
            elif value.get("type") == "attempt":
                record = AttemptRecord(key, int(value["batch_id"]), int(value["partition_id"]),
                                       value.get("state") == "done", int(value["started_ms"]), producer_id,
                                       producer_epoch)
                state.attempts.setdefault((record.batch_id, record.partition_id), []).append(record)
                state.keys_by_batch.setdefault(record.batch_id, []).append(key)
        return state

    def record_attempt(self, producer: Any, key: str, batch_id: int, partition_id: int, started_ms: int,
                       done: bool, records: int = 0) -> None:
        value = {"type": "attempt", "batch_id": batch_id, "partition_id": partition_id, "started_ms": started_ms,
                 "state": "done" if done else "started", "records": records}
        producer.send(self.topic, key=key.encode("utf-8"), value=json.dumps(value).encode("utf-8"),
                      partition=self.partition()).get(timeout=60)

    def commit_batch(self, batch_id: int) -> None:
        """Record ``batch_id`` as committed, then drop the attempt records of batches up to it."""
        state = self.read()
        producer = _producer(self.options, "kafkalite-spark-journal")
        try:
            if batch_id > state.committed_batch:
                value = {"type": "commit", "batch_id": batch_id, "committed_ms": int(time.time() * 1000)}
                producer.send(self.topic, key=self.commit_key().encode("utf-8"),
                              value=json.dumps(value).encode("utf-8"), partition=self.partition()).get(timeout=60)
                pause_for_tests("commit")
            stale = [key for number, keys in state.keys_by_batch.items() if number <= batch_id for key in keys]
            for key in stale:
                producer.send(self.topic, key=key.encode("utf-8"), value=None, partition=self.partition())
            producer.flush()
        finally:
            producer.close()


def _fetch_range(consumer: Any, tp: TopicPartition, begin: int, end: int, timeout_ms: int) -> Iterator[Any]:
    """FetchedBatches of ``tp`` covering [begin, end) (an assigned consumer)."""
    if begin >= end:
        return
    consumer.seek(tp, begin)
    position = begin
    deadline = time.monotonic() + timeout_ms / 1000
    while position < end:
        try:
            fetched = consumer.poll_batches(timeout_ms=500)
        except OffsetOutOfRangeError:
            position = max(position, consumer.beginning_offsets([tp])[tp])
            if position >= consumer.end_offsets([tp])[tp]:
                return
            consumer.seek(tp, position)
            continue
        if not fetched:
            if time.monotonic() > deadline:
                raise KafkaliteError(f"reading {tp.topic}-{tp.partition} [{begin}, {end}) stalled at {position}")
            continue
        for item in fetched:
            if item.topic != tp.topic or item.partition != tp.partition:
                continue
            if item.first_offset >= end:
                position = end
                break
            yield item
            position = max(position, item.next_offset)


class WrittenRecords:
    """Records that earlier, unfinished attempts of one write task already put in the topics,
    found by their producer ids; rows matching them are not written again."""

    def __init__(self, options: SinkOptions, attempts: list[AttemptRecord]) -> None:
        self.options = options
        self.producers = {(item.producer_id, item.producer_epoch) for item in attempts if item.producer_id >= 0}
        self.since_ms = min(item.started_ms for item in attempts) - SCAN_CLOCK_MARGIN_MS
        self.by_topic: dict[str, dict[tuple[bytes | None, bytes | None, tuple[Any, ...]], Counter[int]]] = {}

    def _scan(self, topic: str) -> dict[tuple[bytes | None, bytes | None, tuple[Any, ...]], Counter[int]]:
        found: dict[tuple[bytes | None, bytes | None, tuple[Any, ...]], Counter[int]] = {}
        consumer = _consumer(self.options.bootstrap_servers, "kafkalite-spark-sink-scan")
        try:
            partitions = sorted(consumer.partitions_for_topic(topic) or ())
            tps = [TopicPartition(topic, number) for number in partitions]
            if not tps:
                return found
            ends = consumer.end_offsets(tps)
            starts = consumer.offsets_for_times({tp: max(0, self.since_ms) for tp in tps})
            for tp in tps:
                answer = starts.get(tp)
                if answer is None or answer.offset >= ends[tp]:
                    continue
                # one partition at a time: a partition assigned without a position makes poll fail
                consumer.assign([tp])
                for item in _fetch_range(consumer, tp, answer.offset, ends[tp], timeout_ms=120_000):
                    batch = item.batch
                    if (batch.producer_id, batch.producer_epoch) not in self.producers:
                        continue
                    for record in item.records():
                        content = (record.key, record.value, tuple((name, value) for name, value in record.headers))
                        found.setdefault(content, Counter())[record.partition] += 1
        finally:
            consumer.close()
        log.info("sink scan of %s found %d records of earlier attempts", topic,
                 sum(sum(counts.values()) for counts in found.values()))
        return found

    def remove_written(self, rows: list[SinkRow]) -> tuple[list[SinkRow], int]:
        """The rows not written yet, and how many were dropped."""
        kept: list[SinkRow] = []
        dropped = 0
        for row in rows:
            topic, partition, key, value, headers = row
            if topic not in self.by_topic:
                self.by_topic[topic] = self._scan(topic)
            counts = self.by_topic[topic].get((key, value, headers))
            if counts:
                chosen = partition if partition is not None else next(
                    (number for number, left in counts.items() if left > 0), None)
                if chosen is not None and counts.get(chosen, 0) > 0:
                    counts[chosen] -= 1
                    dropped += 1
                    continue
            kept.append(row)
        return kept, dropped


class KafkaliteStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writes, exactly-once per micro-batch through the sink journal (module
    docstring). write() runs on executors; commit()/abort() on the driver, each in a new
    process."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        if not self.options.exactly_once:
            producer = _producer(self.options, "kafkalite-spark-writer")
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
        if any(item.done for item in earlier):
            skipped = sum(batch.num_rows for batch in iterator)
            return WriteResult(skipped=skipped, sink_id=sink_id, batch_id=batch_id, partition_id=partition_id,
                               note="an earlier attempt of this task finished")
        written_before = WrittenRecords(self.options, earlier) if earlier else None
        producer = _producer(self.options, f"kafkalite-spark-sink-{batch_id}-{partition_id}")
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
        options = SourceOptions.parse(self.options, streaming=None)
        return source_schema(options.settings.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaliteBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            options = SourceOptions.parse(self.options, streaming=True)
        except SparkOptionError as error:
            # PySpark 4's stream runner hides an exception raised here behind an
            # UnboundLocalError of its own cleanup; raised from a planning call it is reported
            return RejectedStreamReader(error)
        return KafkaliteStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> KafkaliteBatchWriter:
        if overwrite:
            raise SparkOptionError("mode", "kafkalite topics are append-only: use mode(\"append\")")
        options = SinkOptions.parse(self.options, streaming=False)
        return KafkaliteBatchWriter(options, SinkColumns.check(schema, options.topic))

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaliteStreamWriter:
        options = SinkOptions.parse(self.options, streaming=True)
        return KafkaliteStreamWriter(options, SinkColumns.check(schema, options.topic))


def register(spark: Any) -> None:
    """Register ``format("kafkalite")`` with a SparkSession."""
    spark.dataSource.register(KafkaliteDataSource)


__all__ = [
    "ArrowBatchDecoder", "ClusterClient", "DataLossError", "KafkaliteBatchReader", "KafkaliteBatchWriter",
    "KafkaliteDataSource", "KafkaliteStreamReader", "KafkaliteStreamWriter", "OffsetRangePartition", "SinkJournal",
    "SourceOptions", "SinkOptions", "SparkOptionError", "arrow_schema", "offsets_from_json", "offsets_to_json",
    "plan_partitions", "rate_limit", "read_offset_range", "register",
]
