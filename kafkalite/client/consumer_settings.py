"""The consumer's options and arguments, validated: :class:`ConsumerSettings` and the checks of
the partitions and offsets users pass to the consumer's methods.

``ConsumerSettings.from_options`` turns kafka-python's keyword options (names and defaults are
listed in :mod:`kafkalite.client.consumer`) into one typed value: unknown and security options
refused (:mod:`.options`), ``auto_offset_reset`` and ``isolation_level`` normalised,
deserializers and assignors resolved, ``rebalance_timeout_ms`` defaulting to
``max_poll_interval_ms``, the heartbeat interval checked against the session timeout.
:func:`partitions_argument` and :func:`offsets_argument` turn user arguments into
``TopicPartition`` / ``OffsetAndMetadata`` values or raise ConfigError.

Concurrency: built on the caller's thread before the consumer starts and read-only afterwards;
the argument checks are pure functions. Safe from any thread.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kafkalite import protocol
from kafkalite.client.assignors import Assignor
from kafkalite.client.group_assignment import resolve_assignors
from kafkalite.client.metadata import parse_bootstrap
from kafkalite.client.options import check_common_options
from kafkalite.client.sasl_options import take_sasl_options
from kafkalite.client.types import OffsetAndMetadata, TopicPartition
from kafkalite.errors import ConfigError

# topics whose names start so are the cluster's own (__consumer_offsets): left out of pattern
# subscriptions and topic listings while exclude_internal_topics is on
INTERNAL_TOPIC_PREFIX = "__"


@dataclass
class ConsumerSettings:
    """Validated consumer options (kafka-python names; see :mod:`kafkalite.client.consumer`)."""

    bootstrap_servers: list[str]
    client_id: str = "kafkalite-consumer"
    group_id: str | None = None
    key_deserializer: Callable[[bytes], Any] | None = None
    value_deserializer: Callable[[bytes], Any] | None = None
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    check_crcs: bool = True
    isolation_level: int = protocol.READ_UNCOMMITTED
    allow_auto_create_topics: bool = True
    metadata_max_age_ms: int = 300_000
    max_poll_records: int = 500
    consumer_timeout_ms: float = float("inf")
    exclude_internal_topics: bool = True
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300_000
    rebalance_timeout_ms: int = 300_000
    auto_commit_interval_ms: int = 5000
    assignors: list[Assignor] = field(default_factory=lambda: resolve_assignors(None))
    group_instance_id: str | None = None
    #: (user, password) sent as HTTP Basic (``security_protocol='SASL_PLAINTEXT'``), None without SASL
    sasl_credentials: tuple[str, str] | None = None
    default_offset_commit_callback: Callable[[Any, Any], Any] | None = None
    #: TLS to the brokers (``security_protocol='SSL'`` and the ``ssl_*`` options), None for plaintext
    ssl_context: ssl.SSLContext | None = None

    KNOWN: ClassVar[set[str]] = {
        "bootstrap_servers", "client_id", "group_id", "key_deserializer", "value_deserializer", "fetch_max_wait_ms",
        "fetch_min_bytes", "fetch_max_bytes", "max_partition_fetch_bytes", "request_timeout_ms", "retry_backoff_ms",
        "auto_offset_reset", "enable_auto_commit", "auto_commit_interval_ms", "default_offset_commit_callback",
        "check_crcs", "isolation_level", "allow_auto_create_topics", "metadata_max_age_ms",
        "partition_assignment_strategy", "max_poll_records", "max_poll_interval_ms", "session_timeout_ms",
        "heartbeat_interval_ms", "consumer_timeout_ms", "exclude_internal_topics", "group_instance_id", "client_rack",
        "enable_incremental_fetch_sessions", "rebalance_timeout_ms"
    }

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> ConsumerSettings:
        options = dict(options)
        sasl_credentials = take_sasl_options(options)
        ssl_context = check_common_options(options, cls.KNOWN)
        reset = str(options.get("auto_offset_reset", "latest")).lower()
        reset = {"smallest": "earliest", "largest": "latest"}.get(reset, reset)
        if reset not in ("earliest", "latest", "none"):
            raise ConfigError(f"auto_offset_reset must be earliest, latest or none, got {reset!r}")
        isolation = options.get("isolation_level", "read_uncommitted")
        if isolation not in ("read_uncommitted", "read_committed", 0, 1):
            raise ConfigError(f"isolation_level must be read_uncommitted or read_committed, got {isolation!r}")
        settings = cls(
            bootstrap_servers=parse_bootstrap(options.get("bootstrap_servers", "localhost:9092")),
            client_id=str(options.get("client_id") or "kafkalite-consumer"),
            group_id=options.get("group_id"),
            key_deserializer=_as_function(options.get("key_deserializer"), "key_deserializer"),
            value_deserializer=_as_function(options.get("value_deserializer"), "value_deserializer"),
            fetch_max_wait_ms=_int_option(options, "fetch_max_wait_ms", 500, 0),
            fetch_min_bytes=_int_option(options, "fetch_min_bytes", 1, 0),
            fetch_max_bytes=_int_option(options, "fetch_max_bytes", 52_428_800, 1),
            max_partition_fetch_bytes=_int_option(options, "max_partition_fetch_bytes", 1_048_576, 1),
            request_timeout_ms=_int_option(options, "request_timeout_ms", 30_000, 1),
            retry_backoff_ms=_int_option(options, "retry_backoff_ms", 100, 0),
            auto_offset_reset=reset,
            enable_auto_commit=bool(options.get("enable_auto_commit", True)),
            check_crcs=bool(options.get("check_crcs", True)),
            isolation_level=1 if isolation in ("read_committed", 1) else 0,
            allow_auto_create_topics=bool(options.get("allow_auto_create_topics", True)),
            metadata_max_age_ms=_int_option(options, "metadata_max_age_ms", 300_000, 0),
            max_poll_records=_int_option(options, "max_poll_records", 500, 1),
            consumer_timeout_ms=float(options.get("consumer_timeout_ms", float("inf"))),
            exclude_internal_topics=bool(options.get("exclude_internal_topics", True)),
            session_timeout_ms=_int_option(options, "session_timeout_ms", 45_000, 1),
            heartbeat_interval_ms=_int_option(options, "heartbeat_interval_ms", 3000, 1),
            max_poll_interval_ms=_int_option(options, "max_poll_interval_ms", 300_000, 1),
            auto_commit_interval_ms=_int_option(options, "auto_commit_interval_ms", 5000, 1),
            assignors=resolve_assignors(options.get("partition_assignment_strategy")),
            group_instance_id=options.get("group_instance_id") or None,
            default_offset_commit_callback=options.get("default_offset_commit_callback"),
        )
        settings.rebalance_timeout_ms = _int_option(options, "rebalance_timeout_ms", settings.max_poll_interval_ms, 1)
        if settings.group_id is not None and (not isinstance(settings.group_id, str) or not settings.group_id):
            raise ConfigError(f"group_id must be a non-empty string, got {settings.group_id!r}")
        if settings.group_instance_id is not None and not isinstance(settings.group_instance_id, str):
            raise ConfigError(f"group_instance_id must be a string, got {settings.group_instance_id!r}")
        if settings.heartbeat_interval_ms >= settings.session_timeout_ms:
            raise ConfigError(f"heartbeat_interval_ms ({settings.heartbeat_interval_ms}) must be lower than "
                              f"session_timeout_ms ({settings.session_timeout_ms})")
        callback = settings.default_offset_commit_callback
        if callback is not None and not callable(callback):
            raise ConfigError("default_offset_commit_callback must be callable")
        settings.ssl_context = ssl_context
        settings.sasl_credentials = sasl_credentials
        return settings


def _int_option(options: dict[str, Any], name: str, default: int, minimum: int) -> int:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < minimum:
        raise ConfigError(f"{name} must be an integer ≥ {minimum}, got {value!r}")
    return int(value)


def _as_function(value: Any, name: str) -> Callable[[bytes], Any] | None:
    if value is None:
        return None
    if callable(value):
        function: Callable[[bytes], Any] = value
        return function
    if hasattr(value, "deserialize"):
        deserializer = value

        def deserialize(data: bytes) -> Any:
            return deserializer.deserialize(None, data)

        return deserialize
    raise ConfigError(f"{name} must be callable")


def partitions_argument(partitions: Iterable[Any]) -> list[TopicPartition]:
    """``(topic, partition)`` pairs → TopicPartitions; ConfigError for anything else."""
    result = []
    for item in partitions:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], int)):
            raise ConfigError(f"expected TopicPartition(topic, partition), got {item!r}")
        result.append(TopicPartition(item[0], item[1]))
    return result


def offsets_argument(offsets: Any) -> dict[TopicPartition, OffsetAndMetadata]:
    """``{tp: OffsetAndMetadata | int}`` → ``{TopicPartition: OffsetAndMetadata}``."""
    if not isinstance(offsets, dict):
        raise ConfigError(f"offsets must be a dict of TopicPartition → OffsetAndMetadata, got {offsets!r}")
    result: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in offsets.items():
        (chosen,) = partitions_argument([tp])
        if isinstance(value, OffsetAndMetadata):
            entry = value
        elif isinstance(value, int) and not isinstance(value, bool):
            entry = OffsetAndMetadata(value)
        elif isinstance(value, tuple) and value and isinstance(value[0], int):
            entry = OffsetAndMetadata(*value)
        else:
            raise ConfigError(f"the offset of {tp} must be an OffsetAndMetadata or an int, got {value!r}")
        if entry.offset < 0:
            raise ConfigError(f"the offset of {tp} must not be negative, got {entry.offset}")
        result[chosen] = OffsetAndMetadata(int(entry.offset), str(entry.metadata or ""), int(entry.leader_epoch))
    return result
