"""Typed configuration values with Kafka's names and defaults, and the properties-file parser.

:class:`LogConfig` is one partition log's settings; its fields map one to one onto Kafka's
topic-level names (``segment.bytes``, ``retention.ms``, ...). Broker-level defaults use the
``log.`` prefixed names of ``server.properties`` (``log.segment.bytes``, ``log.retention.hours``,
...), and topic overrides use the bare names, exactly as in Kafka.

Values are immutable; build a changed copy with :meth:`LogConfig.with_overrides`.
Thread-safety: immutable values, safe from any thread.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from kafkalite.errors import ConfigError

CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"

_INT64_MAX = (1 << 63) - 1


def parse_bool(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise ConfigError(f"expected true or false, got {value!r}")


def parse_int(value: str | int) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"expected an integer, got {value!r}") from None


def parse_float(value: str | float) -> float:
    try:
        return float(str(value).strip())
    except ValueError:
        raise ConfigError(f"expected a number, got {value!r}") from None


def parse_cleanup_policy(value: str) -> str:
    policies = sorted({part.strip().lower() for part in str(value).split(",") if part.strip()})
    if not policies or any(policy not in (CLEANUP_DELETE, CLEANUP_COMPACT) for policy in policies):
        raise ConfigError(f"cleanup.policy must be delete, compact or both, got {value!r}")
    return ",".join(policies)


@dataclass(frozen=True)
class _Setting:
    attribute: str
    parse: Callable[[Any], Any]
    minimum: int | float | None = None


# Kafka topic-level config name → LogConfig field.
_TOPIC_SETTINGS: dict[str, _Setting] = {
    "segment.bytes": _Setting("segment_bytes", parse_int, 14),
    "segment.ms": _Setting("segment_ms", parse_int, 1),
    "segment.index.bytes": _Setting("segment_index_bytes", parse_int, 8),
    "index.interval.bytes": _Setting("index_interval_bytes", parse_int, 0),
    "retention.ms": _Setting("retention_ms", parse_int, -1),
    "retention.bytes": _Setting("retention_bytes", parse_int, -1),
    "cleanup.policy": _Setting("cleanup_policy", parse_cleanup_policy),
    "delete.retention.ms": _Setting("delete_retention_ms", parse_int, 0),
    "min.compaction.lag.ms": _Setting("min_compaction_lag_ms", parse_int, 0),
    "max.compaction.lag.ms": _Setting("max_compaction_lag_ms", parse_int, 1),
    "min.cleanable.dirty.ratio": _Setting("min_cleanable_dirty_ratio", parse_float, 0),
    "file.delete.delay.ms": _Setting("file_delete_delay_ms", parse_int, 0),
    "flush.messages": _Setting("flush_messages", parse_int, 1),
    "flush.ms": _Setting("flush_ms", parse_int, 0),
    "max.message.bytes": _Setting("max_message_bytes", parse_int, 0),
    "message.timestamp.type": _Setting("message_timestamp_type", str),
    "min.insync.replicas": _Setting("min_insync_replicas", parse_int, 1),
    "unclean.leader.election.enable": _Setting("unclean_leader_election_enable", parse_bool),
    "compression.type": _Setting("compression_type", str),
}

# Broker-level (server.properties) name → topic-level name it provides the default for.
BROKER_TO_TOPIC_NAMES: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "compression.type": "compression.type",
}
_HOUR_MS = 3600 * 1000
_MINUTE_MS = 60 * 1000


@dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log, named after Kafka's topic-level configs.

    Defaults are Kafka's. ``flush_messages``/``flush_ms`` default to "never force": durability
    comes from replication, as in Kafka; set ``flush.messages=1`` for an fsync per append.
    """

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * _HOUR_MS
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * _HOUR_MS
    retention_bytes: int = -1
    cleanup_policy: str = CLEANUP_DELETE
    delete_retention_ms: int = 24 * _HOUR_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _INT64_MAX
    min_cleanable_dirty_ratio: float = 0.5
    file_delete_delay_ms: int = 60_000
    flush_messages: int = _INT64_MAX
    flush_ms: int = _INT64_MAX
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: str = "CreateTime"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"

    def __post_init__(self) -> None:
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ConfigError("message.timestamp.type must be CreateTime or LogAppendTime")
        if self.compression_type not in ("producer", "none", "gzip", "lz4", "zstd", "uncompressed"):
            raise ConfigError(f"unsupported compression.type {self.compression_type!r}")

    @property
    def compact(self) -> bool:
        return CLEANUP_COMPACT in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return CLEANUP_DELETE in self.cleanup_policy.split(",")

    def with_overrides(self, overrides: Mapping[str, Any]) -> "LogConfig":
        """A copy with Kafka topic-level names applied (``{"retention.ms": "1000"}``)."""
        changes: dict[str, Any] = {}
        for name, raw in overrides.items():
            setting = _TOPIC_SETTINGS.get(name)
            if setting is None:
                raise ConfigError(f"unknown topic config {name!r}")
            try:
                value = setting.parse(raw)
            except ConfigError as exc:
                raise ConfigError(f"{name}: {exc}") from None
            if setting.minimum is not None and value < setting.minimum:
                raise ConfigError(f"{name} must be at least {setting.minimum}, got {raw!r}")
            changes[setting.attribute] = value
        return dataclasses.replace(self, **changes)

    def to_topic_configs(self) -> dict[str, str]:
        """Every setting under its Kafka topic-level name, as strings."""
        result: dict[str, str] = {}
        for name, setting in _TOPIC_SETTINGS.items():
            value = getattr(self, setting.attribute)
            result[name] = str(value).lower() if isinstance(value, bool) else str(value)
        return result

    @classmethod
    def from_broker_properties(cls, properties: Mapping[str, str]) -> "LogConfig":
        """Broker defaults from server.properties names (``log.retention.hours`` etc.)."""
        overrides: dict[str, str] = {}
        for broker_name, topic_name in BROKER_TO_TOPIC_NAMES.items():
            if broker_name in properties:
                overrides[topic_name] = properties[broker_name]
        # Kafka's precedence: *.ms over *.minutes over *.hours.
        if "log.retention.ms" not in properties:
            if "log.retention.minutes" in properties:
                overrides["retention.ms"] = str(parse_int(properties["log.retention.minutes"]) * _MINUTE_MS)
            elif "log.retention.hours" in properties:
                overrides["retention.ms"] = str(parse_int(properties["log.retention.hours"]) * _HOUR_MS)
        if "log.roll.ms" not in properties and "log.roll.hours" in properties:
            overrides["segment.ms"] = str(parse_int(properties["log.roll.hours"]) * _HOUR_MS)
        return cls().with_overrides(overrides)


def topic_config_names() -> list[str]:
    """Every topic-level config name kafkalite understands."""
    return sorted(_TOPIC_SETTINGS)


def load_properties(path: str | Path) -> dict[str, str]:
    """Parse a Java-style .properties file (``key=value`` or ``key: value``, ``#``/``!`` comments,
    backslash line continuation). Raises ConfigError with the line number on a malformed line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read properties file {path}: {exc.strerror}") from exc
    return parse_properties(text, str(path))


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    result: dict[str, str] = {}
    pending = ""
    start_line = 0
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip() if not pending else raw_line.lstrip()
        if not pending:
            start_line = number
            if not line or line[0] in "#!":
                continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        separator_positions = [index for index in (line.find("="), line.find(":")) if index >= 0]
        if not separator_positions:
            raise ConfigError(f"{source}:{start_line}: expected key=value, got {raw_line.strip()!r}")
        index = min(separator_positions)
        key = line[:index].strip()
        if not key:
            raise ConfigError(f"{source}:{start_line}: empty key")
        result[key] = line[index + 1:].strip()
    if pending:
        raise ConfigError(f"{source}: file ends inside a continued line")
    return result
