"""The group coordinator service: Kafka's classic group protocol and committed offsets.

Each group belongs to one partition of the internal, compacted ``__consumer_offsets`` topic
(``abs(java hash(group)) % partitions``); the leader of that partition is the group's
coordinator. When this broker becomes leader of such a partition it loads the partition —
replaying offset commits and group metadata (:func:`kafkalite.broker.group_offsets.replay`) — and
answers COORDINATOR_LOAD_IN_PROGRESS meanwhile; when it loses leadership it unloads the groups
and parked requests get NOT_COORDINATOR.

:class:`GroupCoordinator` takes the typed requests of :mod:`kafkalite.broker.group_api`, checks
ownership, and hands membership to the state machine
(:class:`~kafkalite.broker.group_membership.GroupMembership`) and storage to the
:class:`~kafkalite.broker.group_offsets.OffsetStore`: FindCoordinator (creates the offsets topic
on first use), JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit / OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups, and TxnOffsetCommit (offsets pending until the
producer's transaction marker, :meth:`GroupCoordinator.on_marker`). Offsets of groups that stay empty longer than
``offsets.retention.minutes`` are expired with tombstones. It has no routes: front ends call it.

Concurrency: event-loop only; JoinGroup and SyncGroup wait for their rebalance step.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable

from kafkalite import protocol
from kafkalite.broker.admin import AdminService, NewTopic
from kafkalite.broker.group import Group, GroupState
from kafkalite.broker.group_api import (
    FindCoordinatorAnswer,
    FindCoordinatorRequest,
    GroupDescription,
    GroupListing,
    GroupOutcome,
    HeartbeatRequest,
    JoinGroupAnswer,
    JoinGroupRequest,
    LeaveGroupAnswer,
    LeaveGroupRequest,
    ListGroupsAnswer,
    OffsetCommitAnswer,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchAnswer,
    OffsetFetchRequest,
    PartitionOutcome,
    SyncGroupAnswer,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from kafkalite.broker.group_membership import GroupClock, GroupMembership, LoopClock
from kafkalite.broker.group_offsets import OFFSETS_TOPIC, OffsetLog, OffsetStore, replay
from kafkalite.broker.metadata import MetadataCache
from kafkalite.broker.partition import Partition
from kafkalite.broker.wake_grid import delay_to_grid
from kafkalite.config import BrokerConfig
from kafkalite.errors import (
    BrokerResponseError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InvalidGroupIdError,
    InvalidRequestError,
    NonEmptyGroupError,
    NotCoordinatorError,
    RebalanceInProgressError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownMemberIdError,
)

__all__ = ["OFFSETS_TOPIC", "GroupCoordinator"]

log = logging.getLogger(__name__)

#: The sweep of expired sessions wakes at the earliest session deadline, at least this long
#: after its last pass and at most :data:`_LONGEST_SWEEP_WAIT` (or the shortest session a
#: member may ask for, when shorter): a session that starts meanwhile ends after the next pass.
_SHORTEST_SWEEP_WAIT = 0.01
_LONGEST_SWEEP_WAIT = 1.0


def subscribed_topics(metadata: bytes) -> list[str] | None:
    """The topics of a member's protocol metadata in Kafka's ConsumerProtocol encoding (every
    version starts with an int16 version and an array of int16-length topic names); None when
    the bytes are not in that encoding."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        if not 0 <= count <= len(metadata):
            return None
        offset, topics = 6, []
        for _ in range(count):
            (size,) = struct.unpack_from(">h", metadata, offset)
            if size < 0:
                return None
            topics.append(bytes(metadata[offset + 2:offset + 2 + size]).decode("utf-8"))
            offset += 2 + size
        return topics if offset <= len(metadata) else None
    except (struct.error, UnicodeDecodeError):
        return None


class GroupCoordinator:
    """Groups coordinated by this broker. See the module docstring."""

    def __init__(self, config: BrokerConfig, metadata: MetadataCache, admin: AdminService, offset_log: OffsetLog,
                 wall_ms: Callable[[], int], clock: GroupClock | None = None) -> None:
        self.config = config
        self.metadata = metadata
        self.admin = admin
        self.wall_ms = wall_ms
        self.clock = clock or LoopClock(wall_ms)
        self.store = OffsetStore(config, offset_log)
        self.membership = GroupMembership(config, self.clock, self._write_group)
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self._load_tasks: dict[int, asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def groups(self) -> dict[str, Group]:
        return self.membership.groups

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop(), name="group-sweeper")

    async def stop(self) -> None:
        if self._sweeper:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        for task in self._load_tasks.values():
            task.cancel()
        for number in list(self.owned):
            self._unload(number)

    # -- ownership ----------------------------------------------------------------------------
    def _offsets_partition_count(self) -> int:
        info = self.metadata.topics.get(OFFSETS_TOPIC)
        return len(info.partitions) if info and info.partitions else 0

    def partition_for(self, group_id: str) -> int:
        count = self._offsets_partition_count()
        if count == 0:
            raise NotCoordinatorError(f"the {OFFSETS_TOPIC} topic does not exist yet")
        return protocol.group_partition(group_id, count)

    def _check_owner(self, group_id: str) -> int:
        if not group_id:
            raise InvalidGroupIdError("the group id must not be empty")
        number = self.partition_for(group_id)
        if number in self.loading:
            raise CoordinatorLoadInProgressError(f"{OFFSETS_TOPIC}-{number} is still loading")
        if number not in self.owned:
            raise NotCoordinatorError(f"broker {self.config.broker_id} does not coordinate group {group_id}")
        return number

    def on_leadership(self, partition: Partition) -> None:
        """Replica-manager listener: load an offsets partition this broker now leads, unload one
        it no longer leads."""
        if partition.topic != OFFSETS_TOPIC:
            return
        number = partition.partition
        if partition.is_leader:
            if number not in self.owned and number not in self.loading:
                self.loading.add(number)
                self._load_tasks[number] = asyncio.get_running_loop().create_task(self._load(partition))
        else:
            task = self._load_tasks.pop(number, None)
            if task is not None:
                task.cancel()
            self.loading.discard(number)
            self._unload(number)

    async def _load(self, partition: Partition) -> None:
        number = partition.partition
        started = asyncio.get_running_loop().time()
        try:
            # one read, adopted without an await: a marker lands either in it or, once the
            # partition is owned, through on_marker
            resolved = await self.store.log.read_resolved(number)
            if not partition.is_leader:
                return
            groups = replay(resolved.records, number, self.wall_ms(), self.clock.monotonic())
            self.groups.update(groups)
            self.store.load_pending(number, resolved.open_transactions)
            self.owned.add(number)
            log.info("loaded %s-%d: %d groups in %.0f ms", OFFSETS_TOPIC, number, len(groups),
                     (asyncio.get_running_loop().time() - started) * 1000)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed", OFFSETS_TOPIC, number)
        finally:
            self.loading.discard(number)
            self._load_tasks.pop(number, None)

    def _unload(self, number: int) -> None:
        self.owned.discard(number)
        self.membership.unload(number)
        self.store.unload_pending(number)

    def on_marker(self, topic: str, partition: int, producer_id: int, committed: bool) -> None:
        """Replica-manager marker listener: a transaction marker landed in a partition; in an
        offsets partition this broker coordinates, the producer's pending commits take effect
        (commit) or are dropped (abort)."""
        if topic != OFFSETS_TOPIC or partition not in self.owned:
            return
        self.store.complete_transaction(partition, producer_id, committed, self._group_for)

    def _group_for(self, group_id: str, number: int) -> Group:
        group = self.groups.get(group_id)
        return group if group is not None else self.membership.new_group(group_id, number)

    async def _write_group(self, group: Group) -> BrokerResponseError | None:
        return await self.store.write_group(group, self.owned)

    # -- find coordinator ---------------------------------------------------------------------
    async def find_coordinator(self, request: FindCoordinatorRequest) -> FindCoordinatorAnswer:
        if request.key_type != 0:
            raise InvalidRequestError("only group coordinators (key_type 0) exist")
        if not request.key:
            raise InvalidGroupIdError("the group id must not be empty")
        if self._offsets_partition_count() == 0:
            error = await self._create_offsets_topic()
            if error is not None:
                return FindCoordinatorAnswer(error)
        number = protocol.group_partition(request.key, self._offsets_partition_count())
        info = self.metadata.partition(OFFSETS_TOPIC, number)
        endpoint = self.metadata.endpoint(info.leader) if info else None
        if endpoint is None:
            return FindCoordinatorAnswer(CoordinatorNotAvailableError(f"{OFFSETS_TOPIC}-{number} has no leader yet"))
        return FindCoordinatorAnswer(None, endpoint.broker_id, endpoint.host, endpoint.port, number)

    async def _create_offsets_topic(self) -> BrokerResponseError | None:
        config = self.config
        live = len(self.metadata.brokers)
        if live < config.offsets_topic_replication_factor:
            return CoordinatorNotAvailableError(
                f"{OFFSETS_TOPIC} needs offsets.topic.replication.factor={config.offsets_topic_replication_factor} "
                f"live brokers, {live} are alive")
        topic = NewTopic(OFFSETS_TOPIC, config.offsets_topic_num_partitions, config.offsets_topic_replication_factor,
                         configs={"cleanup.policy": "compact",
                                  "segment.bytes": str(config.offsets_topic_segment_bytes)})
        try:
            await self.admin.create_topic(topic, wait_ms=5000, internal=True)
        except TopicAlreadyExistsError:
            pass
        except RequestTimedOutError:
            return CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} is being created")
        except BrokerResponseError as exc:
            return CoordinatorNotAvailableError(f"cannot create {OFFSETS_TOPIC}: {exc}")
        await self.metadata.wait_for(lambda: self._offsets_partition_count() > 0, 5.0)
        return None if self._offsets_partition_count() else CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} not ready")

    # -- membership ---------------------------------------------------------------------------
    async def join_group(self, request: JoinGroupRequest) -> JoinGroupAnswer:
        problem = self.membership.session_timeout_problem(request)
        if problem is not None:
            return problem
        number = self._check_owner(request.group_id)
        future = await self.membership.join(request, number)
        try:
            return await asyncio.wait_for(asyncio.shield(future), request.rebalance_timeout_ms / 1000 + 5)
        except TimeoutError:
            return JoinGroupAnswer(RebalanceInProgressError("the rebalance did not complete in time"))

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupAnswer:
        self._check_owner(request.group_id)
        future = await self.membership.sync(request)
        group = self.groups.get(request.group_id)
        timeout = max(group.rebalance_timeout_ms if group else 0, 1000) / 1000 + 5
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            return SyncGroupAnswer(RebalanceInProgressError("the group's assignment did not arrive in time"))

    async def heartbeat(self, request: HeartbeatRequest) -> None:
        self._check_owner(request.group_id)
        self.membership.heartbeat(request)

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupAnswer:
        self._check_owner(request.group_id)
        return self.membership.leave(request)

    # -- offsets ------------------------------------------------------------------------------
    async def offset_commit(self, request: OffsetCommitRequest) -> OffsetCommitAnswer:
        try:
            number = self._check_owner(request.group_id)
            group = self.membership.check_commit(request.group_id, request.generation_id, request.member_id, number)
        except BrokerResponseError as exc:
            return OffsetCommitAnswer([PartitionOutcome(item.topic, item.partition, exc)
                                       for item in request.partitions])
        return OffsetCommitAnswer(await self.store.commit(group, request.partitions, self.wall_ms()))

    async def offset_fetch(self, request: OffsetFetchRequest) -> OffsetFetchAnswer:
        self._check_owner(request.group_id)
        group = self.groups.get(request.group_id)
        if request.require_stable:
            return OffsetFetchAnswer(self.store.committed_stable(request.group_id, group, request.topics))
        return OffsetFetchAnswer(self.store.committed(group, request.topics))

    async def txn_offset_commit(self, request: TxnOffsetCommitRequest) -> OffsetCommitAnswer:
        """Offsets committed in a transaction: written as the producer's transactional batch and
        pending until its marker (Kafka's rules: an unknown member id is refused, a generation
        given must be the group's)."""
        try:
            number = self._check_owner(request.group_id)
            group = self.groups.get(request.group_id)
            if group is None:
                group = self.membership.new_group(request.group_id, number)
            if group.state is GroupState.DEAD:
                raise CoordinatorNotAvailableError(f"group {request.group_id} is being removed")
            if request.member_id and request.member_id not in group.members:
                raise UnknownMemberIdError(f"group {request.group_id} has no member {request.member_id}")
            if request.generation_id >= 0 and request.generation_id != group.generation:
                raise IllegalGenerationError(f"generation {request.generation_id} is not {group.generation}")
        except BrokerResponseError as exc:
            return OffsetCommitAnswer([PartitionOutcome(item.topic, item.partition, exc)
                                       for item in request.partitions])
        return OffsetCommitAnswer(await self.store.commit_transactional(
            group, request.partitions, request.producer_id, request.producer_epoch, self.wall_ms()))

    async def offset_delete(self, request: OffsetDeleteRequest) -> list[PartitionOutcome]:
        """Delete committed offsets of a group (Kafka's OffsetDelete): GROUP_ID_NOT_FOUND for no
        such group, NON_EMPTY_GROUP for a group with members of a protocol other than
        ``consumer``; a partition of a topic a member subscribes to answers
        GROUP_SUBSCRIBED_TO_TOPIC, the others are deleted with one append."""
        self._check_owner(request.group_id)
        group = self.groups.get(request.group_id)
        if group is None or group.state is GroupState.DEAD:
            raise GroupIdNotFoundError(f"group {request.group_id} does not exist")
        subscribed: set[str] = set()
        if group.members:
            if group.protocol_type != "consumer":
                raise NonEmptyGroupError(f"group {request.group_id} has active members")
            protocol_name = group.protocol_name or ""
            for member in group.members.values():
                topics = subscribed_topics(member.metadata_for(protocol_name))
                if topics is None:  # not Kafka's consumer encoding: every topic counts as subscribed
                    subscribed.update(topic for topic, _ in request.partitions)
                else:
                    subscribed.update(topics)
        deletable = [key for key in request.partitions if key[0] not in subscribed]
        error = await self.store.delete_offsets(group, deletable)
        return [PartitionOutcome(topic, number, GroupSubscribedToTopicError(f"group {request.group_id} "
                                                                            f"subscribes to {topic}")
                                 if topic in subscribed else error)
                for topic, number in request.partitions]

    # -- admin --------------------------------------------------------------------------------
    async def list_groups(self, states: list[str] | None = None) -> ListGroupsAnswer:
        groups = [GroupListing(group.group_id, group.protocol_type or "consumer", group.state.value)
                  for group in sorted(self.groups.values(), key=lambda item: item.group_id)
                  if group.partition in self.owned and (not states or group.state.value in states)]
        return ListGroupsAnswer(groups, sorted(self.loading))

    def committed_positions(self) -> list[tuple[str, str, int, int]]:
        """``(group id, topic, partition, committed offset)`` of every group this broker
        coordinates now, sorted (what consumer lag is computed from)."""
        return sorted((group.group_id, topic, number, value.offset)
                      for group in self.groups.values() if group.partition in self.owned
                      for (topic, number), value in group.offsets.items())

    async def describe_groups(self, group_ids: list[str]) -> list[GroupDescription]:
        answers = []
        for group_id in group_ids:
            try:
                self._check_owner(group_id)
            except BrokerResponseError as exc:
                answers.append(GroupDescription(group_id, exc))
                continue
            group = self.groups.get(group_id)
            answers.append(GroupDescription(group_id, None) if group is None else group.describe())
        return answers

    async def delete_groups(self, group_ids: list[str]) -> list[GroupOutcome]:
        answers = []
        for group_id in group_ids:
            try:
                self._check_owner(group_id)
                group = self.groups.get(group_id)
                if group is None:
                    raise GroupIdNotFoundError(f"group {group_id} does not exist")
                if group.state is not GroupState.EMPTY:
                    raise NonEmptyGroupError(f"group {group_id} has active members")
                error = await self._delete_group(group)
                if error is not None:
                    raise error
                answers.append(GroupOutcome(group_id, None))
            except BrokerResponseError as exc:
                answers.append(GroupOutcome(group_id, exc))
        return answers

    async def _delete_group(self, group: Group) -> BrokerResponseError | None:
        error = await self.store.delete_group(group)
        if error is None:
            group.transition_to(GroupState.DEAD, self.wall_ms())
            self.groups.pop(group.group_id, None)
        return error

    # -- sweeping -----------------------------------------------------------------------------
    async def _sweep_loop(self) -> None:
        """Expire sessions and, every ``offsets.retention.check.interval.ms``, offsets. An idle
        coordinator wakes once a second; one with members at their earliest session deadline."""
        next_expiry_check = self.clock.monotonic() + self.config.offsets_retention_check_interval_ms / 1000
        longest = max(_SHORTEST_SWEEP_WAIT,
                      min(_LONGEST_SWEEP_WAIT, self.config.group_min_session_timeout_ms / 1000))
        wait = longest
        while True:
            await asyncio.sleep(wait)
            earliest = self.membership.sweep(self.owned)
            now = self.clock.monotonic()
            if earliest is None or earliest - now >= longest:
                wait = delay_to_grid(time.monotonic(), longest)  # nothing due sooner: with the other timers
            else:
                wait = max(_SHORTEST_SWEEP_WAIT, earliest - now + 0.001)
            if now >= next_expiry_check:
                next_expiry_check = now + self.config.offsets_retention_check_interval_ms / 1000
                await self.expire_offsets()

    async def expire_offsets(self) -> None:
        """Delete the offsets of groups empty for longer than ``offsets.retention.minutes``."""
        retention_ms = self.config.offsets_retention_minutes * 60_000
        now = self.wall_ms()
        for group in list(self.groups.values()):
            if group.partition not in self.owned or group.state is not GroupState.EMPTY:
                continue
            newest_commit = max((value.commit_timestamp for value in group.offsets.values()), default=0)
            if now - max(group.empty_since_ms, newest_commit) > retention_ms:
                log.info("group %s: offsets expired after %d minutes empty", group.group_id,
                         self.config.offsets_retention_minutes)
                await self._delete_group(group)
