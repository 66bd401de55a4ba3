"""The transaction coordinator's state machine on a fake clock.

The coordinator runs with its seams played in memory: ``__transaction_state`` is a list of
keyed records per partition (read back by loading, as a new coordinator would), the marker
channel records every marker request and answers with the codes a test sets, the topology is
a fixed set of partitions. Time is a fake millisecond clock moved by the tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kafkalite.broker.txn_coordinator import OFFSETS_TOPIC, TransactionCoordinator
from kafkalite.broker.txn_records import (
    TxnState,
    TxnValue,
    decode_key,
    decode_value,
    encode_key,
    replay,
)
from kafkalite.config import BrokerConfig
from kafkalite.errors import (
    BrokerResponseError,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    NotCoordinatorError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
)

TXN = "copier-1"
TOPIC = "output"
PARTITIONS = 1  # one __transaction_state partition: every id maps to partition 0
COORDINATOR_EPOCH = 7


class MemoryStateLog:
    def __init__(self) -> None:
        self.records: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.error: BrokerResponseError | None = None
        #: How many of the next appends fail with ``error`` (then it is cleared).
        self.failures = 0

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> BrokerResponseError | None:
        await asyncio.sleep(0)
        if self.error is not None:
            error = self.error
            self.failures -= 1
            if self.failures <= 0:
                self.error = None
            return error
        self.records.setdefault(partition, []).extend(records)
        return None

    async def read(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        return list(self.records.get(partition, []))

    def states(self) -> list[tuple[str, TxnValue | None]]:
        return [(decode_key(key), None if value is None else decode_value(value))
                for key, value in self.records.get(0, [])]


@dataclasses.dataclass
class MarkerCall:
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: list[tuple[str, int]]


class RecordingMarkers:
    def __init__(self) -> None:
        self.calls: list[MarkerCall] = []
        self.code = 0
        #: When set, markers are answered only once it is released (a leader's acks=all wait).
        self.gate: asyncio.Event | None = None

    async def send(self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                   partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self.calls.append(MarkerCall(producer_id, producer_epoch, committed, coordinator_epoch, list(partitions)))
        await asyncio.sleep(0)
        if self.gate is not None:
            await self.gate.wait()
        return dict.fromkeys(partitions, self.code)


class FixedTopology:
    def state_partition_count(self) -> int:
        return PARTITIONS

    async def create_state_topic(self) -> BrokerResponseError | None:
        return None

    def coordinator_endpoint(self, partition: int) -> tuple[int, str, int] | None:
        return (1, "127.0.0.1", 9092)

    def partition_exists(self, topic: str, partition: int) -> bool:
        return topic in (TOPIC, OFFSETS_TOPIC) and 0 <= partition < 3

    def offsets_partition(self, group_id: str) -> int:
        return 2


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Harness:
    def __init__(self, **settings: Any) -> None:
        self.config = dataclasses.replace(BrokerConfig(), **settings)
        self.log = MemoryStateLog()
        self.markers = RecordingMarkers()
        self.clock = Clock()
        self.next_id = 1000
        self.coordinator = self.new_coordinator()

    def new_coordinator(self) -> TransactionCoordinator:
        return TransactionCoordinator(self.config, FixedTopology(), self.log, self.markers, self._producer_id,
                                      self.clock)

    async def _producer_id(self) -> int:
        self.next_id += 1
        return self.next_id

    async def settle(self, condition: Callable[[], bool], timeout: float = 5.0) -> None:
        """Let background marker tasks run (their retries back off in real time) until
        ``condition`` holds; the deadline only bounds a broken scenario."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not condition():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("the coordinator did not get there")
            await asyncio.sleep(0.001)

    def state(self, transactional_id: str = TXN) -> TxnState:
        return self.coordinator.transactions[transactional_id].state


def scenario(test: Callable[[Harness], Awaitable[None]], **settings: Any) -> None:
    async def main() -> None:
        harness = Harness(**settings)
        await harness.coordinator.load(0, COORDINATOR_EPOCH)
        try:
            await asyncio.wait_for(test(harness), 10)
        finally:
            await harness.coordinator.stop()
    asyncio.run(main())


def test_init_bumps_the_epoch_and_fences_the_older_instance() -> None:
    async def test(h: Harness) -> None:
        coordinator = h.coordinator
        producer_id, epoch = await coordinator.init_producer_id(TXN, 60_000)
        assert (producer_id, epoch) == (1001, 0)
        assert await coordinator.init_producer_id(TXN, 60_000) == (1001, 1)
        with pytest.raises(ProducerFencedError):
            _raise_first(await coordinator.add_partitions(TXN, producer_id, 0, [(TOPIC, 0)]))
        with pytest.raises(ProducerFencedError):
            await coordinator.end_txn(TXN, producer_id, 0, True)
        with pytest.raises(InvalidProducerIdMappingError):
            await coordinator.end_txn(TXN, 4242, 1, True)
        assert [value.producer_epoch for _, value in h.log.states() if value] == [0, 1]
    scenario(test)


def _raise_first(outcomes: dict[tuple[str, int], BrokerResponseError | None]) -> None:
    for error in outcomes.values():
        if error is not None:
            raise error


def test_commit_writes_prepare_markers_then_complete() -> None:
    async def test(h: Harness) -> None:
        coordinator = h.coordinator
        producer_id, epoch = await coordinator.init_producer_id(TXN, 60_000)
        _raise_first(await coordinator.add_partitions(TXN, producer_id, epoch, [(TOPIC, 0), (TOPIC, 1)]))
        await coordinator.add_offsets(TXN, producer_id, epoch, "group")
        assert h.state() is TxnState.ONGOING
        await coordinator.end_txn(TXN, producer_id, epoch, True)
        await h.settle(lambda: h.state() is TxnState.COMPLETE_COMMIT)
        assert [call.partitions for call in h.markers.calls] == [[(OFFSETS_TOPIC, 2), (TOPIC, 0), (TOPIC, 1)]]
        call = h.markers.calls[0]
        assert (call.producer_id, call.producer_epoch, call.committed, call.coordinator_epoch) == \
            (producer_id, epoch, True, COORDINATOR_EPOCH)
        assert [value.state for _, value in h.log.states() if value] == [
            TxnState.EMPTY, TxnState.ONGOING, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
        await coordinator.end_txn(TXN, producer_id, epoch, True)  # a retried EndTxn is answered alike
        with pytest.raises(InvalidTxnStateError):
            await coordinator.end_txn(TXN, producer_id, epoch, False)
        # a reloaded coordinator sees the same thing
        reloaded = replay(h.log.records[0])[TXN]
        assert (reloaded.state, reloaded.partitions, reloaded.producer_epoch) == \
            (TxnState.COMPLETE_COMMIT, set(), epoch)
    scenario(test)


def test_requests_during_marker_retries_get_concurrent_transactions() -> None:
    async def test(h: Harness) -> None:
        coordinator = h.coordinator
        producer_id, epoch = await coordinator.init_producer_id(TXN, 60_000)
        _raise_first(await coordinator.add_partitions(TXN, producer_id, epoch, [(TOPIC, 0)]))
        h.markers.code = 6  # NOT_LEADER_OR_FOLLOWER: the leader moved, retry
        await coordinator.end_txn(TXN, producer_id, epoch, False)
        await h.settle(lambda: len(h.markers.calls) >= 1)
        assert h.state() is TxnState.PREPARE_ABORT
        with pytest.raises(ConcurrentTransactionsError):
            await coordinator.end_txn(TXN, producer_id, epoch, False)
        with pytest.raises(ConcurrentTransactionsError):
            _raise_first(await coordinator.add_partitions(TXN, producer_id, epoch, [(TOPIC, 1)]))
        with pytest.raises(ConcurrentTransactionsError):
            await coordinator.init_producer_id(TXN, 60_000)
        h.markers.code = 0
        await h.settle(lambda: h.state() is TxnState.COMPLETE_ABORT)
        assert all(not call.committed for call in h.markers.calls)
        assert await coordinator.init_producer_id(TXN, 60_000) == (producer_id, epoch + 1)
    scenario(test)


def test_the_next_transaction_waits_for_the_previous_markers_instead_of_concurrent_transactions() -> None:
    async def test(h: Harness) -> None:
        coordinator = h.coordinator
        producer_id, epoch = await coordinator.init_producer_id(TXN, 60_000)
        _raise_first(await coordinator.add_partitions(TXN, producer_id, epoch, [(TOPIC, 0)]))
        h.markers.gate = asyncio.Event()
        await coordinator.end_txn(TXN, producer_id, epoch, True)
        # the producer begins its next transaction while the commit's markers are being written
        adding = asyncio.create_task(coordinator.add_partitions(TXN, producer_id, epoch, [(TOPIC, 1)]))
        await h.settle(lambda: len(h.markers.calls) == 1)
        assert not adding.done() and h.state() is TxnState.PREPARE_COMMIT
        h.markers.gate.set()
        _raise_first(await adding)
        assert (h.state(), coordinator.transactions[TXN].partitions) == (TxnState.ONGOING, {(TOPIC, 1)})
        # the waiting request's Ongoing record supersedes CompleteCommit, which is never written
        assert [value.state for _, value in h.log.states() if value][-2:] == [
            TxnState.PREPARE_COMMIT, TxnState.ONGOING]
        # a coordinator loading that log takes the new transaction up, with no markers to resend
        h.coordinator.unload(0)
        calls = len(h.markers.calls)
        await h.coordinator.load(0, COORDINATOR_EPOCH + 1)
        assert (h.state(), h.coordinator.transactions[TXN].partitions) == (TxnState.ONGOING, {(TOPIC, 1)})
        assert len(h.markers.calls) == calls
    scenario(test)


def test_a_commit_nobody_follows_writes_its_complete_state() -> None:
    async def test(h: Harness) -> None:
        coordinator = h.coordinator
        producer_id, epoch = await coordinator.init_producer_id(TXN, 60_000)
        _raise_first(await coordinator.add_partitions(TXN, producer_id, epoch, [(TOPIC, 0)]))
        await coordinator.end_txn(TXN, producer_id, epoch, True)
        await h.settle(lambda: [value.state for _, value in h.log.states() if value][-1] is TxnState.COMPLETE_COMMIT)
        assert h.state() is TxnState.COMPLETE_COMMIT
    scenario(test)


def test_new_instance_aborts_the_ongoing_transaction_of_the_old_one() -> None:
    async def test(h: Harness) -> None:
        coordinator = h.coordinator
        producer_id, epoch = await coordinator.init_producer_id(TXN, 60_000)
        _raise_first(await coordinator.add_partitions(TXN, producer_id, epoch, [(TOPIC, 0)]))
        with pytest.raises(ConcurrentTransactionsError):
            await coordinator.init_producer_id(TXN, 60_000)
        await h.settle(lambda: h.state() is TxnState.COMPLETE_ABORT)
        abort = h.markers.calls[0]
        assert (abort.committed, abort.producer_epoch, abort.partitions) == (False, epoch + 1, [(TOPIC, 0)])
        assert await coordinator.init_producer_id(TXN, 60_000) == (producer_id, epoch + 2)
        with pytest.raises(ProducerFencedError):
            await coordinator.end_txn(TXN, producer_id, epoch, True)
    scenario(test)


def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced() -> None:
    async def test(h: Harness) -> None:
        coordinator = h.coordinator
        producer_id, epoch = await coordinator.init_producer_id(TXN, 10_000)
        _raise_first(await coordinator.add_partitions(TXN, producer_id, epoch, [(TOPIC, 0)]))
        h.clock.now += 9_000
        await coordinator.sweep()
        assert h.state() is TxnState.ONGOING
        h.clock.now += 2_000
        await coordinator.sweep()
        await h.settle(lambda: h.state() is TxnState.COMPLETE_ABORT)
        assert [(call.committed, call.producer_epoch) for call in h.markers.calls] == [(False, epoch + 1)]
        with pytest.raises(ProducerFencedError):
            await coordinator.end_txn(TXN, producer_id, epoch, True)
    scenario(test)


def test_timeouts_above_the_maximum_are_refused() -> None:
    async def test(h: Harness) -> None:
        with pytest.raises(InvalidTransactionTimeoutError):
            await h.coordinator.init_producer_id(TXN, 60_001)
        with pytest.raises(InvalidTransactionTimeoutError):
            await h.coordinator.init_producer_id(TXN, 0)
        assert await h.coordinator.init_producer_id(TXN, 60_000) == (1001, 0)
    scenario(test, transaction_max_timeout_ms=60_000)


def test_end_without_a_transaction_is_an_invalid_state() -> None:
    async def test(h: Harness) -> None:
        producer_id, epoch = await h.coordinator.init_producer_id(TXN, 60_000)
        with pytest.raises(InvalidTxnStateError):
            await h.coordinator.end_txn(TXN, producer_id, epoch, True)
    scenario(test)


def test_a_loaded_prepared_transaction_gets_its_markers_and_completes() -> None:
    async def test(h: Harness) -> None:
        value = TxnValue(55, 3, 60_000, TxnState.PREPARE_COMMIT, [(TOPIC, 2)], h.clock.now, h.clock.now)
        h.log.records[0] = [(encode_key("other"), value.encode())]
        h.coordinator.unload(0)
        with pytest.raises(NotCoordinatorError):
            await h.coordinator.init_producer_id("other", 60_000)
        h.coordinator.loading.add(0)
        with pytest.raises(CoordinatorLoadInProgressError):
            await h.coordinator.init_producer_id("other", 60_000)
        await h.coordinator.load(0, COORDINATOR_EPOCH + 1)
        await h.settle(lambda: h.state("other") is TxnState.COMPLETE_COMMIT)
        call = h.markers.calls[0]
        assert (call.producer_id, call.producer_epoch, call.committed, call.coordinator_epoch, call.partitions) == \
            (55, 3, True, COORDINATOR_EPOCH + 1, [(TOPIC, 2)])
    scenario(test)


def test_idle_transactional_ids_expire_with_a_tombstone() -> None:
    async def test(h: Harness) -> None:
        await h.coordinator.init_producer_id(TXN, 60_000)
        h.clock.now += 3_600_001
        await h.coordinator.sweep()
        assert TXN not in h.coordinator.transactions
        assert h.log.states()[-1] == (TXN, None)
        assert replay(h.log.records[0]) == {}
        [description] = h.coordinator.describe([TXN])
        assert isinstance(description.error, TransactionalIdNotFoundError)
    scenario(test, transactional_id_expiration_ms=3_600_000)


def test_describe_and_list() -> None:
    async def test(h: Harness) -> None:
        coordinator = h.coordinator
        producer_id, epoch = await coordinator.init_producer_id(TXN, 60_000)
        await coordinator.init_producer_id("idle", 60_000)
        _raise_first(await coordinator.add_partitions(TXN, producer_id, epoch, [(TOPIC, 1)]))
        [description] = coordinator.describe([TXN])
        assert (description.error, description.state, description.producer_id, description.partitions) == \
            (None, "Ongoing", producer_id, [(TOPIC, 1)])
        answer = coordinator.list_transactions(["Ongoing", "Bogus"], [])
        assert [item.transactional_id for item in answer.transactions] == [TXN]
        assert answer.unknown_states == ["Bogus"]
        assert sorted(item.transactional_id for item in coordinator.list_transactions([], []).transactions) == \
            ["copier-1", "idle"]
    scenario(test)


def test_unknown_partitions_fail_the_whole_add() -> None:
    async def test(h: Harness) -> None:
        producer_id, epoch = await h.coordinator.init_producer_id(TXN, 60_000)
        outcomes = await h.coordinator.add_partitions(TXN, producer_id, epoch, [(TOPIC, 0), ("nope", 0)])
        assert {key: error.errno if error else 0 for key, error in outcomes.items()} == \
            {(TOPIC, 0): 55, ("nope", 0): 3}
        assert h.state() is TxnState.EMPTY
    scenario(test)


def test_value_schema_round_trip_and_flexible_v1() -> None:
    value = TxnValue(7, 2, 60_000, TxnState.ONGOING, [("a", 0), ("a", 3), ("b", 1)], 11, 10)
    assert decode_value(value.encode()) == value
    flexible = (b"\x00\x01" + (7).to_bytes(8, "big") + (2).to_bytes(2, "big") + (60_000).to_bytes(4, "big") + b"\x01"
                + b"\x02" + b"\x02a" + b"\x02" + (3).to_bytes(4, "big") + b"\x00"
                + (11).to_bytes(8, "big") + (10).to_bytes(8, "big") + b"\x00")
    assert decode_value(flexible) == TxnValue(7, 2, 60_000, TxnState.ONGOING, [("a", 3)], 11, 10)
    assert decode_key(encode_key("tx-ü")) == "tx-ü"


def test_a_complete_state_that_fails_to_write_is_retried_while_the_partition_is_owned() -> None:
    async def test(h: Harness) -> None:
        coordinator = h.coordinator
        producer_id, epoch = await coordinator.init_producer_id(TXN, 60_000)
        _raise_first(await coordinator.add_partitions(TXN, producer_id, epoch, [(TOPIC, 0)]))
        h.markers.code = 6
        await coordinator.end_txn(TXN, producer_id, epoch, True)
        await h.settle(lambda: len(h.markers.calls) >= 1)
        # the leader answers NOT_LEADER_OR_FOLLOWER for a while (fenced after a stall), as
        # NOT_COORDINATOR to clients; the coordinator still owns the partition and must not give up
        h.log.error, h.log.failures = NotCoordinatorError("fenced for a moment"), 2
        h.markers.code = 0
        await h.settle(lambda: h.log.error is None)
        await h.settle(lambda: h.state() is TxnState.COMPLETE_COMMIT)
    scenario(test)
