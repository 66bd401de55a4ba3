"""The clients the Spark source and sink open: one consumer or producer per task or call.

Also the shape of one row the sink sends (:data:`SinkRow`). Concurrency: every caller opens its
own client and closes it before it returns; nothing here is shared.
"""

from __future__ import annotations

from typing import Any

from kafkalite.spark.options import FETCH_MAX_BYTES, FETCH_MAX_PARTITION_BYTES, ClientSecurity, SinkOptions

#: (topic, partition or None, key, value, headers) of one row to write.
SinkRow = tuple[str, int | None, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def open_consumer(bootstrap_servers: str, client_id: str, isolation_level: str = "read_uncommitted",
                  security: ClientSecurity = ()) -> Any:
    """A consumer for reading offset ranges: no group, no auto-commit, no auto-created topics.

    The source's range reads pass its ``isolation_level``; the sink's journal and recovery scan
    keep read_uncommitted (they look for what their own non-transactional producers wrote)."""
    from kafkalite.client.consumer import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=bootstrap_servers, client_id=client_id, enable_auto_commit=False,
                         auto_offset_reset="none", allow_auto_create_topics=False,
                         max_partition_fetch_bytes=FETCH_MAX_PARTITION_BYTES, fetch_max_bytes=FETCH_MAX_BYTES,
                         fetch_max_wait_ms=200, isolation_level=isolation_level, **dict(security))


def open_producer(options: SinkOptions, client_id: str) -> Any:
    """The sink's producer (idempotent with acks=all), with the sink's options."""
    from kafkalite.client.producer import KafkaProducer

    settings: dict[str, Any] = {"bootstrap_servers": options.bootstrap_servers, "client_id": client_id,
                                "acks": options.acks, "linger_ms": options.linger_ms,
                                "enable_idempotence": options.acks in ("all", "-1"), **dict(options.security)}
    if options.compression_type:
        settings["compression_type"] = options.compression_type
    return KafkaProducer(**settings)
