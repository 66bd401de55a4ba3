"""Committed offsets and group records in the internal compacted ``__consumer_offsets`` topic.

:class:`OffsetLog` is the storage seam: append keyed records to one partition of the offsets
topic (acks=all, so an acknowledged commit survives a coordinator failover) and read a partition
back. :class:`ReplicaOffsetLog` implements it over the replica manager. :func:`replay` rebuilds
the groups of one partition from its records (latest value per key; tombstones remove), and
:class:`OffsetStore` writes commits, group records and tombstones, mapping the log's errors to the
names a group client expects.

Transactional offset commits (TxnOffsetCommit) are written as a transactional batch of the
producer's id and epoch; they stay *pending* in :attr:`OffsetStore.pending` until the producer's
marker lands in the partition: a commit marker materialises them into the group's offsets, an
abort marker drops them. Reading a partition back applies the same rule with the markers found
in the log (:func:`resolve_transactions`); transactions still open at the end are pending again.

Concurrency: event-loop only; :class:`ReplicaOffsetLog` reads a partition's files on a worker
thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
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
    UnstableOffsetCommitError,
)
from kafkalite.record.batch import RecordBatch, build_batch
from kafkalite.storage.log import PartitionLog

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
#: Offsets appended while a load read the partition on a worker thread that are read on the
#: event loop itself (more are read on a worker first).
LOOP_CATCH_UP_OFFSETS = 1000

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

    async def read_resolved(self, partition: int) -> ResolvedOffsets:
        """Every keyed record of the partition, oldest first (committed transactions at their
        marker, aborted ones left out), and the records of the transactions still open, by
        producer id: the log as it is when the call returns, so that a caller that adopts it
        without awaiting in between misses no marker (one appended later reaches the marker
        listener instead)."""
        ...

    async def append_transactional(self, partition: int, records: list[KeyedRecord], producer_id: int,
                                   producer_epoch: int) -> BrokerResponseError | None:
        """Append keyed records as a transactional batch of the producer (TxnOffsetCommit)."""
        ...



class ReplicaOffsetLog:
    """:class:`OffsetLog` over the replica manager: writes are produce requests with acks=all."""

    def __init__(self, config: BrokerConfig, replica_manager: ReplicaManager) -> None:
        self.config = config
        self.replica_manager = replica_manager

    async def append(self, partition: int, records: list[KeyedRecord]) -> BrokerResponseError | None:
        return await self._produce(partition, build_batch([value for _, value in records],
                                                          keys=[key for key, _ in records]))

    async def append_transactional(self, partition: int, records: list[KeyedRecord], producer_id: int,
                                   producer_epoch: int) -> BrokerResponseError | None:
        """The batch continues the producer's sequence in this partition (0 at a new epoch), as
        the partition's producer state checks it."""
        try:
            entry = self.replica_manager.producers(OFFSETS_TOPIC, partition).get(producer_id)
        except BrokerResponseError:
            return NotCoordinatorError(f"{OFFSETS_TOPIC}-{partition} is not led here")
        sequence = entry.last_sequence + 1 if entry is not None and entry.epoch == producer_epoch else 0
        batch = build_batch([value for _, value in records], keys=[key for key, _ in records],
                            producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=sequence,
                            transactional=True)
        return await self._produce(partition, batch)

    async def _produce(self, partition: int, batch: bytes) -> BrokerResponseError | None:
        request = protocol.ProduceRequest(-1, self.config.offsets_commit_timeout_ms,
                                          [protocol.ProducePartition(OFFSETS_TOPIC, partition, batch)])
        results = await self.replica_manager.produce(request, allow_internal=True)
        code = results[0].error_code if results else 0
        if code == 0:
            return None
        mapped = _WRITE_ERROR_MAP.get(code)
        message = results[0].error_message
        return mapped(message) if mapped else protocol.error_for(code, message)

    async def read_resolved(self, partition: int) -> ResolvedOffsets:
        """The partition's files are read on a worker thread; what was appended meanwhile (a
        marker, say) is read after it, the last few offsets on the event loop so that nothing
        can land between the read and the caller adopting it."""
        hosted = self.replica_manager.partitions.get((OFFSETS_TOPIC, partition))
        if hosted is None:
            raise NotCoordinatorError(f"{OFFSETS_TOPIC}-{partition} is not hosted here")
        partition_log = hosted.log
        resolved = ResolvedOffsets(partition_log.log_start_offset)
        resolved = await asyncio.to_thread(self._read_from, partition_log, resolved)
        while partition_log.log_end_offset - resolved.next_offset > LOOP_CATCH_UP_OFFSETS:
            resolved = await asyncio.to_thread(self._read_from, partition_log, resolved)
        return self._read_from(partition_log, resolved)

    @staticmethod
    def _read_from(partition_log: PartitionLog, resolved: ResolvedOffsets) -> ResolvedOffsets:
        return resolved.extended(partition_log.batches(resolved.next_offset))

    @staticmethod
    def _read_log(partition_log: PartitionLog) -> list[KeyedRecord]:
        """Every keyed record of a log with its transactions resolved (worker thread)."""
        return resolve_transactions(partition_log.batches(partition_log.log_start_offset))[0]


def _is_commit_marker(batch: RecordBatch) -> bool | None:
    """True / False for a commit / abort marker batch; None when its record is not a marker."""
    for record in batch.records():
        key = record.key
        if key is not None and len(key) >= 4:
            kind = int.from_bytes(key[2:4], "big", signed=True)
            if kind in (0, 1):
                return kind == 1
        return None
    return None


@dataclass
class ResolvedOffsets:
    """An offsets partition read with its transactions applied, up to ``next_offset``: the
    records in effect (a transactional batch's records take effect at their producer's commit
    marker and are dropped at an abort) and, by producer id, those of transactions still open."""

    next_offset: int
    records: list[KeyedRecord] = field(default_factory=list)
    open_transactions: dict[int, list[KeyedRecord]] = field(default_factory=dict)

    def extended(self, batches: Iterable[RecordBatch]) -> ResolvedOffsets:
        """Go on with ``batches`` (those from ``next_offset`` on), in place; returns self."""
        records, open_transactions = self.records, self.open_transactions
        for batch in batches:
            self.next_offset = max(self.next_offset, batch.base_offset + batch.last_offset_delta + 1)
            if batch.is_control:
                committed = _is_commit_marker(batch)
                pending = open_transactions.pop(batch.producer_id, [])
                if committed:
                    records.extend(pending)
                continue
            keyed = [(record.key, record.value) for record in batch.records() if record.key is not None]
            if batch.is_transactional:
                open_transactions.setdefault(batch.producer_id, []).extend(keyed)
            else:
                records.extend(keyed)
        return self


def resolve_transactions(batches: Iterable[RecordBatch]) -> tuple[list[KeyedRecord], dict[int, list[KeyedRecord]]]:
    """Keyed records of ``batches`` with transactions applied (see :class:`ResolvedOffsets`):
    the records in effect and, by producer id, those of transactions still open."""
    resolved = ResolvedOffsets(0).extended(batches)
    return resolved.records, resolved.open_transactions


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


@dataclass
class PendingTxnOffsets:
    """One producer's transactional commits to one group, waiting for the producer's marker."""

    partition: int
    offsets: dict[tuple[str, int], OffsetValue] = field(default_factory=dict)


class OffsetStore:
    """Commits, group records and tombstones of the groups, written through an :class:`OffsetLog`."""

    def __init__(self, config: BrokerConfig, offset_log: OffsetLog) -> None:
        self.config = config
        self.log = offset_log
        #: Producer id → group id → its pending transactional commits.
        self.pending: dict[int, dict[str, PendingTxnOffsets]] = {}

    def _commit_writes(self, group: Group, partitions: list[CommitPartition], now_ms: int
                       ) -> tuple[dict[tuple[str, int], BrokerResponseError], list[tuple[OffsetKey, OffsetValue]]]:
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
        return problems, writes

    async def commit_transactional(self, group: Group, partitions: list[CommitPartition], producer_id: int,
                                   producer_epoch: int, now_ms: int) -> list[PartitionOutcome]:
        """Write the offsets as the producer's transactional batch (one append) and hold them
        pending until its marker; each partition's outcome in request order."""
        problems, writes = self._commit_writes(group, partitions, now_ms)
        error = None
        if writes:
            error = await self.log.append_transactional(
                group.partition, [(key.encode(), value.encode()) for key, value in writes], producer_id,
                producer_epoch)
            if error is None:
                pending = self.pending.setdefault(producer_id, {}).setdefault(
                    group.group_id, PendingTxnOffsets(group.partition))
                for key, value in writes:
                    pending.offsets[(key.topic, key.partition)] = value
        return [PartitionOutcome(item.topic, item.partition, problems.get((item.topic, item.partition)) or error)
                for item in partitions]

    def complete_transaction(self, partition: int, producer_id: int, committed: bool,
                             group_for: Callable[[str, int], Group]) -> None:
        """The producer's marker landed in offsets partition ``partition``: materialise (commit,
        into the group ``group_for`` returns, created if need be) or drop (abort) its pending
        commits to the groups of that partition."""
        by_group = self.pending.get(producer_id)
        if not by_group:
            return
        for group_id in [group_id for group_id, item in by_group.items() if item.partition == partition]:
            item = by_group.pop(group_id)
            if committed:
                group_for(group_id, partition).offsets.update(item.offsets)
        if not by_group:
            del self.pending[producer_id]

    def load_pending(self, partition: int, open_transactions: dict[int, list[KeyedRecord]]) -> None:
        """Hold the commits of transactions found open when loading ``partition``."""
        for producer_id, records in open_transactions.items():
            for key_bytes, value_bytes in records:
                try:
                    key = decode_key(key_bytes)
                    if not isinstance(key, OffsetKey) or value_bytes is None:
                        continue
                    value = decode_offset_value(value_bytes)
                except KafkaliteError as exc:
                    log.warning("%s-%d: skipping unreadable transactional record: %s", OFFSETS_TOPIC, partition, exc)
                    continue
                pending = self.pending.setdefault(producer_id, {}).setdefault(key.group, PendingTxnOffsets(partition))
                pending.offsets[(key.topic, key.partition)] = value

    def unload_pending(self, partition: int) -> None:
        for producer_id in list(self.pending):
            by_group = self.pending[producer_id]
            for group_id in [group_id for group_id, item in by_group.items() if item.partition == partition]:
                del by_group[group_id]
            if not by_group:
                del self.pending[producer_id]

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        return any((topic, partition) in by_group[group_id].offsets
                   for by_group in self.pending.values() if group_id in by_group)

    async def commit(self, group: Group, partitions: list[CommitPartition], now_ms: int) -> list[PartitionOutcome]:
        """Store the offsets (one append); each partition's outcome in request order."""
        problems, writes = self._commit_writes(group, partitions, now_ms)
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

    def committed_stable(self, group_id: str, group: Group | None,
                         topics: list[tuple[str, list[int] | None]] | None) -> list[CommittedOffset]:
        """Like :meth:`committed`, but a partition with a transactional commit still pending
        answers UNSTABLE_OFFSET_COMMIT (OffsetFetch with ``require_stable``)."""
        answers = []
        for item in self.committed(group, topics):
            if self.has_pending(group_id, item.topic, item.partition):
                item = CommittedOffset(item.topic, item.partition, -1, -1, "", UnstableOffsetCommitError(
                    f"a transactional commit of {item.topic}-{item.partition} is pending"))
            answers.append(item)
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
