"""The transaction and group coordinators over a real ReplicaManager on the twin and a fake clock.

Broker 1 leads ``__transaction_state``-0, ``__consumer_offsets``-0 and ``output``-0 (real logs in
the scenario's directory); the coordinators get their leadership from the replica manager's
listeners, write their state through its produce path and their markers through the replica
service's WriteTxnMarkers, exactly as a broker wires them (server.py). A leader-epoch change of
the ``__transaction_state`` partition reloads it from its log under the new coordinator epoch.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Awaitable, Callable
from typing import Any, cast

from kafkalite import protocol
from kafkalite.broker.group_api import CommitPartition, OffsetFetchRequest, TxnOffsetCommitRequest
from kafkalite.broker.group_coordinator import GroupCoordinator
from kafkalite.broker.group_offsets import OFFSETS_TOPIC, ReplicaOffsetLog
from kafkalite.broker.partition import Role
from kafkalite.broker.replica import ReplicaManager
from kafkalite.broker.services import ReplicaService
from kafkalite.broker.txn_coordinator import TransactionCoordinator
from kafkalite.broker.txn_markers import BrokerMarkerChannel, BrokerTxnTopology, ReplicaTxnStateLog
from kafkalite.broker.txn_records import TRANSACTION_STATE_TOPIC, TxnState
from kafkalite.coord import znodes
from kafkalite.errors import UnstableOffsetCommitError
from kafkalite.protocol import FetchPartition, FetchRequest, ProducePartition, ProduceRequest
from kafkalite.record.batch import build_batch, iter_batches
from kafkalite.record.control import batch_marker
from tests.unit.broker.harness import BrokerCluster

Run = Callable[[Callable[[BrokerCluster], Awaitable[None]]], object]

OUTPUT = "output"
GROUP = "copier"
TXN = "copier-1"


async def lead(cluster: BrokerCluster, topic: str, epoch: int) -> None:
    await cluster.write_state(topic, 0, znodes.PartitionState(1, epoch, [1], controller_epoch=1))


async def broker_with_coordinators(cluster: BrokerCluster) -> tuple[ReplicaManager, TransactionCoordinator,
                                                                     GroupCoordinator]:
    node = await cluster.add_broker(1, replicas=True, candidate=False)
    manager = node.replica_manager
    config = dataclasses.replace(node.config, group_initial_rebalance_delay_ms=0)
    ids = itertools.count(5000)

    async def next_producer_id() -> int:
        return next(ids)

    transactions = TransactionCoordinator(
        config, BrokerTxnTopology(config, node.metadata, cast(Any, None)), ReplicaTxnStateLog(config, manager),
        BrokerMarkerChannel(config, node.metadata, ReplicaService(manager, cast(Any, None)).write_txn_markers,
                            cast(Any, None)),
        next_producer_id, cluster.clock)
    groups = GroupCoordinator(config, node.metadata, cast(Any, None), ReplicaOffsetLog(config, manager), cluster.clock)
    manager.leadership_listeners.append(groups.on_leadership)
    manager.leadership_listeners.append(lambda partition: transactions.on_leadership(
        partition.topic, partition.partition, partition.is_leader, partition.leader_epoch))
    manager.add_marker_listener(groups.on_marker)
    for topic in (TRANSACTION_STATE_TOPIC, OFFSETS_TOPIC, OUTPUT):
        await cluster.create_topic(topic, {0: [1]})
        await lead(cluster, topic, 3)
    await cluster.wait_until(lambda: all((topic, 0) in manager.partitions
                                         and manager.partitions[(topic, 0)].role is Role.LEADER
                                         for topic in (TRANSACTION_STATE_TOPIC, OFFSETS_TOPIC, OUTPUT)),
                             "broker 1 leads every partition")
    await cluster.wait_until(lambda: transactions.owned.get(0) == 3 and 0 in groups.owned, "both coordinators loaded")
    return manager, transactions, groups


def test_a_committed_transaction_marks_its_partitions_and_its_offsets_and_survives_a_reload(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager, transactions, groups = await broker_with_coordinators(cluster)
        producer_id, epoch = await transactions.init_producer_id(TXN, 60_000)
        assert all(error is None for error in (await transactions.add_partitions(
            TXN, producer_id, epoch, [(OUTPUT, 0)])).values())
        await transactions.add_offsets(TXN, producer_id, epoch, GROUP)
        batch = build_batch([b"a", b"b"], producer_id=producer_id, producer_epoch=epoch, base_sequence=0,
                            transactional=True)
        [produced] = await manager.produce(ProduceRequest(-1, 10_000, [ProducePartition(OUTPUT, 0, batch)]))
        assert produced.error_code == 0
        answer = await groups.txn_offset_commit(TxnOffsetCommitRequest(
            TXN, GROUP, producer_id, epoch, -1, "", None, [CommitPartition("input", 0, 2)]))
        assert [item.error for item in answer.partitions] == [None]
        fetched = await groups.offset_fetch(OffsetFetchRequest(GROUP, [("input", [0])], require_stable=True))
        assert isinstance(fetched.partitions[0].error, UnstableOffsetCommitError)
        output = manager.partitions[(OUTPUT, 0)]
        assert output.last_stable_offset == 0

        await transactions.end_txn(TXN, producer_id, epoch, True)
        await cluster.wait_until(lambda: transactions.transactions[TXN].state is TxnState.COMPLETE_COMMIT,
                                 "CompleteCommit")
        assert output.last_stable_offset == output.high_watermark == 3  # two records and the marker
        [result] = await manager.fetch(FetchRequest([FetchPartition(OUTPUT, 0, 0)], max_wait_ms=0,
                                                    isolation_level=protocol.READ_COMMITTED))
        control = list(iter_batches(result.records))[-1]
        found = batch_marker(control)
        assert found is not None and found.committed and found.coordinator_epoch == 3
        fetched = await groups.offset_fetch(OffsetFetchRequest(GROUP, [("input", [0])], require_stable=True))
        assert (fetched.partitions[0].offset, fetched.partitions[0].error) == (2, None)

        # a new leader epoch of __transaction_state: the coordinator reloads from the log
        await lead(cluster, TRANSACTION_STATE_TOPIC, 4)
        await cluster.wait_until(lambda: transactions.owned.get(0) == 4, "reloaded under epoch 4")
        reloaded = transactions.transactions[TXN]
        assert (reloaded.producer_id, reloaded.producer_epoch, reloaded.state) == \
            (producer_id, epoch, TxnState.COMPLETE_COMMIT)
        assert await transactions.init_producer_id(TXN, 60_000) == (producer_id, epoch + 1)

    run(scenario)


def test_a_reload_finishes_a_prepared_abort_under_the_new_coordinator_epoch(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager, transactions, _ = await broker_with_coordinators(cluster)
        producer_id, epoch = await transactions.init_producer_id(TXN, 60_000)
        await transactions.add_partitions(TXN, producer_id, epoch, [(OUTPUT, 0)])
        batch = build_batch([b"x"], producer_id=producer_id, producer_epoch=epoch, base_sequence=0, transactional=True)
        await manager.produce(ProduceRequest(-1, 10_000, [ProducePartition(OUTPUT, 0, batch)]))
        output = manager.partitions[(OUTPUT, 0)]
        # the output partition has no leader: the abort's marker cannot be written yet
        await cluster.write_state(OUTPUT, 0, znodes.PartitionState(-1, 4, [1], controller_epoch=1))
        await cluster.wait_until(lambda: output.role is not Role.LEADER, "output partition offline")
        await transactions.end_txn(TXN, producer_id, epoch, False)
        assert transactions.transactions[TXN].state is TxnState.PREPARE_ABORT
        # the coordinator moves on to a new epoch, then the output partition comes back
        await lead(cluster, TRANSACTION_STATE_TOPIC, 5)
        await cluster.wait_until(lambda: transactions.owned.get(0) == 5, "reloaded under epoch 5")
        await lead(cluster, OUTPUT, 6)
        await cluster.wait_until(lambda: transactions.transactions[TXN].state is TxnState.COMPLETE_ABORT,
                                 "CompleteAbort", timeout=10)
        output = manager.partitions[(OUTPUT, 0)]
        [result] = await manager.fetch(FetchRequest([FetchPartition(OUTPUT, 0, 0)], max_wait_ms=0,
                                                    isolation_level=protocol.READ_COMMITTED))
        assert result.aborted_transactions == [(producer_id, 0)]
        found = batch_marker(list(iter_batches(result.records))[-1])
        assert found is not None and not found.committed and found.coordinator_epoch == 5

    run(scenario)
