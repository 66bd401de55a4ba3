"""Value types of the Python clients, shaped like kafka-python's so user code ports unchanged.

:class:`TopicPartition`, :class:`OffsetAndMetadata`, :class:`OffsetAndTimestamp`,
:class:`RecordMetadata` and :class:`ConsumerRecord` are NamedTuples with kafka-python's field
names and order; :class:`NewTopic`, :class:`NewPartitions`, :class:`ConfigResource` and
:class:`ConfigResourceType` are the admin request shapes. :class:`BatchMetadata` is the answer
of the producers' bulk API (one entry per record batch written).

Concurrency: immutable values (ConfigResource and NewTopic are plain objects the caller owns).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import Any, NamedTuple


class TopicPartition(NamedTuple):
    """A topic and partition number."""

    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """An offset to commit, with optional metadata and the leader epoch of the record before it."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's group membership, for a transactional producer's send_offsets_to_transaction."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class OffsetAndTimestamp(NamedTuple):
    """An answer of ``offsets_for_times``: the first offset at or after the timestamp."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


class RecordMetadata(NamedTuple):
    """Where an acknowledged record was written (``offset`` is -1 with acks=0)."""

    topic: str
    partition: int
    topic_partition: TopicPartition
    offset: int
    timestamp: int
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


class BatchMetadata(NamedTuple):
    """Where one batch of the bulk API was written: records ``base_offset`` .. + count - 1."""

    topic: str
    partition: int
    base_offset: int
    record_count: int
    timestamp: int
    log_start_offset: int


class ConsumerRecord(NamedTuple):
    """One consumed record, kafka-python's field order (``checksum`` is always None for v2)."""

    topic: str
    partition: int
    leader_epoch: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: list[tuple[str, bytes | None]]
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


class NewTopic:
    """A topic to create: partitions and replication factor, or an explicit assignment."""

    def __init__(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                 replica_assignments: dict[int, list[int]] | None = None,
                 topic_configs: dict[str, str] | None = None) -> None:
        self.name = name
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignments = dict(replica_assignments or {})
        self.topic_configs = dict(topic_configs or {})

    def __repr__(self) -> str:
        return (f"NewTopic(name={self.name!r}, num_partitions={self.num_partitions}, "
                f"replication_factor={self.replication_factor}, replica_assignments={self.replica_assignments}, "
                f"topic_configs={self.topic_configs})")


class NewPartitions:
    """Grow a topic to ``total_count`` partitions; ``new_assignments`` lists the replicas of
    each added partition (its length is the number of partitions added)."""

    def __init__(self, total_count: int, new_assignments: Sequence[Sequence[int]] | None = None) -> None:
        self.total_count = total_count
        self.new_assignments = [list(item) for item in new_assignments] if new_assignments is not None else None

    def __repr__(self) -> str:
        return f"NewPartitions(total_count={self.total_count}, new_assignments={self.new_assignments})"


class RecordsToDelete:
    """DeleteRecords: delete a partition's records before ``before_offset`` (-1: the high
    watermark), as aiokafka's ``RecordsToDelete``; a plain offset does the same."""

    def __init__(self, before_offset: int) -> None:
        self.before_offset = before_offset

    def __repr__(self) -> str:
        return f"RecordsToDelete(before_offset={self.before_offset})"


class ConfigResourceType(IntEnum):
    """Kafka's resource type ids for config calls."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4


class ConfigResource:
    """A topic or broker whose configs to describe (``configs``: names to keep, None = all) or
    alter (``configs``: name → value, or name → None to delete an override)."""

    def __init__(self, resource_type: ConfigResourceType | str | int, name: str,
                 configs: dict[str, Any] | Sequence[str] | None = None) -> None:
        if isinstance(resource_type, str):
            resource_type = ConfigResourceType[resource_type.upper()]
        self.resource_type = ConfigResourceType(resource_type)
        self.name = str(name)
        self.configs = configs

    def __repr__(self) -> str:
        return f"ConfigResource({self.resource_type.name}, {self.name!r}, {self.configs!r})"
