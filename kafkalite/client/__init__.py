"""Python clients of kafkalite, shaped like kafka-python (blocking) and aiokafka (asyncio).

Blocking: :class:`KafkaProducer`, :class:`KafkaConsumer`, :class:`KafkaAdminClient`.
Asyncio: :class:`AIOKafkaProducer`, :class:`AIOKafkaConsumer`, :class:`AIOKafkaAdminClient`.
Both flavours run one async core (metadata, accumulator and sender, fetcher, admin calls); the
blocking classes run it on a private event-loop thread (:mod:`kafkalite.client._loop`).
Pure parts: :mod:`.partitioner`, :mod:`.assignors`, :mod:`.accumulator`, :mod:`.futures`,
:mod:`.types`, :mod:`.options`, the settings modules, :mod:`.group_assignment`, the ClusterView
of :mod:`.metadata` and the decoders of :mod:`.fetcher`.

Modules by role; each client is a front-end module over a core module, and imports point down
only (a lower module that calls back up sees the upper one through a small Protocol):

* producer: :mod:`.producer` (front ends) → :mod:`.producer_core` → :mod:`.sender` →
  :mod:`.accumulator` → :mod:`.futures`; :mod:`.producer_settings`, :mod:`.partitioner`;
* consumer: :mod:`.consumer` (front ends) → :mod:`.consumer_core` → :mod:`.group` →
  :mod:`.group_heartbeat` → :mod:`.coordinator_link`; :mod:`.group_assignment`,
  :mod:`.assignors`, :mod:`.fetcher`, :mod:`.consumer_settings`, :mod:`.consumer_callbacks`;
* admin: :mod:`.admin` (front ends) → :mod:`.admin_core` → :mod:`.coordinator_link`;
* shared: :mod:`.metadata`, :mod:`.options`, :mod:`.types`, :mod:`._loop`.

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
    ConsumerGroupMetadata,
    ConsumerRecord,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    RecordsToDelete,
    TopicPartition,
)

__all__ = [
    "AIOKafkaAdminClient", "AIOKafkaConsumer", "AIOKafkaProducer", "BatchMetadata", "BulkFuture", "ConfigResource",
    "ConfigResourceType", "ConsumerGroupMetadata", "ConsumerRebalanceListener", "ConsumerRecord",
    "CooperativeStickyAssignor",
    "DefaultPartitioner", "FetchedBatch", "GroupInformation", "KafkaAdminClient", "KafkaConsumer", "KafkaProducer",
    "MemberInformation", "NewPartitions", "NewTopic", "OffsetAndMetadata", "OffsetAndTimestamp", "PartitionLag",
    "RangeAssignor", "RecordFuture", "RecordMetadata", "RecordsToDelete", "RoundRobinAssignor", "RoundRobinPartitioner",
    "StickyAssignor", "TopicPartition",
]
