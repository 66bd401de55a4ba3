"""The group state machine on a fake clock: joins, syncs, heartbeats, timeouts, leaves, commits.

No broker, no ZooKeeper and no sleeps: :class:`FakeClock` fires the state machine's timers when a
test advances it, and group records and offsets go to a real partition log in a temp dir
(:class:`TmpDirOffsetLog`), read back with :func:`replay` the way a new coordinator loads them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from kafkalite.broker.group import GroupState
from kafkalite.broker.group_api import (
    CommitPartition,
    HeartbeatRequest,
    JoinGroupAnswer,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeavingMember,
    SyncGroupRequest,
)
from kafkalite.broker.group_membership import GroupMembership
from kafkalite.broker.group_offsets import OffsetStore, replay
from kafkalite.config import BrokerConfig, LogConfig
from kafkalite.errors import (
    BrokerResponseError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from kafkalite.record.batch import build_batch
from kafkalite.storage.log import PartitionLog

GROUP = "orders"
PARTITION = 0
SESSION_MS = 10_000
REBALANCE_MS = 5_000


class FakeTimer:
    def __init__(self, when: float, callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        self.when, self.callback, self.args = when, callback, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """Monotonic seconds that move only when a test calls :meth:`advance`, firing due timers in order."""

    def __init__(self) -> None:
        self.now = 1_000.0
        self._timers: list[tuple[float, int, FakeTimer]] = []
        self._sequence = 0

    def monotonic(self) -> float:
        return self.now

    def wall_ms(self) -> int:
        return int(self.now * 1000)

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> FakeTimer:
        timer = FakeTimer(self.now + delay, callback, args)
        self._sequence += 1
        heapq.heappush(self._timers, (timer.when, self._sequence, timer))
        return timer

    def advance(self, seconds: float) -> None:
        target = self.now + seconds
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            self.now = when
            if not timer.cancelled:
                timer.callback(*timer.args)
        self.now = target


class TmpDirOffsetLog:
    """The offsets partition as a real partition log in a temp dir (the OffsetLog seam)."""

    def __init__(self, directory: Path) -> None:
        self.log = PartitionLog(directory / "__consumer_offsets-0", "__consumer_offsets", PARTITION, LogConfig())

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> BrokerResponseError | None:
        assert partition == PARTITION
        self.log.append_as_leader(build_batch([value for _, value in records], keys=[key for key, _ in records]), 0)
        return None

    async def read(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        return [(record.key, record.value) for batch in self.log.batches(0) for record in batch.records()
                if record.key is not None]


class Harness:
    def __init__(self, directory: Path, **settings: Any) -> None:
        defaults: dict[str, Any] = {"group_initial_rebalance_delay_ms": 0, "group_min_session_timeout_ms": 1000}
        self.config = dataclasses.replace(BrokerConfig(), **{**defaults, **settings})
        self.clock = FakeClock()
        self.offset_log = TmpDirOffsetLog(directory)
        self.store = OffsetStore(self.config, self.offset_log)
        self.machine = GroupMembership(self.config, self.clock,
                                       lambda group: self.store.write_group(group, {PARTITION}))

    def request(self, member_id: str = "", protocols: list[tuple[str, bytes]] | None = None,
                **fields: Any) -> JoinGroupRequest:
        values: dict[str, Any] = {"group_id": GROUP, "member_id": member_id, "group_instance_id": None,
                                  "session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": REBALANCE_MS,
                                  "protocol_type": "consumer",
                                  "protocols": protocols or [("range", b"r:" + member_id.encode()),
                                                             ("roundrobin", b"rr")],
                                  "client_id": "client"}
        values.update(fields)
        return JoinGroupRequest(**values)

    async def join(self, request: JoinGroupRequest) -> asyncio.Future[JoinGroupAnswer]:
        return await self.machine.join(request, PARTITION)

    async def new_member_id(self) -> str:
        answer = (await self.join(self.request())).result()
        assert isinstance(answer.error, MemberIdRequiredError)
        assert answer.member_id
        return answer.member_id

    async def stable_group(self, count: int) -> list[str]:
        """``count`` members through join and sync; the first is the leader."""
        member_ids = [await self.new_member_id() for _ in range(count)]
        joins = [await self.join(self.request(member_id)) for member_id in member_ids]
        answers = [future.result() for future in joins]
        generation = answers[0].generation_id
        syncs = [await self.machine.sync(SyncGroupRequest(GROUP, generation, member_id))
                 for member_id in member_ids[1:]]
        leader_sync = await self.machine.sync(SyncGroupRequest(
            GROUP, generation, member_ids[0], assignments={member_id: member_id.encode() for member_id in member_ids}))
        assert all(future.done() and future.result().error is None for future in [leader_sync, *syncs])
        assert self.machine.groups[GROUP].state is GroupState.STABLE
        return member_ids

    def heartbeat(self, member_id: str, generation: int | None = None) -> None:
        group = self.machine.groups[GROUP]
        self.machine.heartbeat(HeartbeatRequest(GROUP, group.generation if generation is None else generation,
                                                member_id))


def run(scenario: Callable[[Harness], Coroutine[Any, Any, None]], directory: Path, **settings: Any) -> None:
    async def main() -> None:
        await scenario(Harness(directory, **settings))

    asyncio.run(main())


def test_join_and_sync_with_three_members(tmp_path: Path) -> None:
    async def scenario(harness: Harness) -> None:
        ids = [await harness.new_member_id() for _ in range(3)]
        first = await harness.join(harness.request(ids[0]))
        second = await harness.join(harness.request(ids[1]))
        assert not first.done() and not second.done(), "the rebalance waits for every member that asked for an id"
        third = await harness.join(harness.request(ids[2]))
        answers = [future.result() for future in (first, second, third)]
        assert [answer.error for answer in answers] == [None, None, None]
        assert {answer.generation_id for answer in answers} == {1}
        assert {answer.protocol_name for answer in answers} == {"range"}
        assert {answer.leader for answer in answers} == {ids[0]}
        assert [member.member_id for member in answers[0].members] == ids
        assert answers[0].members[1].metadata == b"r:" + ids[1].encode()
        assert answers[1].members == [] and answers[2].members == []

        follower_syncs = [await harness.machine.sync(SyncGroupRequest(GROUP, 1, member_id)) for member_id in ids[1:]]
        assert not any(future.done() for future in follower_syncs), "followers wait for the leader's assignment"
        leader_sync = await harness.machine.sync(SyncGroupRequest(
            GROUP, 1, ids[0], "consumer", "range", {member_id: f"parts-of-{member_id}".encode() for member_id in ids}))
        for member_id, future in zip(ids, [leader_sync, *follower_syncs], strict=True):
            answer = future.result()
            assert answer.error is None and answer.assignment == f"parts-of-{member_id}".encode()
        assert harness.machine.groups[GROUP].state is GroupState.STABLE

        # The stored group record brings back the same generation, leader and assignments.
        loaded = replay(await harness.offset_log.read(PARTITION), PARTITION, 0, 0.0)[GROUP]
        assert (loaded.state, loaded.generation, loaded.leader_id) == (GroupState.STABLE, 1, ids[0])
        assert {member_id: member.assignment for member_id, member in loaded.members.items()} == {
            member_id: f"parts-of-{member_id}".encode() for member_id in ids}

    run(scenario, tmp_path)


def test_heartbeat_keeps_a_member_and_session_timeout_expires_a_silent_one(tmp_path: Path) -> None:
    async def scenario(harness: Harness) -> None:
        alive, silent = await harness.stable_group(2)
        assert harness.machine.sweep() == pytest.approx(harness.clock.monotonic() + SESSION_MS / 1000)
        harness.clock.advance(SESSION_MS / 1000 * 0.6)
        harness.heartbeat(alive)
        # The next pass is due at the silent member's deadline, the earliest still ahead.
        assert harness.machine.sweep() == pytest.approx(harness.clock.monotonic() + SESSION_MS / 1000 * 0.4)
        assert set(harness.machine.groups[GROUP].members) == {alive, silent}, "nobody has expired yet"
        harness.clock.advance(SESSION_MS / 1000 * 0.6)  # past the silent member's deadline only
        harness.machine.sweep()
        group = harness.machine.groups[GROUP]
        assert set(group.members) == {alive}
        assert group.state is GroupState.PREPARING_REBALANCE
        with pytest.raises(RebalanceInProgressError):
            harness.heartbeat(alive)
        with pytest.raises(UnknownMemberIdError):
            harness.heartbeat(silent)

    run(scenario, tmp_path)


def test_rebalance_timeout_removes_a_member_that_did_not_rejoin(tmp_path: Path) -> None:
    async def scenario(harness: Harness) -> None:
        leader, laggard = await harness.stable_group(2)
        rejoin = await harness.join(harness.request(leader))
        assert harness.machine.groups[GROUP].state is GroupState.PREPARING_REBALANCE
        harness.clock.advance(REBALANCE_MS / 1000 - 0.01)
        assert not rejoin.done(), "the group waits for the other member until the rebalance timeout"
        harness.clock.advance(0.02)
        answer = rejoin.result()
        assert answer.error is None and answer.generation_id == 2
        assert [member.member_id for member in answer.members] == [leader]
        assert set(harness.machine.groups[GROUP].members) == {leader}
        with pytest.raises(UnknownMemberIdError):
            harness.heartbeat(laggard, generation=1)

    run(scenario, tmp_path)


def test_members_that_do_not_sync_in_time_start_a_new_rebalance(tmp_path: Path) -> None:
    async def scenario(harness: Harness) -> None:
        ids = [await harness.new_member_id() for _ in range(2)]
        for member_id in ids:
            await harness.join(harness.request(member_id))
        follower_sync = await harness.machine.sync(SyncGroupRequest(GROUP, 1, ids[1]))
        harness.clock.advance(REBALANCE_MS / 1000 + 0.01)  # the leader never syncs
        group = harness.machine.groups[GROUP]
        assert set(group.members) == {ids[1]} and group.state is GroupState.PREPARING_REBALANCE
        assert isinstance(follower_sync.result().error, RebalanceInProgressError)

    run(scenario, tmp_path)


def test_leave_rebalances_the_rest(tmp_path: Path) -> None:
    async def scenario(harness: Harness) -> None:
        stay, leave = await harness.stable_group(2)
        answer = harness.machine.leave(LeaveGroupRequest(GROUP, [LeavingMember(leave, reason="shutting down"),
                                                                 LeavingMember("nobody")]))
        assert answer.members[0].member_id == leave and answer.members[0].error is None
        assert isinstance(answer.members[1].error, UnknownMemberIdError)
        assert harness.machine.groups[GROUP].state is GroupState.PREPARING_REBALANCE
        rejoin = (await harness.join(harness.request(stay))).result()  # the only member left: completes at once
        assert rejoin.error is None and rejoin.generation_id == 2 and rejoin.leader == stay

    run(scenario, tmp_path)


def test_generation_and_protocol_checks(tmp_path: Path) -> None:
    async def scenario(harness: Harness) -> None:
        _leader, follower = await harness.stable_group(2)
        with pytest.raises(IllegalGenerationError):
            harness.heartbeat(follower, generation=0)
        stale_sync = (await harness.machine.sync(SyncGroupRequest(GROUP, 7, follower))).result()
        assert isinstance(stale_sync.error, IllegalGenerationError)
        wrong_protocol = (await harness.machine.sync(SyncGroupRequest(GROUP, 1, follower, "consumer",
                                                                      "roundrobin"))).result()
        assert isinstance(wrong_protocol.error, InconsistentGroupProtocolError)
        other_type = (await harness.join(harness.request(protocol_type="connect"))).result()
        assert isinstance(other_type.error, InconsistentGroupProtocolError)
        disjoint = (await harness.join(harness.request(protocols=[("sticky", b"")]))).result()
        assert isinstance(disjoint.error, InconsistentGroupProtocolError)
        unknown = (await harness.join(harness.request("stranger"))).result()
        assert isinstance(unknown.error, UnknownMemberIdError) and unknown.member_id == "stranger"
        too_short = (await harness.join(harness.request(session_timeout_ms=10))).result()
        assert isinstance(too_short.error, InvalidSessionTimeoutError)
        assert harness.machine.groups[GROUP].state is GroupState.STABLE, "refused requests change nothing"
        assert harness.machine.groups[GROUP].generation == 1

    run(scenario, tmp_path)


def test_static_member_rejoining_keeps_its_assignment_and_fences_the_old_id(tmp_path: Path) -> None:
    async def scenario(harness: Harness) -> None:
        first = (await harness.join(harness.request(group_instance_id="host-1"))).result()
        assert first.error is None, "a static member needs no MEMBER_ID_REQUIRED round"
        old_id = first.member_id
        assert old_id is not None
        await harness.machine.sync(SyncGroupRequest(GROUP, 1, old_id, assignments={old_id: b"p0"}))
        again = (await harness.join(harness.request(group_instance_id="host-1"))).result()
        assert again.error is None and again.member_id != old_id and again.generation_id == 1
        new_id = again.member_id
        assert new_id is not None
        synced = (await harness.machine.sync(SyncGroupRequest(GROUP, 1, new_id))).result()
        assert synced.assignment == b"p0"
        with pytest.raises(UnknownMemberIdError):
            harness.heartbeat(old_id)
        with pytest.raises(FencedInstanceIdError):
            harness.machine.heartbeat(HeartbeatRequest(GROUP, 1, old_id, "host-1"))

    run(scenario, tmp_path)


def test_offset_commit_with_a_stale_generation_is_rejected(tmp_path: Path) -> None:
    async def scenario(harness: Harness) -> None:
        leader, follower = await harness.stable_group(2)
        # Generation 2: both rejoin; the follower's commit for generation 1 is now stale.
        rejoins = [await harness.join(harness.request(member_id)) for member_id in (leader, follower)]
        assert [future.result().generation_id for future in rejoins] == [2, 2]
        with pytest.raises(RebalanceInProgressError):  # not synced yet
            harness.machine.check_commit(GROUP, 2, follower, PARTITION)
        await harness.machine.sync(SyncGroupRequest(GROUP, 2, follower))
        await harness.machine.sync(SyncGroupRequest(GROUP, 2, leader, assignments={}))
        with pytest.raises(IllegalGenerationError):
            harness.machine.check_commit(GROUP, 1, follower, PARTITION)
        with pytest.raises(UnknownMemberIdError):
            harness.machine.check_commit(GROUP, -1, "", PARTITION)  # a simple commit to a group with members

        group = harness.machine.check_commit(GROUP, 2, follower, PARTITION)
        outcomes = await harness.store.commit(group, [CommitPartition("events", 3, 42, 5, "m")],
                                              harness.clock.wall_ms())
        assert [(outcome.topic, outcome.partition, outcome.error) for outcome in outcomes] == [("events", 3, None)]
        loaded = replay(await harness.offset_log.read(PARTITION), PARTITION, 0, 0.0)[GROUP]
        committed = loaded.offsets[("events", 3)]
        assert (committed.offset, committed.leader_epoch, committed.metadata) == (42, 5, "m")

    run(scenario, tmp_path)


def test_initial_rebalance_delay_waits_for_more_members(tmp_path: Path) -> None:
    async def scenario(harness: Harness) -> None:
        first = await harness.join(harness.request(group_instance_id="a"))
        harness.clock.advance(2.0)
        second = await harness.join(harness.request(group_instance_id="b"))
        harness.clock.advance(2.0)  # the delay (3 s) was extended by the second arrival
        assert not first.done() and not second.done()
        harness.clock.advance(REBALANCE_MS / 1000)
        assert first.result().generation_id == second.result().generation_id == 1
        assert len(first.result().members) + len(second.result().members) == 2

    run(scenario, tmp_path, group_initial_rebalance_delay_ms=3000)


def test_known_member_rejoining_during_a_rebalance_keeps_its_id(tmp_path: Path) -> None:
    """Kafka's rule: a known member that rejoins with its member id while the group prepares a
    rebalance keeps that id. A JoinGroup of it still parked (sent on a connection the client has
    since given up, say) is answered REBALANCE_IN_PROGRESS, on which clients rejoin with the same
    id, never UNKNOWN_MEMBER_ID, on which they would drop it and join as a new member."""
    async def scenario(harness: Harness) -> None:
        leader, follower = await harness.stable_group(2)
        parked = await harness.join(harness.request(leader))  # the leader rejoins: a rebalance starts
        assert harness.machine.groups[GROUP].state is GroupState.PREPARING_REBALANCE and not parked.done()
        again = await harness.join(harness.request(leader))  # and sends JoinGroup once more
        superseded = parked.result()
        assert isinstance(superseded.error, RebalanceInProgressError)
        assert superseded.member_id == leader
        assert not again.done()
        follower_join = await harness.join(harness.request(follower))
        answers = [again.result(), follower_join.result()]
        assert [answer.error for answer in answers] == [None, None]
        assert {answer.member_id for answer in answers} == {leader, follower}
        assert answers[0].leader == leader and set(harness.machine.groups[GROUP].members) == {leader, follower}

    run(scenario, tmp_path)
