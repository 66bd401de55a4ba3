"""Follower fetch sessions on the leader, on the twin and a fake clock (broker/fetch_session.py,
ReplicaManager.fetch_in_session): a full fetch opens a session, later fetches carry only what
moved and are answered only with what changed, an idle fetch reads no partition, a parked fetch
wakes at the first append to any of its partitions, and a session's idle followers stay in the ISR.

Broker 1 runs a real ReplicaManager over real logs and leads every partition of TOPIC; followers
2 and 3 are played by the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from kafkalite.broker.partition import Role
from kafkalite.broker.replica import ReplicaManager
from kafkalite.config import LogConfig
from kafkalite.coord import znodes
from kafkalite.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError
from kafkalite.protocol import (
    FetchPartition,
    FetchRequest,
    FetchResult,
    FetchSessionRequest,
    ProducePartition,
    ProduceRequest,
    decode_fetch_request,
    decode_session_fetch_response,
    encode_fetch_request,
    encode_session_fetch_response,
)
from tests.unit.broker.harness import BrokerCluster, FakeClock, records

Run = Callable[[Callable[[BrokerCluster], Awaitable[None]]], object]

TOPIC = "sessions"
PARTITIONS = 20
LAG_MS = 10_000


async def leader_of_all(cluster: BrokerCluster) -> ReplicaManager:
    node = await cluster.add_broker(1, replicas=True, candidate=False, log=LogConfig(min_insync_replicas=1),
                                    replica_lag_time_max_ms=LAG_MS)
    await cluster.create_topic(TOPIC, {number: [1, 2, 3] for number in range(PARTITIONS)})
    for number in range(PARTITIONS):
        await cluster.write_state(TOPIC, number, znodes.PartitionState(1, 0, [1, 2, 3], controller_epoch=7))
    manager = node.replica_manager
    await cluster.wait_until(lambda: all((TOPIC, number) in manager.partitions
                                         and manager.partitions[(TOPIC, number)].role is Role.LEADER
                                         for number in range(PARTITIONS)), "broker 1 leads every partition")
    return manager


def fetch_request(replica: int, positions: dict[int, int], session_id: int, epoch: int,
                  forgotten: list[int] | None = None, max_wait_ms: int = 0) -> FetchRequest:
    return FetchRequest([FetchPartition(TOPIC, number, offset) for number, offset in sorted(positions.items())],
                        replica_id=replica, max_wait_ms=max_wait_ms,
                        session=FetchSessionRequest(session_id, epoch, [(TOPIC, number) for number in forgotten or []]))


async def produce(manager: ReplicaManager, number: int, count: int) -> None:
    [result] = await manager.produce(ProduceRequest(acks=1, timeout_ms=5_000, partitions=[
        ProducePartition(TOPIC, number, records(count))]))
    assert result.error_code == 0


def by_partition(results: list[FetchResult]) -> dict[int, FetchResult]:
    assert all(result.topic == TOPIC for result in results)
    return {result.partition: result for result in results}


async def open_session(manager: ReplicaManager, replica: int) -> int:
    session_id, results = await manager.fetch_in_session(
        fetch_request(replica, dict.fromkeys(range(PARTITIONS), 0), 0, 0))
    assert session_id > 0
    assert sorted(by_partition(results)) == list(range(PARTITIONS))  # a new session answers every partition
    return session_id


def count_reads(manager: ReplicaManager, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The partitions the leader reads from now on, in order."""
    seen: list[int] = []
    original = manager._read_partition

    async def counted(partition, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(partition.partition)
        return await original(partition, *args, **kwargs)

    monkeypatch.setattr(manager, "_read_partition", counted)
    return seen


def test_an_idle_session_fetch_reads_no_partition_and_answers_none(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager = await leader_of_all(cluster)
        session_id = await open_session(manager, 2)
        reads = count_reads(manager, monkeypatch)
        for epoch in (1, 2, 3):
            answered_id, results = await manager.fetch_in_session(fetch_request(2, {}, session_id, epoch))
            assert (answered_id, results) == (session_id, [])
        assert reads == []

    run(scenario)


def test_a_parked_fetch_wakes_at_the_first_append_and_answers_only_that_partition(
        run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager = await leader_of_all(cluster)
        session_id = await open_session(manager, 2)
        reads = count_reads(manager, monkeypatch)
        parked = asyncio.create_task(manager.fetch_in_session(
            fetch_request(2, {}, session_id, 1, max_wait_ms=60_000)))
        await cluster.ensemble.settle()
        assert not parked.done()
        await produce(manager, 7, 3)
        _, results = await asyncio.wait_for(parked, 5.0)
        [result] = results
        assert (result.partition, len(result.records) > 0, result.high_watermark) == (7, True, 0)
        assert set(reads) == {7}

        # Both followers report their new position: the high watermark moves, and the answer
        # (no data) carries it for that partition only.
        await manager.fetch(FetchRequest([FetchPartition(TOPIC, 7, 3)], replica_id=3, max_wait_ms=0))
        _, results = await manager.fetch_in_session(fetch_request(2, {7: 3}, session_id, 2))
        assert [(result.partition, result.high_watermark, len(result.records)) for result in results] == [(7, 3, 0)]
        _, results = await manager.fetch_in_session(fetch_request(2, {}, session_id, 3))
        assert results == []

    run(scenario)


def test_a_fetch_at_a_moved_position_reads_that_partition_from_there(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager = await leader_of_all(cluster)
        await produce(manager, 4, 5)
        session_id = await open_session(manager, 2)
        _, results = await manager.fetch_in_session(fetch_request(2, {4: 2}, session_id, 1))
        [result] = results
        assert result.partition == 4
        assert result.records  # from offset 2 on
        # Unchanged positions need not be repeated: the session still answers from offset 2.
        _, results = await manager.fetch_in_session(fetch_request(2, {}, session_id, 2))
        assert results == []

    run(scenario)


def test_sessions_refuse_an_unknown_id_a_wrong_epoch_and_are_replaced_by_a_new_full_fetch(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager = await leader_of_all(cluster)
        first = await open_session(manager, 2)
        with pytest.raises(InvalidFetchSessionEpochError):
            await manager.fetch_in_session(fetch_request(2, {}, first, 5))
        with pytest.raises(FetchSessionIdNotFoundError):
            await manager.fetch_in_session(fetch_request(2, {}, first + 100, 1))
        with pytest.raises(FetchSessionIdNotFoundError):  # another follower cannot use it
            await manager.fetch_in_session(fetch_request(3, {}, first, 1))
        second = await open_session(manager, 2)
        assert second != first
        with pytest.raises(FetchSessionIdNotFoundError):
            await manager.fetch_in_session(fetch_request(2, {}, first, 1))
        assert (await manager.fetch_in_session(fetch_request(2, {}, second, 1)))[0] == second
        # The replaced session no longer listens to the partitions.
        assert all(len(partition._change_listeners) == 1 for partition in manager.partitions.values())

    run(scenario)


def test_a_forgotten_partition_no_longer_wakes_the_session(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager = await leader_of_all(cluster)
        session_id = await open_session(manager, 2)
        _, results = await manager.fetch_in_session(fetch_request(2, {}, session_id, 1, forgotten=[3]))
        assert results == []
        await produce(manager, 3, 2)
        _, results = await manager.fetch_in_session(fetch_request(2, {}, session_id, 2))
        assert results == []
        await produce(manager, 5, 2)
        _, results = await manager.fetch_in_session(fetch_request(2, {}, session_id, 3))
        assert [result.partition for result in results] == [5]

    run(scenario)


def test_a_follower_idle_in_its_session_stays_in_the_isr_when_the_partition_moves(
        run: Run, clock: FakeClock) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager = await leader_of_all(cluster)
        two = await open_session(manager, 2)
        three = await open_session(manager, 3)
        partition = manager.partitions[(TOPIC, 0)]
        clock.advance(3 * LAG_MS)
        # Follower 2 keeps fetching (nothing to say), follower 3 stopped.
        await manager.fetch_in_session(fetch_request(2, {}, two, 1))
        assert three > 0
        await produce(manager, 0, 1)
        assert manager.shrink_lagging_isrs() == [partition]
        await cluster.wait_until(lambda: cluster.state(TOPIC, 0) is not None
                                 and cluster.state(TOPIC, 0)[0].isr == [1, 2],  # type: ignore[index]
                                 "only the follower that stopped fetching leaves the ISR")

    run(scenario)


def test_a_session_fetch_frame_round_trips_and_bad_ones_are_refused() -> None:
    request = FetchRequest([FetchPartition(TOPIC, 1, 5)], replica_id=2,
                           session=FetchSessionRequest(9, 4, [(TOPIC, 3), ("other", 0)]))
    decoded = decode_fetch_request(encode_fetch_request(request))
    assert decoded.session == request.session
    assert decoded.partitions == request.partitions
    assert decode_fetch_request(encode_fetch_request(FetchRequest([], replica_id=2))).session is None

    from kafkalite.errors import InvalidRequestError
    with pytest.raises(InvalidRequestError):  # a consumer does not open follower sessions
        decode_fetch_request(encode_fetch_request(FetchRequest([], replica_id=-1, session=FetchSessionRequest())))
    with pytest.raises(InvalidRequestError):
        decode_fetch_request(encode_fetch_request(FetchRequest([], replica_id=2,
                                                               session=FetchSessionRequest(-4, 0))))
    truncated = encode_fetch_request(request)[:-3]
    with pytest.raises(InvalidRequestError):
        decode_fetch_request(truncated)

    answer = b"".join(bytes(piece) for piece in encode_session_fetch_response(
        9, 0, [FetchResult(TOPIC, 1, 0, 5, 5, 0, b"")]))
    session_id, error, results = decode_session_fetch_response(answer)
    assert (session_id, error, [(result.partition, result.high_watermark) for result in results]) == (9, 0, [(1, 5)])


def test_a_follower_counts_as_fetching_while_its_fetch_is_parked_or_was_just_answered(
        run: Run, clock: FakeClock) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        manager = await leader_of_all(cluster)
        sessions = manager.fetch_sessions
        assert not sessions.fetching(2, 1_000)  # no session
        session_id = await open_session(manager, 2)
        assert sessions.fetching(2, 1_000)
        clock.advance(5_000)
        assert not sessions.fetching(2, 1_000)  # it stopped fetching
        parked = asyncio.create_task(manager.fetch_in_session(
            fetch_request(2, {}, session_id, 1, max_wait_ms=60_000)))
        await cluster.ensemble.settle()
        assert sessions.fetching(2, 1_000)  # a fetch is parked here now
        await produce(manager, 0, 1)
        await asyncio.wait_for(parked, 5.0)

    run(scenario)
