"""Options of the kafkalite Spark source and sink: parsing, validation and the source schema.

Spark's option names (case-insensitive) become typed values: :class:`SourceOptions` (with
:class:`Subscription`, :class:`OffsetSpec` and the executor-side :class:`ReadSettings`) and
:class:`SinkOptions`. A bad or unknown option raises :class:`SparkOptionError` naming it. The
errors the source raises while reading (:class:`DataLossError`) live here too.

Concurrency: pure functions and frozen values, safe from any thread.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafkalite import protocol
from kafkalite.client.types import TopicPartition
from kafkalite.errors import ConfigError, KafkaliteError
from kafkalite.security import client_properties

# One logger for the whole data source, as when it was one module: log settings keep working.
log = logging.getLogger("kafkalite.spark")


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
#: The source's isolation levels (option ``kafka.isolation.level``); the first is the default.
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")



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


# --- options -----------------------------------------------------------------------------------


_BOOTSTRAP_KEYS = ("kafkalite.bootstrap.servers", "kafka.bootstrap.servers")
_ISOLATION_KEYS = ("kafkalite.isolation.level", "kafka.isolation.level")
_SOURCE_KEYS = {
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets", "startingtimestamp",
    "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy", "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay",
    "failondataloss", "includeheaders", "minpartitions", "maxrecordsperpartition", "kafkaconsumer.polltimeoutms",
    *_BOOTSTRAP_KEYS, *_ISOLATION_KEYS, "valueformat", "schema.registry.url", "valuesubject", "valueschemaversion",
}
# options Spark itself adds to a writer's (writeStream's checkpointLocation and queryName)
_SPARK_SINK_KEYS = {"checkpointlocation", "queryname", "path"}
_SINK_KEYS = {"topic", "exactlyonce", "sinkjournaltopic", "kafkalite.acks", "kafka.acks", "kafkalite.compression.type",
              "kafka.compression.type", "kafkalite.linger.ms", "kafka.linger.ms", *_SPARK_SINK_KEYS, *_BOOTSTRAP_KEYS,
              "valueformat", "schema.registry.url", "valuesubject", "valueschemaversion"}
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
    "valueformat": "valueFormat", "valuesubject": "valueSubject", "valueschemaversion": "valueSchemaVersion",
}


#: Client security settings, passed through to every client the source or sink opens with the
#: tools' mapping (:mod:`kafkalite.security.client_properties`): ``kafka.security.protocol``,
#: ``kafka.ssl.*``, ``kafka.sasl.*`` (``kafkalite.*`` alike).
_SECURITY_PREFIXES = ("kafka.security.protocol", "kafka.ssl.", "kafka.sasl.", "kafkalite.security.protocol",
                      "kafkalite.ssl.", "kafkalite.sasl.")
#: Client options as (name, value) pairs: picklable, so they travel to the executors.
ClientSecurity = tuple[tuple[str, Any], ...]


def _is_security_key(key: str) -> bool:
    return key.startswith(_SECURITY_PREFIXES)


def _mentioned(name: str, message: str) -> bool:
    """Whether an error ``message`` is about client property ``name`` (or the option it maps to)."""
    return name in message or client_properties.option_name(name) in message


def client_security(options: Mapping[str, str]) -> ClientSecurity:
    """The client security options of the (lowercased) data source ``options``; a setting the
    clients cannot honour is a SparkOptionError naming it (no silent plaintext)."""
    given = {key: value for key, value in options.items() if _is_security_key(key)}
    properties = {key.split(".", 1)[1]: value for key, value in given.items()}
    try:
        mapped = client_properties.pop_security_options(properties)
        from kafkalite.client.options import check_common_options

        check_common_options(dict(mapped), set())  # e.g. a CA file that cannot be read, SASL without support
    except ConfigError as exc:
        named = next((key for key in sorted(given, key=lambda item: (item.endswith("security.protocol"), item))
                      if _mentioned(key.split(".", 1)[1], str(exc))), "kafka.security.protocol")
        raise SparkOptionError(named, str(exc)) from None
    return tuple(sorted(mapped.items()))


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
        if key not in known and not _is_security_key(key):
            hint = ""
            if key.startswith(("kafka.", "kafkalite.")):
                supported = ", ".join(sorted(name for name in known if name.startswith("kafka.")))
                hint = f" (the client settings it takes are {supported}, or kafkalite.* alike)"
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


def _isolation_level(options: Mapping[str, str]) -> str:
    """``kafka.isolation.level`` (or ``kafkalite.isolation.level``): read_committed (default) or
    read_uncommitted, in any letter case."""
    for key in _ISOLATION_KEYS:
        if key in options:
            value = options[key].strip().lower()
            if value in ISOLATION_LEVELS:
                return value
            raise SparkOptionError(key, f"must be read_committed or read_uncommitted, got {options[key]!r}")
    return ISOLATION_LEVELS[0]


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
    #: read_committed (default): records of open or aborted transactions are not read and reads
    #: end at the last stable offset; read_uncommitted: every record up to the high watermark.
    isolation_level: str = ISOLATION_LEVELS[0]
    #: Typed values (valueFormat avro or json), resolved on the driver; None for binary values.
    value_format: ValueFormat | None = None
    #: TLS/SASL client options (``kafka.security.protocol``, ``kafka.ssl.*``, ``kafka.sasl.*``).
    security: ClientSecurity = ()


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
        subscription = Subscription.parse(options)
        settings = ReadSettings(
            bootstrap_servers=_bootstrap(options),
            fail_on_data_loss=_boolean(options, "failondataloss", True),
            include_headers=_boolean(options, "includeheaders", False),
            poll_timeout_ms=_positive_int(options, "kafkaconsumer.polltimeoutms") or DEFAULT_POLL_TIMEOUT_MS,
            isolation_level=_isolation_level(options),
            security=client_security(options),
            value_format=parse_value_format(options, subscription.topics[0] if len(subscription.topics) == 1
                                            else None))
        strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise SparkOptionError("startingOffsetsByTimestampStrategy", f"must be error or latest, got {strategy!r}")
        starting = _offset_spec(options, "starting", streaming) or OffsetSpec(
            "latest" if streaming else "earliest", "startingOffsets")
        ending = _offset_spec(options, "ending", streaming) or OffsetSpec("latest", "endingOffsets")
        delay = DEFAULT_MAX_TRIGGER_DELAY_MS
        if "maxtriggerdelay" in options:
            delay = parse_duration_ms("maxTriggerDelay", options["maxtriggerdelay"])
        return cls(settings=settings, subscription=subscription, starting=starting, ending=ending,
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
    #: Typed values (valueFormat avro or json) for a struct value column; None for binary/string.
    value_format: ValueFormat | None = None
    #: TLS/SASL client options (``kafka.security.protocol``, ``kafka.ssl.*``, ``kafka.sasl.*``).
    security: ClientSecurity = ()

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
                   compression_type=None if compression in ("", "none") else compression, linger_ms=max(0, linger_ms),
                   value_format=parse_value_format(options, topic), security=client_security(options))


# --- typed values (the schema registry; see kafkalite.spark.formats) ----------------------------------


FORMAT_KEYS = frozenset({"valueformat", "schema.registry.url", "valuesubject", "valueschemaversion"})
_FORMATS = {"avro": "AVRO", "json": "JSON"}


@dataclass(frozen=True)
class ValueFormat:
    """A typed value format; ``schema_id``/``schema`` are filled in by :func:`resolve` on the driver."""

    schema_type: str
    registry_url: str
    subject: str
    version: str = "latest"
    schema_id: int = -1
    schema: str = ""


def parse_value_format(options: Mapping[str, str], topic: str | None) -> ValueFormat | None:
    """The value format the (lower-cased) options ask for, or None for binary values."""
    kind = options.get("valueformat", "binary").strip().lower()
    if kind == "binary":
        for key in FORMAT_KEYS - {"valueformat"}:
            if key in options:
                raise SparkOptionError(key, "only applies with valueFormat avro or json")
        return None
    if kind not in _FORMATS:
        raise SparkOptionError("valueFormat", f"must be binary, avro or json, got {kind!r}")
    url = options.get("schema.registry.url", "").strip()
    if not url:
        raise SparkOptionError("schema.registry.url", f"valueFormat {kind} needs the schema registry's URL")
    subject = options.get("valuesubject", "").strip()
    if not subject:
        if not topic:
            raise SparkOptionError("valueSubject", "name the subject (or read or write exactly one topic, whose "
                                                   "<topic>-value subject is used)")
        subject = f"{topic}-value"
    version = options.get("valueschemaversion", "latest").strip().lower()
    if version != "latest" and not version.isdigit():
        raise SparkOptionError("valueSchemaVersion", f"must be latest or a version number, got {version!r}")
    return ValueFormat(_FORMATS[kind], url, subject, version)


def source_schema(include_headers: bool, value_ddl: str | None = None) -> str:
    """The source schema; ``value_ddl`` types the value column (valueFormat avro or json)."""
    base = BASE_SCHEMA if value_ddl is None else BASE_SCHEMA.replace("value binary", f"value {value_ddl}")
    return f"{base}, {HEADERS_FIELD}" if include_headers else base
