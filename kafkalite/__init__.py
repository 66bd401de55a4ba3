"""kafkalite: a Kafka-style distributed commit log.

The Python clients are importable from here with kafka-python's names, so that
``from kafka import KafkaProducer`` becomes ``from kafkalite import KafkaProducer``.
They are loaded on first use, so that importing the package (as the broker does) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ hands out, for type checkers (importing kafkalite.client costs ~0.2 s)
    from kafkalite import errors as errors
    from kafkalite.client import (
        AIOKafkaAdminClient as AIOKafkaAdminClient,
        AIOKafkaConsumer as AIOKafkaConsumer,
        AIOKafkaProducer as AIOKafkaProducer,
        BatchMetadata as BatchMetadata,
        ConfigResource as ConfigResource,
        ConfigResourceType as ConfigResourceType,
        ConsumerRecord as ConsumerRecord,
        KafkaAdminClient as KafkaAdminClient,
        KafkaConsumer as KafkaConsumer,
        KafkaProducer as KafkaProducer,
        NewPartitions as NewPartitions,
        NewTopic as NewTopic,
        OffsetAndMetadata as OffsetAndMetadata,
        OffsetAndTimestamp as OffsetAndTimestamp,
        RecordMetadata as RecordMetadata,
        TopicPartition as TopicPartition,
    )

from kafkalite.version import __version__ as __version__

_CLIENT_NAMES = frozenset({
    "AIOKafkaAdminClient", "AIOKafkaConsumer", "AIOKafkaProducer", "BatchMetadata", "ConfigResource",
    "ConfigResourceType", "ConsumerRecord", "KafkaAdminClient", "KafkaConsumer", "KafkaProducer", "NewPartitions",
    "NewTopic", "OffsetAndMetadata", "OffsetAndTimestamp", "RecordMetadata", "TopicPartition",
})

__all__ = sorted(_CLIENT_NAMES | {"errors", "__version__"})


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        return getattr(importlib.import_module("kafkalite.client"), name)
    if name == "errors":
        return importlib.import_module("kafkalite.errors")
    raise AttributeError(f"module 'kafkalite' has no attribute {name!r}")
