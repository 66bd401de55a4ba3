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
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


#: The broker's log line formats (``log.format``): one line of text, or one JSON object.
LOG_FORMATS = ("text", "json")


def parse_log_format(value: str) -> str:
    chosen = str(value).strip().lower()
    if chosen not in LOG_FORMATS:
        raise ConfigError(f"log.format must be text or json, got {value!r}")
    return chosen


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

    def with_overrides(self, overrides: Mapping[str, Any]) -> LogConfig:
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
    def from_broker_properties(cls, properties: Mapping[str, str]) -> LogConfig:
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


_BROKER_SETTINGS: dict[str, _Setting] = {
    "broker.id": _Setting("broker_id", parse_int, 0),
    "broker.rack": _Setting("broker_rack", str),
    "listeners": _Setting("listeners", str),
    "advertised.listeners": _Setting("advertised_listeners", str),
    "listener.security.protocol.map": _Setting("listener_security_protocol_map", str),
    "inter.broker.listener.name": _Setting("inter_broker_listener_name", str),
    "zookeeper.connect": _Setting("zookeeper_connect", str),
    "zookeeper.session.timeout.ms": _Setting("zookeeper_session_timeout_ms", parse_int, 1000),
    "zookeeper.connection.timeout.ms": _Setting("zookeeper_connection_timeout_ms", parse_int, 1000),
    "num.partitions": _Setting("num_partitions", parse_int, 1),
    "default.replication.factor": _Setting("default_replication_factor", parse_int, 1),
    "auto.create.topics.enable": _Setting("auto_create_topics_enable", parse_bool),
    "delete.topic.enable": _Setting("delete_topic_enable", parse_bool),
    "replica.lag.time.max.ms": _Setting("replica_lag_time_max_ms", parse_int, 1),
    "replica.fetch.wait.max.ms": _Setting("replica_fetch_wait_max_ms", parse_int, 0),
    "replica.fetch.min.bytes": _Setting("replica_fetch_min_bytes", parse_int, 1),
    "replica.fetch.max.bytes": _Setting("replica_fetch_max_bytes", parse_int, 1),
    "replica.fetch.backoff.ms": _Setting("replica_fetch_backoff_ms", parse_int, 0),
    "replica.high.watermark.checkpoint.interval.ms": _Setting("replica_high_watermark_checkpoint_interval_ms",
                                                              parse_int, 1),
    "log.retention.check.interval.ms": _Setting("log_retention_check_interval_ms", parse_int, 1),
    "log.flush.offset.checkpoint.interval.ms": _Setting("log_flush_offset_checkpoint_interval_ms", parse_int, 1),
    "log.flush.scheduler.interval.ms": _Setting("log_flush_scheduler_interval_ms", parse_int, 1),
    "log.cleaner.enable": _Setting("log_cleaner_enable", parse_bool),
    "log.cleaner.backoff.ms": _Setting("log_cleaner_backoff_ms", parse_int, 1),
    "controlled.shutdown.enable": _Setting("controlled_shutdown_enable", parse_bool),
    "controlled.shutdown.max.retries": _Setting("controlled_shutdown_max_retries", parse_int, 0),
    "controlled.shutdown.retry.backoff.ms": _Setting("controlled_shutdown_retry_backoff_ms", parse_int, 0),
    "auto.leader.rebalance.enable": _Setting("auto_leader_rebalance_enable", parse_bool),
    "leader.imbalance.check.interval.seconds": _Setting("leader_imbalance_check_interval_seconds", parse_int, 1),
    "leader.imbalance.per.broker.percentage": _Setting("leader_imbalance_per_broker_percentage", parse_int, 0),
    "offsets.topic.num.partitions": _Setting("offsets_topic_num_partitions", parse_int, 1),
    "offsets.topic.replication.factor": _Setting("offsets_topic_replication_factor", parse_int, 1),
    "offsets.topic.segment.bytes": _Setting("offsets_topic_segment_bytes", parse_int, 14),
    "offsets.retention.minutes": _Setting("offsets_retention_minutes", parse_int, 1),
    "offsets.retention.check.interval.ms": _Setting("offsets_retention_check_interval_ms", parse_int, 1),
    "offsets.commit.timeout.ms": _Setting("offsets_commit_timeout_ms", parse_int, 1),
    "offset.metadata.max.bytes": _Setting("offset_metadata_max_bytes", parse_int, 0),
    "group.min.session.timeout.ms": _Setting("group_min_session_timeout_ms", parse_int, 0),
    "group.max.session.timeout.ms": _Setting("group_max_session_timeout_ms", parse_int, 0),
    "group.initial.rebalance.delay.ms": _Setting("group_initial_rebalance_delay_ms", parse_int, 0),
    "group.max.size": _Setting("group_max_size", parse_int, 1),
    "socket.request.max.bytes": _Setting("socket_request_max_bytes", parse_int, 1024),
    "request.timeout.ms": _Setting("request_timeout_ms", parse_int, 1),
    "transaction.state.log.num.partitions": _Setting("transaction_state_log_num_partitions", parse_int, 1),
    "transaction.state.log.replication.factor": _Setting("transaction_state_log_replication_factor", parse_int, 1),
    "transaction.state.log.min.isr": _Setting("transaction_state_log_min_isr", parse_int, 1),
    "transaction.state.log.segment.bytes": _Setting("transaction_state_log_segment_bytes", parse_int, 14),
    "transaction.max.timeout.ms": _Setting("transaction_max_timeout_ms", parse_int, 1),
    "transactional.id.expiration.ms": _Setting("transactional_id_expiration_ms", parse_int, 1),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": _Setting(
        "transaction_abort_timed_out_transaction_cleanup_interval_ms", parse_int, 1),
    "transaction.remove.expired.transaction.cleanup.interval.ms": _Setting(
        "transaction_remove_expired_transaction_cleanup_interval_ms", parse_int, 1),
    "schema.registry.listeners": _Setting("schema_registry_listeners", str),
    "log.format": _Setting("log_format", parse_log_format),
    "metrics.partition.series.enable": _Setting("metrics_partition_series_enable", parse_bool),
    # TLS (kafkalite.security.tls reads the ssl.* settings themselves, see BrokerConfig.ssl_properties)
    "security.inter.broker.protocol": _Setting("security_inter_broker_protocol", str),
    # Client quotas and ZooKeeper's own security.
    "quota.window.num": _Setting("quota_window_num", parse_int, 2),
    "quota.window.size.seconds": _Setting("quota_window_size_seconds", parse_int, 1),
    "zookeeper.set.acl": _Setting("zookeeper_set_acl", parse_bool),
    "zookeeper.digest.auth": _Setting("zookeeper_digest_auth", str),
    "authorizer.class.name": _Setting("authorizer_class_name", str),
    "super.users": _Setting("super_users", str),
    "allow.everyone.if.no.acl.found": _Setting("allow_everyone_if_no_acl_found", parse_bool),
}

#: The ``authorizer.class.name`` values that turn on kafkalite's ACL authorizer (Kafka's two names too).
AUTHORIZER_CLASS_NAMES = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                          "kafkalite.broker.authorizer.Authorizer")

# Settings that belong to the log (topic defaults), read by LogConfig.from_broker_properties.
_LOG_PROPERTY_NAMES = set(BROKER_TO_TOPIC_NAMES) | {"log.retention.hours", "log.retention.minutes",
                                                     "log.roll.hours", "log.dirs", "log.dir"}


#: The security protocols a listener may use (``listener.security.protocol.map``); any other
#: stops the broker at start (no silent plaintext).
SUPPORTED_SECURITY_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
#: Kafka's TLS settings of a broker: ``ssl.<name>``, or ``listener.name.<listener>.ssl.<name>`` for one listener.
_SSL_PROPERTY = re.compile(r"^(listener\.name\.[a-z0-9_.-]+\.)?ssl\.[a-z.]+$")

#: Kafka's SASL settings of a broker (checked by kafkalite.security.sasl_config at start).
_SASL_PROPERTY = re.compile(
    r"^(listener\.name\.[a-z0-9_-]+\.)?(sasl\.enabled\.mechanisms|sasl\.jaas\.config|"
    r"(plain|scram-sha-256|scram-sha-512|gssapi|oauthbearer)\.sasl\.jaas\.config)$|"
    r"^sasl\.mechanism\.inter\.broker\.protocol$")

#: Kafka's default ``listener.security.protocol.map``.
DEFAULT_SECURITY_PROTOCOLS = {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
                              "SASL_SSL": "SASL_SSL"}


@dataclass(frozen=True)
class Listener:
    """One entry of ``listeners`` or ``advertised.listeners``: a listener name (upper case) and
    an address."""

    name: str
    host: str
    port: int

    @property
    def endpoint(self) -> str:
        """``NAME://host:port``, as Kafka writes it into a broker's registration."""
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True)
class BrokerConfig:
    """One broker's settings from ``server.properties`` (Kafka's names and defaults).

    ``log`` holds the topic-level defaults (``log.*`` settings); ``log_dirs`` comes from
    ``log.dirs`` (or ``log.dir``). Listeners are ``NAME://host:port`` (``http://host:port`` is
    PLAINTEXT), each serving HTTP and Kafka's protocol; ``advertised.listeners``,
    ``listener.security.protocol.map`` and ``inter.broker.listener.name`` have Kafka's meaning
    (PLAINTEXT and SSL listeners; ``ssl.*`` settings are kept in ``ssl_properties``).
    """

    broker_id: int = 0
    broker_rack: str | None = None
    #: ``text`` (the default) or ``json``: one JSON object per log line, for log shippers
    log_format: str = "text"
    listeners: str = "PLAINTEXT://127.0.0.1:9092"
    advertised_listeners: str | None = None
    listener_security_protocol_map: str | None = None
    inter_broker_listener_name: str | None = None
    #: The SASL settings, as given: ``sasl.enabled.mechanisms``, ``sasl.mechanism.inter.broker.protocol``,
    #: ``sasl.jaas.config`` and their ``listener.name.<listener>.`` forms (see
    #: :func:`kafkalite.security.sasl_config.sasl_settings`).
    sasl_properties: tuple[tuple[str, str], ...] = ()
    log_dirs: tuple[str, ...] = ("/tmp/kafkalite-logs",)
    zookeeper_connect: str = "127.0.0.1:2181/kafkalite"
    zookeeper_session_timeout_ms: int = 18_000
    zookeeper_connection_timeout_ms: int = 18_000
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_backoff_ms: int = 1000
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    log_retention_check_interval_ms: int = 300_000
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    log_flush_scheduler_interval_ms: int = 1000
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    auto_leader_rebalance_enable: bool = True
    #: /metrics carries the per-partition log series (start, end, size): off for brokers
    #: hosting so many partitions that a scrape should carry only broker-level figures.
    metrics_partition_series_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600_000
    offsets_commit_timeout_ms: int = 5000
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2_147_483_647
    socket_request_max_bytes: int = 100 * 1024 * 1024
    request_timeout_ms: int = 30_000
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 100 * 1024 * 1024
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    #: ``http://host:port``: also serve the schema registry at the root of this address (it is
    #: always served under ``/registry`` on the broker's listener).
    schema_registry_listeners: str | None = None
    #: Client quotas: rates are measured over ``quota.window.num`` windows of
    #: ``quota.window.size.seconds`` (Kafka's defaults 11 × 1 s).
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    #: ``zookeeper.set.acl=true``: znodes the broker creates get Kafka's secure ACLs (all rights
    #: for the authenticated creator, read for anyone except under /config/users and
    #: /config/brokers); it needs ``zookeeper.digest.auth``.
    zookeeper_set_acl: bool = False
    #: ``user:password``: the broker's ZooKeeper session authenticates with the digest scheme
    #: (what Kafka's JAAS ``Client`` section with ``DigestLoginModule`` does).
    zookeeper_digest_auth: str | None = None
    #: ACL authorization: ``authorizer.class.name`` (empty: none), ``super.users`` (``User:a;User:b``)
    #: and ``allow.everyone.if.no.acl.found`` (see :meth:`authorizer_enabled`).
    authorizer_class_name: str = ""
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
    log: LogConfig = LogConfig()
    unknown: tuple[str, ...] = ()
    #: ``security.inter.broker.protocol``: the listener of that name is the inter-broker one
    #: (an alternative to ``inter.broker.listener.name``, as in Kafka).
    security_inter_broker_protocol: str | None = None
    #: The ``ssl.*`` and ``listener.name.<listener>.ssl.*`` settings, as given (see
    #: :func:`kafkalite.security.tls.listener_ssl_settings`).
    ssl_properties: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> BrokerConfig:
        """Build from parsed properties; bad values raise ConfigError naming the key."""
        changes: dict[str, Any] = {}
        unknown: list[str] = []
        ssl_properties: list[tuple[str, str]] = []
        for name, raw in properties.items():
            setting = _BROKER_SETTINGS.get(name)
            if setting is None and _SSL_PROPERTY.match(name):
                ssl_properties.append((name, raw))
                continue
            if setting is None:
                if name not in _LOG_PROPERTY_NAMES:
                    unknown.append(name)
                continue
            try:
                value = setting.parse(raw)
            except ConfigError as exc:
                raise ConfigError(f"{name}: {exc}") from None
            if setting.minimum is not None and value < setting.minimum:
                raise ConfigError(f"{name} must be at least {setting.minimum}, got {raw!r}")
            changes[setting.attribute] = value
        directories = properties.get("log.dirs") or properties.get("log.dir")
        if directories is not None:
            parts = tuple(part.strip() for part in directories.split(",") if part.strip())
            if not parts:
                raise ConfigError("log.dirs must name at least one directory")
            changes["log_dirs"] = parts
        if changes.get("broker_rack") == "":
            changes["broker_rack"] = None
        # SASL (kafkalite.security.sasl_config reads and checks them, see BrokerConfig.sasl_properties)
        sasl = sorted((name, raw) for name, raw in properties.items() if _SASL_PROPERTY.match(name))
        if sasl:
            changes["sasl_properties"] = tuple(sasl)
            unknown = [name for name in unknown if not _SASL_PROPERTY.match(name)]
        try:
            changes["log"] = LogConfig.from_broker_properties(properties)
        except ConfigError as exc:
            raise ConfigError(f"server properties: {exc}") from None
        config = cls(**changes, unknown=tuple(sorted(unknown)), ssl_properties=tuple(sorted(ssl_properties)))
        config.advertised_listener_list()  # validates the listener settings
        config.inter_broker_listener()
        config.schema_registry_address()
        config.zookeeper_auth_data()
        config.authorizer_enabled()
        return config

    def zookeeper_auth_data(self) -> list[tuple[str, str]]:
        """The authentication the broker's ZooKeeper session sends (``[("digest", "user:pass")]``
        or none); ConfigError for a malformed ``zookeeper.digest.auth`` or for
        ``zookeeper.set.acl=true`` without it (an unauthenticated creator could not write its own
        znodes)."""
        digest = self.zookeeper_digest_auth
        if digest is not None:
            user, colon, password = digest.partition(":")
            if not colon or not user or not password:
                raise ConfigError("zookeeper.digest.auth must be user:password")
        if self.zookeeper_set_acl and digest is None:
            raise ConfigError("zookeeper.set.acl=true needs an authenticated ZooKeeper session: "
                              "set zookeeper.digest.auth=user:password")
        return [("digest", digest)] if digest is not None else []

    @classmethod
    def load(cls, path: str | Path, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
        properties = load_properties(path)
        properties.update(overrides or {})
        return cls.from_properties(properties)

    @staticmethod
    def _parse_listeners(value: str, setting: str) -> tuple[Listener, ...]:
        """``NAME://host:port`` entries, comma-separated; ``http://`` or no name is PLAINTEXT."""
        listeners: list[Listener] = []
        for entry in (part.strip() for part in value.split(",")):
            if not entry:
                continue
            name, separator, address = entry.rpartition("://")
            name = name.upper() if separator and name.lower() != "http" else "PLAINTEXT"
            host, colon, port_text = address.rpartition(":")
            if not colon or not port_text.isdigit() or not 0 <= int(port_text) <= 65535 or not name.replace(
                    "_", "").isalnum():
                raise ConfigError(f"{setting} must look like NAME://host:port[,NAME://host:port], got {value!r}")
            if any(listener.name == name for listener in listeners):
                raise ConfigError(f"{setting} names the listener {name} twice: {value!r}")
            listeners.append(Listener(name, host.strip("[]") or "0.0.0.0", int(port_text)))
        if not listeners:
            raise ConfigError(f"{setting} must name at least one listener, got {value!r}")
        return tuple(listeners)

    def listener_list(self) -> tuple[Listener, ...]:
        """The listeners to bind (``listeners``), each with a supported security protocol
        (:data:`SUPPORTED_SECURITY_PROTOCOLS`) in ``listener.security.protocol.map`` (Kafka's
        default map when unset)."""
        listeners = self._parse_listeners(self.listeners, "listeners")
        protocols = self.security_protocol_map()
        for listener in listeners:
            security = protocols.get(listener.name)
            if security is None:
                raise ConfigError(f"listener {listener.name} has no security protocol in "
                                  "listener.security.protocol.map")
            if security not in SUPPORTED_SECURITY_PROTOCOLS:
                raise ConfigError(f"listener {listener.name} uses {security}: only "
                                  f"{', '.join(sorted(SUPPORTED_SECURITY_PROTOCOLS))} listeners are supported "
                                  "(listener.security.protocol.map)")
        return listeners

    def security_protocol_map(self) -> dict[str, str]:
        """``listener.security.protocol.map`` as listener name → security protocol (Kafka's
        default map when unset)."""
        protocols = dict(DEFAULT_SECURITY_PROTOCOLS)
        if self.listener_security_protocol_map:
            protocols = {}
            for entry in (part.strip() for part in self.listener_security_protocol_map.split(",")):
                name, colon, protocol = entry.partition(":")
                if not colon or not name.strip() or not protocol.strip():
                    raise ConfigError("listener.security.protocol.map must look like NAME:PROTOCOL[,NAME:PROTOCOL], "
                                      f"got {self.listener_security_protocol_map!r}")
                protocols[name.strip().upper()] = protocol.strip().upper()
        return protocols

    def security_protocol(self, listener_name: str) -> str:
        """The security protocol of listener ``listener_name`` (PLAINTEXT, SSL, ...)."""
        return self.security_protocol_map().get(listener_name.upper(), "PLAINTEXT")

    def advertised_listener_list(self) -> tuple[Listener, ...]:
        """What clients are told, per listener: the ``advertised.listeners`` entry of the same
        name, else the listener's own address (a wildcard host advertised as 127.0.0.1)."""
        listeners = self.listener_list()
        advertised = {listener.name: listener for listener in self._parse_listeners(
            self.advertised_listeners, "advertised.listeners")} if self.advertised_listeners else {}
        names = {listener.name for listener in listeners}
        for name in advertised:
            if name not in names:
                raise ConfigError(f"advertised.listeners names {name}, which is not one of the listeners "
                                  f"({', '.join(sorted(names))})")
        for name, entry in advertised.items():
            if entry.port == 0 or entry.host in ("0.0.0.0", "::"):
                raise ConfigError(f"advertised listener {name} must name a host and a port clients can reach")
        return tuple(advertised.get(listener.name) or Listener(
            listener.name, "127.0.0.1" if listener.host in ("0.0.0.0", "::", "") else listener.host, listener.port)
            for listener in listeners)

    def inter_broker_listener(self) -> Listener:
        """The advertised listener brokers reach each other on: ``inter.broker.listener.name``
        (or the listener named after ``security.inter.broker.protocol``; not both), by default
        PLAINTEXT when there is one, else the first listener."""
        advertised = self.advertised_listener_list()
        wanted = (self.inter_broker_listener_name or "").strip().upper()
        by_protocol = (self.security_inter_broker_protocol or "").strip().upper()
        if wanted and by_protocol:
            raise ConfigError("only one of inter.broker.listener.name and security.inter.broker.protocol may be set")
        if by_protocol:
            if by_protocol not in SUPPORTED_SECURITY_PROTOCOLS:
                raise ConfigError(f"security.inter.broker.protocol {by_protocol} is not supported "
                                  f"(only {', '.join(sorted(SUPPORTED_SECURITY_PROTOCOLS))})")
            wanted = by_protocol
        if not wanted:
            wanted = "PLAINTEXT" if any(item.name == "PLAINTEXT" for item in advertised) else advertised[0].name
        for listener in advertised:
            if listener.name == wanted:
                return listener
        raise ConfigError(f"inter.broker.listener.name {wanted} is not one of the listeners "
                          f"({', '.join(item.name for item in advertised)})")

    def listener_address(self) -> tuple[str, int]:
        """(host, port) of the first listener."""
        first = self.listener_list()[0]
        return first.host, first.port

    def schema_registry_address(self) -> tuple[str, int] | None:
        """(host, port) of ``schema.registry.listeners`` (None when unset); anything but one
        ``http://host:port`` is a ConfigError."""
        value = (self.schema_registry_listeners or "").strip()
        if not value:
            return None
        if "," in value or not value.lower().startswith("http://"):
            raise ConfigError(f"schema.registry.listeners must be one http://host:port, got {value!r}")
        listener = self._parse_listeners(value, "schema.registry.listeners")[0]
        return listener.host, listener.port

    def authorizer_enabled(self) -> bool:
        """Whether ACLs are enforced: ``authorizer.class.name`` names the ACL authorizer (one of
        :data:`AUTHORIZER_CLASS_NAMES`); empty means no authorization; anything else, and a
        malformed ``super.users``, is a ConfigError naming the setting."""
        name = self.authorizer_class_name.strip()
        if name and name not in AUTHORIZER_CLASS_NAMES:
            raise ConfigError(f"authorizer.class.name {name!r} is not supported; use one of "
                              f"{', '.join(AUTHORIZER_CLASS_NAMES)} (or leave it empty for no authorization)")
        for user in (part.strip() for part in self.super_users.split(";")):
            if user and (":" not in user or user.startswith(":") or user.endswith(":")):
                raise ConfigError(f"super.users must look like User:a;User:b, got {self.super_users!r}")
        return bool(name)

    def advertised_address(self) -> tuple[str, int]:
        """(host, port) other brokers and kafkalite's HTTP clients are told: the inter-broker
        listener's advertised address."""
        listener = self.inter_broker_listener()
        return listener.host, listener.port

    def is_sasl_listener(self, listener_name: str) -> bool:
        """Whether listener ``listener_name`` authenticates with SASL (SASL_PLAINTEXT or SASL_SSL)."""
        return self.security_protocol(listener_name).startswith("SASL_")
