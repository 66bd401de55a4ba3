"""Producers: :class:`KafkaProducer` (kafka-python's API, blocking) and :class:`AIOKafkaProducer`
(aiokafka's shape, asyncio), both thin front-ends over one :class:`ProducerCore`.

Options and defaults are kafka-python's names with *current Kafka* defaults where kafka-python
is older: ``acks='all'``, ``enable_idempotence=True``, ``linger_ms=0``, ``retries`` unbounded
(limited by ``delivery_timeout_ms`` = 120 s), ``batch_size=16384``, ``buffer_memory=32 MiB``,
``max_request_size=1 MiB``, ``max_block_ms=60 s``, ``max_in_flight_requests_per_connection=5``,
``compression_type=None`` (or ``'gzip'``, ``'lz4'``, ``'zstd'``), ``request_timeout_ms=30 s``,
``socket_connection_setup_timeout_ms=10 s`` (connect and channel handshake, Kafka's name) and
``metadata_request_timeout_ms=3 s`` (how long one metadata request may take before the next
broker is asked; capped by ``request_timeout_ms``). As in Kafka, idempotence is
switched off silently when it was left at its default and ``acks`` is not ``all``, and a
conflicting explicit ``enable_idempotence=True`` is a ConfigError. Without idempotence and with
retries, one batch per partition is in flight, so retries never reorder. Serializers are not
called for ``None`` (a None value stays a tombstone). Options of kafka-python that concern its
socket layer (``api_version``, ``socket_options``, ``reconnect_backoff_ms``, metrics...) are
accepted and ignored; security options other than PLAINTEXT, and transactions, are refused.

Record path: ``send()`` serializes, looks the topic up in the metadata snapshot (waiting up to
``max_block_ms`` for an unknown topic), picks the partition (explicit, key → murmur2, keyless →
sticky, see :mod:`kafkalite.client.partitioner`), and appends to the accumulator's lists —
encoding happens once per batch in the sender (:mod:`kafkalite.client.sender`). The bulk API
:meth:`KafkaProducer.send_batch` takes lists of values (and keys) and turns them directly into
whole batches of up to ``max_request_size`` bytes, with one future for all of them.

Concurrency: the core's state lives on one event loop — the private loop thread of a
KafkaProducer (:mod:`kafkalite.client._loop`), the caller's loop for AIOKafkaProducer — except
the accumulator append, which ``KafkaProducer.send`` calls from the user's threads (it is
thread-safe). A KafkaProducer may be shared by threads; callbacks run on its I/O thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kafkalite import protocol
from kafkalite.client._loop import LoopThread
from kafkalite.client.accumulator import (
    BATCH_OVERHEAD,
    RECORD_OVERHEAD,
    BatchResult,
    BulkFuture,
    RecordAccumulator,
    RecordFuture,
    chunk_bounds,
)
from kafkalite.client.metadata import MetadataManager, parse_bootstrap
from kafkalite.client.partitioner import DefaultPartitioner, murmur2, to_positive
from kafkalite.client.sender import Sender
from kafkalite.client.types import TopicPartition
from kafkalite.errors import (
    ConfigError,
    IllegalStateError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    UnknownTopicOrPartitionError,
    UnrecognizedClientOptionError,
)
from kafkalite.record.codec import Compression, has_codec

log = logging.getLogger(__name__)

_MAX_RETRIES = 2_147_483_647
# kafka-python options about its own socket layer, metrics or SASL/SSL defaults: accepted, no effect.
IGNORED_OPTIONS = frozenset({
    "api_version", "api_version_auto_timeout_ms", "bootstrap_timeout_ms", "client_dns_lookup",
    "connections_max_idle_ms", "kafka_client", "metric_group_prefix", "metric_reporters", "metrics_enabled",
    "metrics_num_samples", "metrics_sample_window_ms", "receive_buffer_bytes", "receive_message_max_bytes",
    "reconnect_backoff_max_ms", "reconnect_backoff_ms", "selector", "send_buffer_bytes", "socket_options",
    "transaction_timeout_ms", "loop", "ssl_check_hostname", "sasl_kerberos_service_name", "proxy_url",
    "socks5_proxy", "wakeup_timeout_ms",
})
_SECURITY_OPTIONS = ("ssl_context", "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile", "ssl_password",
                     "ssl_ciphers", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
                     "sasl_kerberos_name", "sasl_kerberos_domain_name", "sasl_oauth_token_provider")


def check_common_options(options: dict[str, Any], known: set[str]) -> None:
    """Refuse unknown options and security settings this installation cannot honour."""
    protocol_name = str(options.pop("security_protocol", "PLAINTEXT") or "PLAINTEXT").upper()
    if protocol_name != "PLAINTEXT":
        raise ConfigError(f"security_protocol {protocol_name!r} is not supported; brokers speak plain HTTP")
    for name in _SECURITY_OPTIONS:
        if options.pop(name, None) is not None:
            raise ConfigError(f"{name} is not supported; brokers speak plain HTTP without authentication")
    unknown = set(options) - known - IGNORED_OPTIONS
    if unknown:
        raise UnrecognizedClientOptionError(f"unrecognized options: {sorted(unknown)}")


def _positive_int(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, float) and value == float("inf"):
        return _MAX_RETRIES
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < minimum:
        raise ConfigError(f"{name} must be an integer ≥ {minimum}, got {value!r}")
    return int(value)


class _CallablePartitioner:
    """Adapts kafka-python's ``partitioner(key_bytes, all_partitions, available)`` callables."""

    def __init__(self, function: Callable[..., int], default: DefaultPartitioner) -> None:
        self.function = function
        self.default = default

    def partition(self, topic: str, key_bytes: bytes | None, all_partitions: Sequence[int],
                  available_partitions: Sequence[int], record_size: int, *,
                  explicit_partition: int | None = None) -> int:
        if explicit_partition is not None:
            return self.default.partition(topic, key_bytes, all_partitions, available_partitions, record_size,
                                          explicit_partition=explicit_partition)
        return int(self.function(key_bytes, list(all_partitions), list(available_partitions)))

    def on_new_batch(self, topic: str, previous_partition: int) -> None:
        return None


@dataclass
class ProducerSettings:
    """Validated producer options (kafka-python names; see the module docstring)."""

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
    extra: dict[str, Any] = field(default_factory=dict)

    KNOWN: ClassVar[set[str]] = {
        "bootstrap_servers", "client_id", "key_serializer", "value_serializer", "acks", "enable_idempotence",
        "compression_type", "retries", "batch_size", "max_batch_size", "linger_ms", "partitioner", "max_block_ms",
        "max_request_size", "allow_auto_create_topics", "metadata_max_age_ms", "retry_backoff_ms", "request_timeout_ms",
        "delivery_timeout_ms", "buffer_memory", "max_in_flight_requests_per_connection", "transactional_id",
        "metadata_request_timeout_ms", "socket_connection_setup_timeout_ms"
    }

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> ProducerSettings:
        options = dict(options)
        check_common_options(options, cls.KNOWN)
        if options.get("transactional_id") is not None:
            raise ConfigError("transactions (transactional_id) are not supported yet")
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
        return settings

    @property
    def in_flight_per_partition(self) -> int:
        if self.enable_idempotence:
            return self.max_in_flight_requests_per_connection
        return 1 if self.retries > 0 else self.max_in_flight_requests_per_connection


_NEEDS_METADATA = object()


class _Prepared:
    """One serialized record waiting for its partition and a place in the accumulator."""

    __slots__ = ("topic", "key", "value", "headers", "partition", "timestamp", "size")

    def __init__(self, topic: str, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes | None]] | None, partition: int | None, timestamp: int,
                 size: int) -> None:
        self.topic = topic
        self.key = key
        self.value = value
        self.headers = headers
        self.partition = partition
        self.timestamp = timestamp
        self.size = size


class ProducerCore:
    """What both producers share: settings, metadata, partitioner, accumulator and sender.

    ``prepare``/``place`` are the record path (any thread); the coroutines run on the core's
    loop. See the module docstring.
    """

    def __init__(self, settings: ProducerSettings) -> None:
        from kafkalite.transport import AsyncTransport

        self.settings = settings
        self.transport = AsyncTransport(request_timeout_ms=settings.request_timeout_ms, client_id=settings.client_id,
                                        connect_timeout_ms=settings.socket_connection_setup_timeout_ms)
        self.metadata = MetadataManager(self.transport, settings.bootstrap_servers,
                                        request_timeout_ms=settings.request_timeout_ms,
                                        retry_backoff_ms=settings.retry_backoff_ms,
                                        metadata_max_age_ms=settings.metadata_max_age_ms,
                                        allow_auto_create_topics=settings.allow_auto_create_topics,
                                        metadata_request_timeout_ms=settings.metadata_request_timeout_ms)
        default = DefaultPartitioner(settings.batch_size)
        chosen = settings.partitioner
        self._default_partitioner = chosen is None
        self._topic_partitions: dict[tuple[str, int], TopicPartition] = {}
        self.plain_sends = settings.key_serializer is None and settings.value_serializer is None
        if chosen is None:
            self.partitioner: Any = default
        elif hasattr(chosen, "partition") and hasattr(chosen, "on_new_batch"):
            self.partitioner = chosen
        elif callable(chosen):
            self.partitioner = _CallablePartitioner(chosen, default)
        else:
            raise ConfigError("partitioner must be a Partitioner or a callable(key, all, available)")
        self.accumulator = RecordAccumulator(
            batch_size=settings.batch_size, buffer_memory=settings.buffer_memory, linger_ms=settings.linger_ms,
            max_request_size=settings.max_request_size, delivery_timeout_ms=settings.delivery_timeout_ms,
            max_in_flight_per_partition=settings.in_flight_per_partition, idempotent=settings.enable_idempotence)
        self.sender: Sender | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: threading.Thread | None = None
        self.closed = False

    async def start(self) -> None:
        """Start the metadata refresher and the sender on the running loop."""
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.current_thread()
        self.sender = Sender(self.settings, self.accumulator, self.metadata, self.transport)
        self.accumulator.wakeup = self._wake
        self.metadata.add_listener(lambda view: self._wake())
        self.metadata.start()
        self.sender.start()

    def _wake(self) -> None:
        sender = self.sender
        if sender is None or self.loop is None:
            return
        sender.poked = True  # before reading ``idle``: the sender sets ``idle`` before reading this
        if threading.current_thread() is self.loop_thread:
            sender.wake()
        elif sender.idle:
            try:
                self.loop.call_soon_threadsafe(sender.wake)
            except RuntimeError:
                pass

    # -- record path (any thread) -------------------------------------------------------------
    def prepare(self, topic: str, value: Any, key: Any, headers: Any, partition: int | None,
                timestamp_ms: int | None) -> _Prepared:
        if self.closed:
            raise IllegalStateError("the producer is closed")
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"topic must be a non-empty string, got {topic!r}")
        if value is None and key is None:
            raise ConfigError("need at least one of key and value")
        settings = self.settings
        if key is not None and settings.key_serializer is not None:
            key = settings.key_serializer(key)
        if value is not None and settings.value_serializer is not None:
            value = settings.value_serializer(value)
        if key is not None and not isinstance(key, (bytes, bytearray, memoryview)):
            raise ConfigError(f"key must be bytes (or set key_serializer), got {type(key).__name__}")
        if value is not None and not isinstance(value, (bytes, bytearray, memoryview)):
            raise ConfigError(f"value must be bytes (or set value_serializer), got {type(value).__name__}")
        if key is not None and type(key) is not bytes:
            key = bytes(key)
        if value is not None and type(value) is not bytes:
            value = bytes(value)
        size = RECORD_OVERHEAD + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        header_list = None
        if headers:
            header_list = []
            for item in headers:
                name, data = item
                if not isinstance(name, str):
                    raise ConfigError(f"header names must be str, got {type(name).__name__}")
                if data is not None and not isinstance(data, bytes):
                    if isinstance(data, (bytearray, memoryview)):
                        data = bytes(data)
                    else:
                        raise ConfigError(f"header values must be bytes or None, got {type(data).__name__}")
                header_list.append((name, data))
                size += len(name) + (len(data) if data is not None else 0) + 2
        if size + BATCH_OVERHEAD > settings.max_request_size:
            raise MessageSizeTooLargeError(
                f"the record is {size} bytes when serialized, more than max_request_size={settings.max_request_size}")
        if size > settings.buffer_memory:
            raise MessageSizeTooLargeError(
                f"the record is {size} bytes when serialized, more than buffer_memory={settings.buffer_memory}")
        if timestamp_ms is None:
            timestamp = int(time.time() * 1000)
        else:
            timestamp = int(timestamp_ms)
        if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int) or partition < 0):
            raise ConfigError(f"partition must be a non-negative integer, got {partition!r}")
        return _Prepared(topic, key, value, header_list, partition, timestamp, size)

    def send_plain(self, topic: str, value: Any, key: Any, headers: Any, partition: int | None,
                   timestamp_ms: int | None) -> RecordFuture | None:
        """The common ``send()`` in one pass: bytes value, bytes or no key, no headers, no
        explicit partition, no serializers. None when the general path (``prepare`` and
        ``place``) must run: another shape, producer closed, topic not in the metadata, record
        too large, or no room in ``buffer_memory`` — that path raises or waits as appropriate."""
        if headers is not None or partition is not None or type(value) is not bytes or not self.plain_sends \
                or (key is not None and type(key) is not bytes):
            return None
        partitions = self.metadata.view.partitions.get(topic)
        if not partitions or self.closed:
            return None
        size = RECORD_OVERHEAD + len(value) + (len(key) if key is not None else 0)
        settings = self.settings
        if size + BATCH_OVERHEAD > settings.max_request_size or size > settings.buffer_memory:
            return None
        if timestamp_ms is None:
            timestamp = int(time.time() * 1000)
        else:
            timestamp = int(timestamp_ms)
        if len(partitions) == 1 and self._default_partitioner:
            number = partitions[0]
        else:
            number = self.partitioner.partition(topic, key, partitions, self.metadata.view.available.get(topic, ()),
                                                size)
        tp = self._topic_partitions.get((topic, number))
        if tp is None:
            tp = self._topic_partitions[(topic, number)] = TopicPartition(topic, number)
        return self.accumulator.append(tp, timestamp, key, value, None, size)

    def place(self, record: _Prepared) -> Any:
        """The record's future; ``_NEEDS_METADATA`` or None (no memory) when the caller must wait."""
        view = self.metadata.view
        topic = record.topic
        partitions = view.partitions.get(topic)
        if not partitions:
            return _NEEDS_METADATA
        if record.partition is not None and record.partition >= len(partitions):
            raise UnknownTopicOrPartitionError(
                f"partition {record.partition} of topic {topic!r} is not in [0, {len(partitions)})")
        number = self.partitioner.partition(topic, record.key, partitions, view.available.get(topic, ()),
                                            record.size, explicit_partition=record.partition)
        return self.accumulator.append(TopicPartition(topic, number), record.timestamp, record.key, record.value,
                                       record.headers, record.size)

    # -- bulk path ----------------------------------------------------------------------------
    def prepare_bulk(self, topic: str, values: Sequence[Any], keys: Sequence[Any] | None,
                     partition: int | None, timestamp_ms: int | None,
                     headers: Sequence[Any] | None) -> tuple[list[Any], list[Any] | None, list[Any] | None, int]:
        if self.closed:
            raise IllegalStateError("the producer is closed")
        settings = self.settings
        value_list = list(values)
        if settings.value_serializer is not None:
            serialize = settings.value_serializer
            value_list = [None if value is None else serialize(value) for value in value_list]
        key_list = None
        if keys is not None:
            key_list = list(keys)
            if len(key_list) != len(value_list):
                raise ConfigError("keys and values differ in length")
            if settings.key_serializer is not None:
                serialize_key = settings.key_serializer
                key_list = [None if key is None else serialize_key(key) for key in key_list]
        header_list = None
        if headers is not None:
            header_list = [list(item or []) for item in headers]
            if len(header_list) != len(value_list):
                raise ConfigError("headers and values differ in length")
        timestamp = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        return value_list, key_list, header_list, timestamp

    def plan_bulk(self, topic: str, values: list[Any], keys: list[Any] | None, headers: list[Any] | None,
                  partition: int | None) -> list[tuple[int, list[Any], list[Any] | None, list[Any] | None, int]] | None:
        """Split a bulk send into (partition, values, keys, headers, bytes) chunks; None when the
        topic's metadata is not known yet."""
        view = self.metadata.view
        partitions = view.partitions.get(topic)
        if not partitions:
            return None
        limit = self.settings.max_request_size - BATCH_OVERHEAD - 512
        try:
            sizes = list(map(len, values))
        except TypeError:
            sizes = [0 if value is None else len(value) for value in values]
        if keys is not None:
            sizes = [size + (0 if key is None else len(key)) for size, key in zip(sizes, keys)]
        if headers is not None:
            sizes = [size + sum(len(name) + len(data or b"") for name, data in item)
                     for size, item in zip(sizes, headers)]
        if partition is not None and partition >= len(partitions):
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of topic {topic!r} is not in [0, {len(partitions)})")
        groups: list[tuple[int | None, list[int] | None]]
        if partition is not None:
            groups = [(partition, None)]
        elif keys is not None and any(key is not None for key in keys):
            by_partition: dict[int, list[int]] = {}
            count = len(partitions)
            for index, key in enumerate(keys):
                number = to_positive(murmur2(key)) % count if key is not None else self.partitioner.partition(
                    topic, None, partitions, view.available.get(topic, ()), sizes[index] + RECORD_OVERHEAD)
                by_partition.setdefault(number, []).append(index)
            groups = list(by_partition.items())
        else:
            groups = [(None, None)]
        chunks: list[tuple[int, list[Any], list[Any] | None, list[Any] | None, int]] = []
        for number, indexes in groups:
            if indexes is None:
                group_values, group_keys, group_headers, group_sizes = values, keys, headers, sizes
            else:
                group_values = [values[i] for i in indexes]
                group_keys = [keys[i] for i in indexes] if keys is not None else None
                group_headers = [headers[i] for i in indexes] if headers is not None else None
                group_sizes = [sizes[i] for i in indexes]
            for start, end in chunk_bounds(group_sizes, limit):
                chunk_bytes = sum(group_sizes[start:end]) + RECORD_OVERHEAD * (end - start)
                if chunk_bytes + BATCH_OVERHEAD > self.settings.max_request_size:
                    raise MessageSizeTooLargeError(
                        f"a record of {chunk_bytes} bytes exceeds max_request_size={self.settings.max_request_size}")
                target = number if number is not None else self.partitioner.partition(
                    topic, None, partitions, view.available.get(topic, ()), max(chunk_bytes, self.settings.batch_size))
                chunks.append((target, group_values[start:end],
                               group_keys[start:end] if group_keys is not None else None,
                               group_headers[start:end] if group_headers is not None else None, chunk_bytes))
        return chunks

    def place_chunk(self, topic: str, chunk: tuple[int, list[Any], list[Any] | None, list[Any] | None, int],
                    timestamp: int) -> BatchResult | None:
        number, values, keys, headers, size = chunk
        return self.accumulator.append_bulk(TopicPartition(topic, number), values, keys, timestamp, headers, size)

    # -- loop side ----------------------------------------------------------------------------
    async def wait_for_topic(self, topic: str, timeout_ms: float) -> tuple[int, ...]:
        return await self.metadata.wait_for_topic(topic, timeout_ms)

    async def partitions_for(self, topic: str, timeout_ms: float) -> set[int]:
        return set(await self.metadata.wait_for_topic(topic, timeout_ms))

    async def flush(self, timeout: float | None) -> None:
        pending = self.accumulator.begin_flush()
        try:
            if pending:
                waiters = [result.future() for result in pending]
                _, not_done = await asyncio.wait(waiters, timeout=timeout)
                if not_done:
                    raise KafkaTimeoutError(f"flush did not finish within {timeout} s "
                                            f"({len(not_done)} batch(es) still pending)")
        finally:
            self.accumulator.end_flush()

    async def close(self, timeout: float | None) -> None:
        """Send what is buffered (up to ``timeout`` seconds), then stop and release everything."""
        if self.closed:
            return
        self.closed = True
        self.accumulator.begin_close()
        sender = self.sender
        if sender is not None:
            try:
                if timeout is None or timeout > 0:
                    pending = [result.future() for result in self.accumulator.pending_results()]
                    if pending:
                        _, not_done = await asyncio.wait(pending, timeout=timeout)
                        if not_done:
                            log.warning("closing the producer: %d batch(es) still unacknowledged after %s s fail now:"
                                        "\n  %s", len(not_done), timeout,
                                        "\n  ".join(self.accumulator.describe_pending(time.monotonic())))
            finally:
                self.accumulator.abort(IllegalStateError("the producer was closed before the record was sent"))
                await sender.stop(force=True)
        await self.metadata.close()
        await self.transport.close()


# --- the blocking producer ----------------------------------------------------------------------


class KafkaProducer:
    """kafka-python's KafkaProducer on kafkalite (see the module docstring).

    ``send(topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None)``
    returns a future (``get(timeout)``, ``add_callback``, ``add_errback``, ``is_done``);
    ``send_batch(topic, values, keys=None, partition=None, timestamp_ms=None, headers=None)`` is
    the bulk path; ``flush(timeout)``, ``close(timeout)``, ``partitions_for(topic)``.
    """

    def __init__(self, **options: Any) -> None:
        self.config = dict(options)
        self._settings = ProducerSettings.from_options(options)
        self._loop = LoopThread(f"kafkalite-producer-{self._settings.client_id}")
        try:
            self._core = ProducerCore(self._settings)
            self._loop.run(self._core.start())
        except BaseException:
            self._loop.stop()
            raise
        self._closed = False
        self._finalizer = weakref.finalize(self, _stop_loop, self._loop)

    def send(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
             partition: int | None = None, timestamp_ms: int | None = None) -> RecordFuture:
        """Queue one record; its future resolves when the broker acknowledged it."""
        core = self._core
        future = core.send_plain(topic, value, key, headers, partition, timestamp_ms)
        if future is not None:
            return future
        record = core.prepare(topic, value, key, headers, partition, timestamp_ms)
        result = core.place(record)
        if type(result) is RecordFuture:
            return result
        deadline = time.monotonic() + self._settings.max_block_ms / 1000
        while True:
            if result is _NEEDS_METADATA:
                remaining = (deadline - time.monotonic()) * 1000
                if remaining <= 0:
                    raise KafkaTimeoutError(f"topic {topic!r} not in metadata after {self._settings.max_block_ms} ms")
                self._loop.run(core.wait_for_topic(topic, remaining))
            elif result is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not core.accumulator.wait_for_memory(record.size, remaining):
                    raise KafkaTimeoutError(
                        f"buffer_memory full: no room for the record after {self._settings.max_block_ms} ms")
            else:
                placed: RecordFuture = result
                return placed
            result = core.place(record)

    def send_batch(self, topic: str, values: Sequence[Any], keys: Sequence[Any] | None = None,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Sequence[Any] | None = None) -> BulkFuture:
        """Bulk path: many records as whole batches (one timestamp for all); one future whose
        ``get()`` gives a :class:`~kafkalite.client.types.BatchMetadata` per batch written.

        Keys (optional, same length) pick partitions by murmur2 like ``send``; without keys
        and partition the batches follow the sticky partitioner, one partition per batch.
        """
        core = self._core
        value_list, key_list, header_list, timestamp = core.prepare_bulk(topic, values, keys, partition,
                                                                         timestamp_ms, headers)
        future = BulkFuture(topic)
        if not value_list:
            return future
        deadline = time.monotonic() + self._settings.max_block_ms / 1000
        chunks = core.plan_bulk(topic, value_list, key_list, header_list, partition)
        if chunks is None:
            self._loop.run(core.wait_for_topic(topic, self._settings.max_block_ms))
            chunks = core.plan_bulk(topic, value_list, key_list, header_list, partition)
            assert chunks is not None
        for chunk in chunks:
            while True:
                result = core.place_chunk(topic, chunk, timestamp)
                if result is not None:
                    future._add(result, len(chunk[1]), timestamp)
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not core.accumulator.wait_for_memory(chunk[4], remaining):
                    raise KafkaTimeoutError(f"buffer_memory full after {self._settings.max_block_ms} ms")
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait for the answers (KafkaTimeoutError on timeout)."""
        self._loop.run(self._core.flush(timeout))

    def close(self, timeout: float | None = None) -> None:
        """Flush (waiting at most ``timeout`` seconds; None = as long as it takes, which is
        bounded by ``delivery_timeout_ms`` plus one request timeout), then release the
        connections and the I/O thread. Records not acknowledged by then — queued or in flight
        — fail with IllegalStateError, and close returns promptly."""
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._core.close(timeout))
        finally:
            self._finalizer()

    def partitions_for(self, topic: str) -> set[int]:
        """The partition ids of ``topic`` (waits for metadata up to ``max_block_ms``)."""
        return self._loop.run(self._core.partitions_for(topic, self._settings.max_block_ms))

    def bootstrap_connected(self) -> bool:
        return bool(self._core.metadata.view.brokers)

    def metrics(self, raw: bool = False) -> dict[str, Any]:
        return {"buffer-memory-used": self._core.accumulator.used_memory}

    def __enter__(self) -> KafkaProducer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _stop_loop(loop: LoopThread) -> None:
    loop.stop()


# --- the asyncio producer -----------------------------------------------------------------------


class AIOKafkaProducer:
    """aiokafka-shaped asyncio producer on the same core: ``await start()``, ``await send(...)``
    (returns an awaitable future), ``await send_and_wait(...)``, ``await send_batch(...)``,
    ``await flush()``, ``await stop()``, ``await partitions_for(topic)``. Accepts the same
    options as KafkaProducer (and aiokafka's ``max_batch_size``)."""

    def __init__(self, **options: Any) -> None:
        self._settings = ProducerSettings.from_options(options)
        self._core = ProducerCore(self._settings)
        self._started = False

    async def start(self) -> None:
        if not self._started:
            self._started = True
            await self._core.start()

    async def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                   timestamp_ms: int | None = None, headers: Any = None) -> RecordFuture:
        """Queue one record (waiting for metadata or buffer space when needed); returns its future."""
        if not self._started:
            raise IllegalStateError("call await producer.start() first")
        core = self._core
        future = core.send_plain(topic, value, key, headers, partition, timestamp_ms)
        if future is not None:
            return future
        record = core.prepare(topic, value, key, headers, partition, timestamp_ms)
        result = core.place(record)
        if type(result) is RecordFuture:
            return result
        deadline = time.monotonic() + self._settings.max_block_ms / 1000
        while True:
            if result is _NEEDS_METADATA:
                remaining = (deadline - time.monotonic()) * 1000
                if remaining <= 0:
                    raise KafkaTimeoutError(f"topic {topic!r} not in metadata after {self._settings.max_block_ms} ms")
                await core.wait_for_topic(topic, remaining)
            elif result is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not await core.accumulator.wait_for_memory_async(record.size, remaining):
                    raise KafkaTimeoutError(
                        f"buffer_memory full: no room for the record after {self._settings.max_block_ms} ms")
            else:
                placed: RecordFuture = result
                return placed
            result = core.place(record)

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                            timestamp_ms: int | None = None, headers: Any = None) -> Any:
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    async def send_batch(self, topic: str, values: Sequence[Any], keys: Sequence[Any] | None = None,
                         partition: int | None = None, timestamp_ms: int | None = None,
                         headers: Sequence[Any] | None = None) -> BulkFuture:
        """The bulk path (see KafkaProducer.send_batch); ``await`` the returned future."""
        if not self._started:
            raise IllegalStateError("call await producer.start() first")
        core = self._core
        value_list, key_list, header_list, timestamp = core.prepare_bulk(topic, values, keys, partition,
                                                                         timestamp_ms, headers)
        future = BulkFuture(topic)
        if not value_list:
            return future
        deadline = time.monotonic() + self._settings.max_block_ms / 1000
        chunks = core.plan_bulk(topic, value_list, key_list, header_list, partition)
        if chunks is None:
            await core.wait_for_topic(topic, self._settings.max_block_ms)
            chunks = core.plan_bulk(topic, value_list, key_list, header_list, partition)
            assert chunks is not None
        for chunk in chunks:
            while True:
                result = core.place_chunk(topic, chunk, timestamp)
                if result is not None:
                    future._add(result, len(chunk[1]), timestamp)
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not await core.accumulator.wait_for_memory_async(chunk[4], remaining):
                    raise KafkaTimeoutError(f"buffer_memory full after {self._settings.max_block_ms} ms")
        return future

    async def flush(self, timeout: float | None = None) -> None:
        await self._core.flush(timeout)

    async def stop(self, timeout: float | None = None) -> None:
        await self._core.close(timeout)

    close = stop

    async def partitions_for(self, topic: str) -> set[int]:
        return await self._core.partitions_for(topic, self._settings.max_block_ms)

    async def __aenter__(self) -> AIOKafkaProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.stop()
