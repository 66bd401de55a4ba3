"""The log side of transactions on the twin and a fake clock: transactional produce opening a
transaction, the last stable offset, WriteTxnMarkers on the leader (acks=all wait, epoch
fencing, listeners), read_committed fetch and ListOffsets, a follower replicating markers,
truncation and recovery rebuilding producer state and the ``.txnindex``.

Broker 1 runs a real ReplicaManager over real logs; followers 2 and 3 are played by the test
(their fetches sent straight to the leader), or a detached ReplicaManager applies what it fetched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

from kafkalite import protocol
from kafkalite.broker.partition import Partition, Role
from kafkalite.broker.replica import ReplicaManager
from kafkalite.broker.services import ReplicaService, TxnMarkerRequest
from kafkalite.config import LogConfig
from kafkalite.coord import znodes
from kafkalite.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    NotLeaderForPartitionError,
    RequestTimedOutError,
    TransactionCoordinatorFencedError,
)
from kafkalite.protocol import FetchPartition, FetchRequest, FetchResult, ProducePartition, ProduceRequest
from kafkalite.record.batch import build_batch, iter_batches
from kafkalite.record.control import batch_marker
from kafkalite.storage import files
from kafkalite.storage.log import PartitionLog
from kafkalite.storage.txnindex import ENTRY_SIZE, AbortedTxn, decode_entries
from tests.unit.broker.harness import BrokerCluster, FakeClock

Run = Callable[[Callable[[BrokerCluster], Awaitable[None]]], object]

TOPIC = "txn"
PRODUCER = 4000
OTHER = 4001


async def leader_of_three(cluster: BrokerCluster) -> tuple[ReplicaManager, Partition]:
    node = await cluster.add_broker(1, replicas=True, candidate=False, log=LogConfig(min_insync_replicas=2))
    await cluster.create_topic(TOPIC, {0: [1, 2, 3]})
    await cluster.write_state(TOPIC, 0, znodes.PartitionState(1, 0, [1, 2, 3], controller_epoch=1))
    manager = node.replica_manager
    await cluster.wait_until(lambda: (TOPIC, 0) in manager.partitions
                             and manager.partitions[(TOPIC, 0)].role is Role.LEADER, "broker 1 leads")
    return manager, manager.partitions[(TOPIC, 0)]


def txn_batch(producer_id: int, sequence: int, count: int, epoch: int = 0, transactional: bool = True) -> bytes:
    return build_batch([f"p{producer_id}-{sequence + index}".encode() for index in range(count)], timestamps=0,
                       producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                       transactional=transactional)


async def produce(manager: ReplicaManager, records: bytes) -> int:
    [result] = await manager.produce(ProduceRequest(1, 10_000, [ProducePartition(TOPIC, 0, records)]))
    assert result.error_code == 0, result.error_message
    return result.base_offset


async def replicate(manager: ReplicaManager, partition: Partition) -> None:
    """Followers 2 and 3 fetch up to the leader's log end (the high watermark follows)."""
    for replica in (2, 3):
        await manager.fetch(FetchRequest([FetchPartition(TOPIC, 0, partition.log_end_offset)],
                                         replica_id=replica, max_wait_ms=0))


async def consume(manager: ReplicaManager, isolation: int, offset: int = 0) -> FetchResult:
    [result] = await manager.fetch(FetchRequest([FetchPartition(TOPIC, 0, offset)], max_wait_ms=0,
                                                isolation_level=isolation))
    assert result.error_code == 0, result.error_message
    return result


def service(manager: ReplicaManager) -> ReplicaService:
    return ReplicaService(manager, cast(Any, None))  # write_txn_markers needs no controller


def marker(committed: bool, producer_id: int = PRODUCER, epoch: int = 0, coordinator_epoch: int = 5,
           ) -> TxnMarkerRequest:
    return TxnMarkerRequest(producer_id, epoch, committed, coordinator_epoch, [(TOPIC, 0)])


def offsets_of(records: bytes | bytearray | memoryview) -> list[tuple[int, int, bool]]:
    """(base offset, last offset, is control) of each batch."""
    return [(batch.base_offset, batch.last_offset, batch.is_control) for batch in iter_batches(records)]


def test_an_open_transaction_holds_the_lso_until_its_commit_marker_is_replicated(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager, partition = await leader_of_three(cluster)
        await produce(manager, build_batch([b"plain-0", b"plain-1"], timestamps=0))  # offsets 0..1
        assert await produce(manager, txn_batch(PRODUCER, 0, 3)) == 2  # offsets 2..4, transaction opens at 2
        await produce(manager, build_batch([b"plain-5"], timestamps=0))  # offset 5
        await replicate(manager, partition)
        assert (partition.high_watermark, partition.last_stable_offset) == (6, 2)

        committed = await consume(manager, protocol.READ_COMMITTED)
        assert committed.last_stable_offset == 2 and committed.high_watermark == 6
        assert offsets_of(committed.records) == [(0, 1, False)]  # nothing at or past the LSO
        assert committed.aborted_transactions == []
        uncommitted = await consume(manager, protocol.READ_UNCOMMITTED)
        assert [base for base, _, _ in offsets_of(uncommitted.records)] == [0, 2, 5]
        assert uncommitted.aborted_transactions is None
        assert manager.list_offset(TOPIC, 0, protocol.LATEST_TIMESTAMP, protocol.READ_COMMITTED)[0] == 2
        assert manager.list_offset(TOPIC, 0, protocol.LATEST_TIMESTAMP, protocol.READ_UNCOMMITTED)[0] == 6

        heard: list[tuple[str, int, int, bool]] = []
        manager.add_marker_listener(lambda *event: heard.append(event))
        writing = asyncio.create_task(service(manager).write_txn_markers([marker(True)], 10_000))
        await cluster.ensemble.settle()
        assert not writing.done()  # acks=all: waits for the ISR
        assert heard == [(TOPIC, 0, PRODUCER, True)]
        assert partition.last_stable_offset == 2  # the marker (offset 6) is not below the high watermark yet
        await replicate(manager, partition)
        [result] = await asyncio.wait_for(writing, 1.0)
        assert result.producer_id == PRODUCER and result.errors == {(TOPIC, 0): 0}
        assert (partition.high_watermark, partition.last_stable_offset) == (7, 7)

        everything = await consume(manager, protocol.READ_COMMITTED)
        assert offsets_of(everything.records)[-1] == (6, 6, True)
        control = list(iter_batches(everything.records))[-1]
        assert control.is_transactional and control.producer_id == PRODUCER
        found = batch_marker(control)
        assert found is not None and found.committed and found.coordinator_epoch == 5
        assert everything.aborted_transactions == []
        assert manager.list_offset(TOPIC, 0, protocol.LATEST_TIMESTAMP, protocol.READ_COMMITTED)[0] == 7

    run(scenario)


def test_an_abort_marker_lists_the_transaction_for_read_committed_and_writes_the_txnindex(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager, partition = await leader_of_three(cluster)
        await produce(manager, txn_batch(PRODUCER, 0, 2))  # 0..1 aborted below
        await produce(manager, txn_batch(OTHER, 0, 2))  # 2..3 of another producer, still open
        await produce(manager, txn_batch(PRODUCER, 2, 1))  # 4, same transaction as 0..1
        await replicate(manager, partition)
        writing = asyncio.create_task(service(manager).write_txn_markers([marker(False)], 10_000))
        await cluster.ensemble.settle()
        await replicate(manager, partition)
        [result] = await asyncio.wait_for(writing, 1.0)
        assert result.errors == {(TOPIC, 0): 0}
        # The other producer's transaction (from 2) still holds the LSO.
        assert (partition.high_watermark, partition.last_stable_offset) == (6, 2)

        entries = partition.log.active_segment.txn_index.entries
        assert entries == [AbortedTxn(PRODUCER, 0, 5, 2)]
        path = files.segment_path(partition.log.directory, 0, files.TXN_INDEX_SUFFIX)
        data = path.read_bytes()
        assert len(data) == ENTRY_SIZE == 34 and decode_entries(data) == entries

        answer = await consume(manager, protocol.READ_COMMITTED)
        assert offsets_of(answer.records) == [(0, 1, False)]
        assert answer.aborted_transactions == [(PRODUCER, 0)]

        writing = asyncio.create_task(service(manager).write_txn_markers([marker(True, OTHER)], 10_000))
        await cluster.ensemble.settle()
        await replicate(manager, partition)
        await asyncio.wait_for(writing, 1.0)
        assert partition.last_stable_offset == partition.high_watermark == 7
        answer = await consume(manager, protocol.READ_COMMITTED)
        assert [base for base, _, _ in offsets_of(answer.records)] == [0, 2, 4, 5, 6]
        assert answer.aborted_transactions == [(PRODUCER, 0)]
        # From past the aborted transaction's marker it is no longer listed.
        assert (await consume(manager, protocol.READ_COMMITTED, 6)).aborted_transactions == []

    run(scenario)


def test_markers_are_fenced_by_producer_and_coordinator_epoch_and_need_the_leader(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager, partition = await leader_of_three(cluster)
        await produce(manager, txn_batch(PRODUCER, 0, 1, epoch=3))
        replicas = service(manager)
        [old_epoch] = await replicas.write_txn_markers([marker(False, epoch=2)], 0)
        assert old_epoch.errors == {(TOPIC, 0): InvalidProducerEpochError.errno}
        [timed_out] = await replicas.write_txn_markers([marker(False, epoch=3, coordinator_epoch=7)], 0)
        assert timed_out.errors == {(TOPIC, 0): RequestTimedOutError.errno}  # appended, the ISR did not follow
        [old_coordinator] = await replicas.write_txn_markers([marker(True, epoch=3, coordinator_epoch=6)], 0)
        assert old_coordinator.errors == {(TOPIC, 0): TransactionCoordinatorFencedError.errno}
        assert partition.log_end_offset == 2  # the refused markers were never written
        [unknown] = await replicas.write_txn_markers(
            [TxnMarkerRequest(PRODUCER, 3, True, 7, [("no-such-topic", 0)])], 0)
        assert unknown.errors[("no-such-topic", 0)] != 0

        # A producer with an open transaction may not write outside it.
        await produce(manager, txn_batch(OTHER, 0, 1))
        [refused] = await manager.produce(ProduceRequest(1, 1_000, [
            ProducePartition(TOPIC, 0, txn_batch(OTHER, 1, 1, transactional=False))]))
        assert refused.error_code == InvalidTxnStateError.errno

        await cluster.write_state(TOPIC, 0, znodes.PartitionState(2, 1, [2, 3], controller_epoch=1))
        await cluster.wait_until(lambda: partition.role is not Role.LEADER, "broker 1 follows")
        [moved] = await replicas.write_txn_markers([marker(True, epoch=3, coordinator_epoch=7)], 0)
        assert moved.errors == {(TOPIC, 0): NotLeaderForPartitionError.errno}

    run(scenario)


def test_a_follower_replicates_markers_and_a_truncation_reopens_a_transaction(run: Run, clock: FakeClock) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager, leader = await leader_of_three(cluster)
        await produce(manager, txn_batch(PRODUCER, 0, 2))
        await replicate(manager, leader)
        writing = asyncio.create_task(service(manager).write_txn_markers([marker(False)], 10_000))
        await cluster.ensemble.settle()
        await replicate(manager, leader)
        await asyncio.wait_for(writing, 1.0)

        follower = cluster.detached_replica_manager(2)
        heard: list[tuple[str, int, int, bool]] = []
        follower.add_marker_listener(lambda *event: heard.append(event))
        follower_log = follower.log_manager.get_or_create(TOPIC, 0)
        follower_partition = Partition(TOPIC, 0, follower_log, 2, clock)
        follower_partition.make_follower(1, 0, [1, 2, 3], [1, 2, 3], 0, 1)
        [fetched] = await manager.fetch(FetchRequest([FetchPartition(TOPIC, 0, 0)], replica_id=2, max_wait_ms=0))
        await follower.apply_fetched(follower_partition, fetched)
        assert heard == [(TOPIC, 0, PRODUCER, False)]
        assert follower_log.active_segment.txn_index.entries == [AbortedTxn(PRODUCER, 0, 2, 3)]
        assert follower_partition.last_stable_offset == follower_log.high_watermark == 3

        # The leader's marker turns out not to be in the new lineage: the follower truncates
        # below it and its transaction is open again, with no aborted entry left.
        follower_log.truncate_to(2)
        follower_partition.producer_state_stale = True
        await follower._rebuild_if_stale(follower_partition)
        assert follower_partition.producer_state.ongoing == {PRODUCER: 0}
        assert follower_log.active_segment.txn_index.entries == []
        follower_log.update_high_watermark(2)
        assert follower_partition.last_stable_offset == 0

    run(scenario)


def test_recovery_rebuilds_open_transactions_and_the_txnindex(run: Run, clock: FakeClock) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager, partition = await leader_of_three(cluster)
        await produce(manager, txn_batch(PRODUCER, 0, 2))
        await replicate(manager, partition)
        writing = asyncio.create_task(service(manager).write_txn_markers([marker(False)], 10_000))
        await cluster.ensemble.settle()
        await replicate(manager, partition)
        await asyncio.wait_for(writing, 1.0)
        await produce(manager, txn_batch(OTHER, 0, 1))  # offset 3, left open
        log = partition.log
        index_path = files.segment_path(log.directory, 0, files.TXN_INDEX_SUFFIX)
        expected = index_path.read_bytes()
        assert len(expected) == ENTRY_SIZE
        log.flush()
        index_path.write_bytes(b"\x00" * 10)  # damage: recovery must rebuild it from the markers
        reopened_directory = log.directory

        # An unclean restart: every segment is recovered and the producer state replayed.
        reopened = PartitionLog(reopened_directory, TOPIC, 0, log.config, clock=clock, high_watermark=4)
        replayed = Partition(TOPIC, 0, reopened, 1, clock)
        await asyncio.to_thread(replayed.rebuild_producer_state)
        assert index_path.read_bytes() == expected
        assert replayed.producer_state.ongoing == {OTHER: 3}
        assert replayed.producer_state.producers[PRODUCER].coordinator_epoch == 5
        assert replayed.last_stable_offset == 3
        reopened.close()

    run(scenario)
