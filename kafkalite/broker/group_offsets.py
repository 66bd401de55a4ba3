"""Committed offsets and group records in the internal compacted ``__consumer_offsets`` topic.

:class:`OffsetLog` is the storage seam: append keyed records to one partition of the offsets
topic (acks=all, so an acknowledged commit survives a coordinator failover) and read a partition
back. :class:`ReplicaOffsetLog` implements it over the replica manager. :func:`replay` rebuilds
the groups of one partition from its records (latest value per key; tombstones remove), and
:class:`OffsetStore` writes commits, group records and tombstones, mapping the log's errors to the
names a group client expects.

Concurrency: event-loop only; :class:`ReplicaOffsetLog` reads a partition's files on a worker
thread.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from kafkalite import protocol
from kafkalite.broker.group import Group, GroupState, Member
from kafkalite.broker.group_api import CommitPartition, CommittedOffset, PartitionOutcome
from kafkalite.broker.group_records import (
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from kafkalite.broker.replica import ReplicaManager
from kafkalite.config import BrokerConfig
from kafkalite.errors import (
    BrokerResponseError,
    CoordinatorNotAvailableError,
    InvalidCommitOffsetSizeError,
    KafkaliteError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    RequestTimedOutError,
)
from kafkalite.record.batch import build_batch
from kafkalite.storage.log import PartitionLog

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"

KeyedRecord = tuple[bytes, bytes | None]

#: Errors of an offsets-topic write as a group client must see them (Kafka's mapping).
_WRITE_ERROR_MAP: dict[int, type[BrokerResponseError]] = {
    19: CoordinatorNotAvailableError, 20: CoordinatorNotAvailableError, 3: CoordinatorNotAvailableError,
    6: NotCoordinatorError, 56: NotCoordinatorError, 10: InvalidCommitOffsetSizeError,
    18: InvalidCommitOffsetSizeError, 7: RequestTimedOutError,
}


class OffsetLog(Protocol):
    """One broker's access to the partitions of the offsets topic it leads."""

    async def append(self, partition: int, records: list[KeyedRecord]) -> BrokerResponseError | None:
        """Append keyed records (a ``None`` value is a tombstone); the error, if any, as a group
        client must see it."""
        ...

    async def read(self, partition: int) -> list[KeyedRecord]:
        """Every keyed record of the partition, oldest first."""
        ...


class ReplicaOffsetLog:
    """:class:`OffsetLog` over the replica manager: writes are produce requests with acks=all."""

    def __init__(self, config: BrokerConfig, replica_manager: ReplicaManager) -> None:
        self.config = config
        self.replica_manager = replica_manager

    async def append(self, partition: int, records: list[KeyedRecord]) -> BrokerResponseError | None:
        batch = build_batch([value for _, value in records], keys=[key for key, _ in records])
        request = protocol.ProduceRequest(-1, self.config.offsets_commit_timeout_ms,
                                          [protocol.ProducePartition(OFFSETS_TOPIC, partition, batch)])
        results = await self.replica_manager.produce(request, allow_internal=True)
        code = results[0].error_code if results else 0
        if code == 0:
            return None
        mapped = _WRITE_ERROR_MAP.get(code)
        message = results[0].error_message
        return mapped(message) if mapped else protocol.error_for(code, message)

    async def read(self, partition: int) -> list[KeyedRecord]:
        """The partition is looked up on the event loop; its files are read on a worker thread."""
        hosted = self.replica_manager.partitions.get((OFFSETS_TOPIC, partition))
        if hosted is None:
            raise NotCoordinatorError(f"{OFFSETS_TOPIC}-{partition} is not hosted here")
        return await asyncio.to_thread(self._read_log, hosted.log)

    @staticmethod
    def _read_log(log: PartitionLog) -> list[KeyedRecord]:
        records: list[KeyedRecord] = []
        for batch in log.batches(log.log_start_offset):
            for record in batch.records():
                if record.key is not None:
                    records.append((record.key, record.value))
        return records


def replay(records: list[KeyedRecord], partition: int, now_ms: int, monotonic_now: float) -> dict[str, Group]:
    """The groups of offsets partition ``partition`` as its records leave them; members get a
    fresh session starting at ``monotonic_now``."""
    offsets: dict[str, dict[tuple[str, int], OffsetValue]] = {}
    metadata: dict[str, GroupValue | None] = {}
    for key_bytes, value_bytes in records:
        try:
            key = decode_key(key_bytes)
            if isinstance(key, OffsetKey):
                group_offsets = offsets.setdefault(key.group, {})
                if value_bytes is None:
                    group_offsets.pop((key.topic, key.partition), None)
                else:
                    group_offsets[(key.topic, key.partition)] = decode_offset_value(value_bytes)
            else:
                metadata[key.group] = None if value_bytes is None else decode_group_value(value_bytes)
        except KafkaliteError as exc:
            log.warning("%s-%d: skipping unreadable record: %s", OFFSETS_TOPIC, partition, exc)
    groups: dict[str, Group] = {}
    for group_id in set(offsets) | {group for group, value in metadata.items() if value is not None}:
        group = Group(group_id, partition)
        group.offsets = offsets.get(group_id, {})
        value = metadata.get(group_id)
        if value is not None:
            group.generation = value.generation
            group.protocol_type = value.protocol_type
            group.protocol_name = value.protocol
            group.leader_id = value.leader
            for record in value.members:
                member = Member(record.member_id, record.group_instance_id, record.client_id, record.client_host,
                                record.session_timeout, record.rebalance_timeout, value.protocol_type,
                                [(value.protocol or "", record.subscription)], record.assignment,
                                deadline=monotonic_now + record.session_timeout / 1000, is_new=False)
                group.members[member.member_id] = member
                if member.group_instance_id:
                    group.static_members[member.group_instance_id] = member.member_id
            group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        group.state_timestamp = now_ms
        group.empty_since_ms = now_ms
        groups[group_id] = group
    return groups


class OffsetStore:
    """Commits, group records and tombstones of the groups, written through an :class:`OffsetLog`."""

    def __init__(self, config: BrokerConfig, offset_log: OffsetLog) -> None:
        self.config = config
        self.log = offset_log

    async def commit(self, group: Group, partitions: list[CommitPartition], now_ms: int) -> list[PartitionOutcome]:
        """Store the offsets (one append); each partition's outcome in request order."""
        problems: dict[tuple[str, int], BrokerResponseError] = {}
        writes: list[tuple[OffsetKey, OffsetValue]] = []
        limit = self.config.offset_metadata_max_bytes
        for item in partitions:
            if len(item.metadata.encode("utf-8")) > limit:
                problems[(item.topic, item.partition)] = OffsetMetadataTooLargeError(
                    f"metadata is longer than offset.metadata.max.bytes={limit}")
                continue
            writes.append((OffsetKey(group.group_id, item.topic, item.partition),
                           OffsetValue(item.offset, item.leader_epoch, item.metadata, now_ms)))
        error = None
        if writes:
            error = await self.log.append(group.partition, [(key.encode(), value.encode()) for key, value in writes])
            if error is None:
                for key, value in writes:
                    group.offsets[(key.topic, key.partition)] = value
        return [PartitionOutcome(item.topic, item.partition, problems.get((item.topic, item.partition)) or error)
                for item in partitions]

    @staticmethod
    def committed(group: Group | None, topics: list[tuple[str, list[int] | None]] | None) -> list[CommittedOffset]:
        """The committed offsets asked for (-1 where none is committed)."""
        offsets = group.offsets if group else {}
        wanted: list[tuple[str, int]]
        if topics is None:
            wanted = sorted(offsets)
        else:
            wanted = []
            for name, partitions in topics:
                if partitions is None:
                    wanted.extend(key for key in sorted(offsets) if key[0] == name)
                else:
                    wanted.extend((name, number) for number in partitions)
        answers = []
        for name, number in wanted:
            value = offsets.get((name, number))
            answers.append(CommittedOffset(name, number, value.offset if value else -1,
                                           value.leader_epoch if value else -1, value.metadata if value else ""))
        return answers

    async def write_group(self, group: Group, owned: set[int]) -> BrokerResponseError | None:
        """Store the group's record (a tombstone for a group without members or history)."""
        if group.partition not in owned:
            return NotCoordinatorError(f"group {group.group_id} moved to another coordinator")
        value = group.to_record().encode() if (group.members or group.generation > 0) else None
        return await self.log.append(group.partition, [(GroupKey(group.group_id).encode(), value)])

    async def delete_offsets(self, group: Group, keys: list[tuple[str, int]]) -> BrokerResponseError | None:
        """Tombstones for some of the group's committed offsets (one append)."""
        if not keys:
            return None
        error = await self.log.append(group.partition, [(OffsetKey(group.group_id, topic, number).encode(), None)
                                                        for topic, number in keys])
        if error is None:
            for key in keys:
                group.offsets.pop(key, None)
        return error

    async def delete_group(self, group: Group) -> BrokerResponseError | None:
        """Tombstones for the group's offsets and record."""
        tombstones: list[KeyedRecord] = [
            (OffsetKey(group.group_id, topic, number).encode(), None) for topic, number in group.offsets]
        tombstones.append((GroupKey(group.group_id).encode(), None))
        return await self.log.append(group.partition, tombstones)
