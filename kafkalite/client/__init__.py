"""Python clients of kafkalite, shaped like kafka-python (blocking) and aiokafka (asyncio).

Blocking: :class:`KafkaProducer`, :class:`KafkaConsumer`, :class:`KafkaAdminClient`.
Asyncio: :class:`AIOKafkaProducer`, :class:`AIOKafkaConsumer`, :class:`AIOKafkaAdminClient`.
Both flavours run one async core (metadata, accumulator and sender, fetcher, admin calls); the
blocking classes run it on a private event-loop thread (:mod:`kafkalite.client._loop`).
Pure parts: :mod:`.partitioner`, :mod:`.assignors`, :mod:`.accumulator`, :mod:`.types`,
the ClusterView of :mod:`.metadata` and the decoders of :mod:`.fetcher`.

Current Kafka defaults apply where kafka-python is older: ``acks='all'``,
``enable_idempotence=True``, ``linger_ms=0``. Bulk paths: ``KafkaProducer.send_batch`` and
``KafkaConsumer.poll_batches``. Consumer groups (:mod:`.group`): a consumer with a ``group_id``
that subscribes joins the group (``ConsumerRebalanceListener`` hears of rebalances) and commits
offsets; the admin clients list, describe, reset and delete groups.
"""

from kafkalite.client.admin import AIOKafkaAdminClient, KafkaAdminClient
from kafkalite.client.admin_core import GroupInformation, MemberInformation, PartitionLag
from kafkalite.client.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from kafkalite.client.consumer import AIOKafkaConsumer, KafkaConsumer
from kafkalite.client.fetcher import FetchedBatch
from kafkalite.client.futures import BulkFuture, RecordFuture
from kafkalite.client.group_assignment import ConsumerRebalanceListener
from kafkalite.client.partitioner import DefaultPartitioner, RoundRobinPartitioner
from kafkalite.client.producer import AIOKafkaProducer, KafkaProducer
from kafkalite.client.types import (
    BatchMetadata,
    ConfigResource,
    ConfigResourceType,
    ConsumerRecord,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)

__all__ = [
    "AIOKafkaAdminClient", "AIOKafkaConsumer", "AIOKafkaProducer", "BatchMetadata", "BulkFuture", "ConfigResource",
    "ConfigResourceType", "ConsumerRebalanceListener", "ConsumerRecord", "CooperativeStickyAssignor",
    "DefaultPartitioner", "FetchedBatch", "GroupInformation", "KafkaAdminClient", "KafkaConsumer", "KafkaProducer",
    "MemberInformation", "NewPartitions", "NewTopic", "OffsetAndMetadata", "OffsetAndTimestamp", "PartitionLag",
    "RangeAssignor", "RecordFuture", "RecordMetadata", "RoundRobinAssignor", "RoundRobinPartitioner",
    "StickyAssignor", "TopicPartition",
]
