"""The producer's options, validated once: :class:`ProducerSettings`.

``ProducerSettings.from_options`` turns kafka-python's keyword options (names and current
Kafka defaults are listed in :mod:`kafkalite.client.producer`) into one typed value, resolving
the idempotence rules (switched off silently when left at its default and ``acks`` is not
``all``; a conflicting explicit ``enable_idempotence=True`` is a ConfigError). The producer
core and its sender (:mod:`.sender`) read it; nothing writes it after construction.

Concurrency: built on the caller's thread before the producer starts; read-only afterwards,
so safe to read from any thread.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kafkalite import protocol
from kafkalite.client.metadata import parse_bootstrap
from kafkalite.client.options import check_common_options
from kafkalite.client.sasl_options import take_sasl_options
from kafkalite.errors import ConfigError
from kafkalite.record.codec import Compression, has_codec

_MAX_RETRIES = 2_147_483_647


def _positive_int(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, float) and value == float("inf"):
        return _MAX_RETRIES
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < minimum:
        raise ConfigError(f"{name} must be an integer ≥ {minimum}, got {value!r}")
    return int(value)


@dataclass
class ProducerSettings:
    """Validated producer options (kafka-python names; see :mod:`kafkalite.client.producer`)."""

    bootstrap_servers: list[str]
    client_id: str = "kafkalite-producer"
    key_serializer: Callable[[Any], bytes | None] | None = None
    value_serializer: Callable[[Any], bytes | None] | None = None
    acks: int = -1
    enable_idempotence: bool = True
    compression: int = Compression.NONE
    retries: int = _MAX_RETRIES
    batch_size: int = 16384
    linger_ms: int = 0
    partitioner: Any = None
    max_block_ms: int = 60_000
    max_request_size: int = 1_048_576
    allow_auto_create_topics: bool = True
    metadata_max_age_ms: int = 300_000
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    buffer_memory: int = 33_554_432
    max_in_flight_requests_per_connection: int = 5
    metadata_request_timeout_ms: int = 3000
    socket_connection_setup_timeout_ms: int = 10_000
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000
    #: (user, password) sent as HTTP Basic (``security_protocol='SASL_PLAINTEXT'``), None without SASL
    sasl_credentials: tuple[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: TLS to the brokers (``security_protocol='SSL'`` and the ``ssl_*`` options), None for plaintext
    ssl_context: ssl.SSLContext | None = None

    KNOWN: ClassVar[set[str]] = {
        "bootstrap_servers", "client_id", "key_serializer", "value_serializer", "acks", "enable_idempotence",
        "compression_type", "retries", "batch_size", "max_batch_size", "linger_ms", "partitioner", "max_block_ms",
        "max_request_size", "allow_auto_create_topics", "metadata_max_age_ms", "retry_backoff_ms", "request_timeout_ms",
        "delivery_timeout_ms", "buffer_memory", "max_in_flight_requests_per_connection", "transactional_id",
        "metadata_request_timeout_ms", "socket_connection_setup_timeout_ms", "transaction_timeout_ms"
    }

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> ProducerSettings:
        options = dict(options)
        sasl_credentials = take_sasl_options(options)
        ssl_context = check_common_options(options, cls.KNOWN)
        transactional_id = options.get("transactional_id")
        if transactional_id is not None:
            if not isinstance(transactional_id, str) or not transactional_id:
                raise ConfigError(f"transactional_id must be a non-empty string, got {transactional_id!r}")
            if options.get("enable_idempotence") is False:
                raise ConfigError("transactional_id needs enable_idempotence=True")
            if protocol.parse_acks(options.get("acks", "all")) != -1:
                raise ConfigError("transactional_id needs acks='all'")
        explicit_idempotence = "enable_idempotence" in options
        acks_value = options.get("acks", "all")
        acks = protocol.parse_acks(acks_value) if acks_value is not None else -1
        batch_size = options.get("batch_size", options.get("max_batch_size", 16384))
        compression_name = options.get("compression_type")
        if compression_name in (None, "none", "None"):
            compression = Compression.NONE
        else:
            compression = Compression.from_name(str(compression_name))
            if not has_codec(compression):
                raise ConfigError(f"compression_type {compression_name!r} is not available in this installation")
        settings = cls(
            bootstrap_servers=parse_bootstrap(options.get("bootstrap_servers", "localhost:9092")),
            client_id=str(options.get("client_id") or "kafkalite-producer"),
            key_serializer=options.get("key_serializer"),
            value_serializer=options.get("value_serializer"),
            acks=acks,
            enable_idempotence=bool(options.get("enable_idempotence", True)),
            compression=compression,
            retries=_positive_int("retries", options.get("retries", _MAX_RETRIES)),
            batch_size=_positive_int("batch_size", batch_size, 1),
            linger_ms=_positive_int("linger_ms", options.get("linger_ms", 0)),
            partitioner=options.get("partitioner"),
            max_block_ms=_positive_int("max_block_ms", options.get("max_block_ms", 60_000)),
            max_request_size=_positive_int("max_request_size", options.get("max_request_size", 1_048_576), 1),
            allow_auto_create_topics=bool(options.get("allow_auto_create_topics", True)),
            metadata_max_age_ms=_positive_int("metadata_max_age_ms", options.get("metadata_max_age_ms", 300_000)),
            retry_backoff_ms=_positive_int("retry_backoff_ms", options.get("retry_backoff_ms", 100)),
            request_timeout_ms=_positive_int("request_timeout_ms", options.get("request_timeout_ms", 30_000), 1),
            delivery_timeout_ms=_positive_int("delivery_timeout_ms", options.get("delivery_timeout_ms", 120_000), 1),
            buffer_memory=_positive_int("buffer_memory", options.get("buffer_memory", 33_554_432), 1),
            max_in_flight_requests_per_connection=_positive_int(
                "max_in_flight_requests_per_connection", options.get("max_in_flight_requests_per_connection", 5), 1),
            metadata_request_timeout_ms=_positive_int(
                "metadata_request_timeout_ms", options.get("metadata_request_timeout_ms", 3000), 1),
            socket_connection_setup_timeout_ms=_positive_int(
                "socket_connection_setup_timeout_ms", options.get("socket_connection_setup_timeout_ms", 10_000), 1),
            transactional_id=transactional_id,
            ssl_context=ssl_context,
            transaction_timeout_ms=_positive_int("transaction_timeout_ms",
                                                 options.get("transaction_timeout_ms", 60_000), 1),
        )
        for name in ("key_serializer", "value_serializer"):
            function = getattr(settings, name)
            if function is not None and not callable(function):
                if hasattr(function, "serialize"):
                    serializer = function
                    setattr(settings, name, lambda data, serializer=serializer: serializer.serialize(None, data))
                else:
                    raise ConfigError(f"{name} must be callable")
        if settings.enable_idempotence:
            conflict = None
            if settings.acks != -1:
                conflict = f"acks={acks_value!r} (idempotence needs acks='all')"
            elif settings.max_in_flight_requests_per_connection > 5:
                conflict = "max_in_flight_requests_per_connection > 5"
            elif settings.retries == 0:
                conflict = "retries=0"
            if conflict:
                if explicit_idempotence:
                    raise ConfigError(f"enable_idempotence=True conflicts with {conflict}")
                settings.enable_idempotence = False
        settings.sasl_credentials = sasl_credentials
        return settings

    @property
    def in_flight_per_partition(self) -> int:
        if self.enable_idempotence:
            return self.max_in_flight_requests_per_connection
        return 1 if self.retries > 0 else self.max_in_flight_requests_per_connection

