"""The group coordinator: Kafka's classic group protocol and committed offsets.

Each group belongs to one partition of the internal, compacted ``__consumer_offsets`` topic
(``abs(java hash(group)) % partitions``); the leader of that partition is the group's
coordinator. When this broker becomes leader of such a partition it loads the partition —
replaying offset commits and group metadata, latest value per key, tombstones removing — and
answers COORDINATOR_LOAD_IN_PROGRESS meanwhile; when it loses leadership it unloads the groups
and parked requests get NOT_COORDINATOR.

The protocol: FindCoordinator (creates the offsets topic on first use), JoinGroup (member ids,
MEMBER_ID_REQUIRED, protocol choice by vote, the leader gets the members' metadata, static
membership through ``group.instance.id``), SyncGroup (the leader's assignment goes to every
member once stored in the log with acks=all), Heartbeat (REBALANCE_IN_PROGRESS asks members to
rejoin), LeaveGroup, OffsetCommit / OffsetFetch (generation and member fenced), ListGroups,
DescribeGroups, DeleteGroups. Session timeouts remove silent members; members that do not
rejoin within the rebalance timeout are dropped from the new generation. Offsets of groups
that stay empty longer than ``offsets.retention.minutes`` are expired with tombstones.

Concurrency: event-loop only; JoinGroup and SyncGroup requests are parked futures.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kafkalite import protocol
from kafkalite.broker.admin import NewTopic
from kafkalite.broker.group import Group, GroupState, Member
from kafkalite.broker.group_records import (
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from kafkalite.broker.partition import Partition
from kafkalite.errors import (
    BrokerResponseError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidCommitOffsetSizeError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    KafkaliteError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownMemberIdError,
)
from kafkalite.record.batch import build_batch

if TYPE_CHECKING:
    from kafkalite.broker.server import Broker

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
_SWEEP_INTERVAL = 0.1

_WRITE_ERROR_MAP = {
    19: CoordinatorNotAvailableError, 20: CoordinatorNotAvailableError, 3: CoordinatorNotAvailableError,
    6: NotCoordinatorError, 56: NotCoordinatorError, 10: InvalidCommitOffsetSizeError,
    18: InvalidCommitOffsetSizeError, 7: RequestTimedOutError,
}


def _ok(**fields: Any) -> dict[str, Any]:
    return {"error_code": 0, "error": None, **fields}


def _err(error: BrokerResponseError, **fields: Any) -> dict[str, Any]:
    return {**protocol.error_body(error), **fields}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: Any, what: str) -> bytes:
    if value in (None, ""):
        return b""
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        raise InvalidRequestError(f"{what} is not valid base64") from None


class GroupCoordinator:
    """Groups coordinated by this broker. See the module docstring."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.groups: dict[str, Group] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self._load_tasks: dict[int, asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._creating_topic: asyncio.Task[None] | None = None
        broker.replica_manager.leadership_listeners.append(self._on_leadership)

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

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post(protocol.FIND_COORDINATOR, self._handler(self.find_coordinator)),
            web.post(protocol.JOIN_GROUP, self._handler(self.join_group, with_host=True)),
            web.post(protocol.SYNC_GROUP, self._handler(self.sync_group)),
            web.post(protocol.HEARTBEAT, self._handler(self.heartbeat)),
            web.post(protocol.LEAVE_GROUP, self._handler(self.leave_group)),
            web.post(protocol.OFFSET_COMMIT, self._handler(self.offset_commit)),
            web.post(protocol.OFFSET_FETCH, self._handler(self.offset_fetch)),
            web.post(protocol.LIST_GROUPS, self._handler(self.list_groups)),
            web.post(protocol.DESCRIBE_GROUPS, self._handler(self.describe_groups)),
            web.post(protocol.DELETE_GROUPS, self._handler(self.delete_groups)),
        ]

    def _handler(self, method: Any, with_host: bool = False) -> Any:
        async def handle(request: web.Request) -> web.Response:
            body = protocol.parse_json(await request.read())
            protocol.check_string_lengths(body)  # group records carry Kafka's int16-length strings
            if with_host:
                body["_client_host"] = request.remote or ""
            try:
                answer = await method(body)
            except BrokerResponseError as exc:
                if isinstance(exc, InvalidRequestError):
                    raise
                answer = _err(exc)
            return web.Response(body=protocol.dumps(answer), content_type="application/json")
        return handle

    # -- ownership ----------------------------------------------------------------------------
    def _offsets_partition_count(self) -> int:
        info = self.broker.metadata.topics.get(OFFSETS_TOPIC)
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

    def _on_leadership(self, partition: Partition) -> None:
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
            records = await asyncio.to_thread(self._read_all, partition)
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
                    log.warning("%s-%d: skipping unreadable record: %s", OFFSETS_TOPIC, number, exc)
            if not partition.is_leader:
                return
            now = self.broker.clock()
            loop_now = asyncio.get_running_loop().time()
            for group_id in set(offsets) | {group for group, value in metadata.items() if value is not None}:
                group = Group(group_id, number)
                group.offsets = offsets.get(group_id, {})
                value = metadata.get(group_id)
                if value is not None:
                    group.generation = value.generation
                    group.protocol_type = value.protocol_type
                    group.protocol_name = value.protocol
                    group.leader_id = value.leader
                    for record in value.members:
                        member = Member(record.member_id, record.group_instance_id, record.client_id,
                                        record.client_host, record.session_timeout, record.rebalance_timeout,
                                        value.protocol_type, [(value.protocol or "", record.subscription)],
                                        record.assignment, deadline=loop_now + record.session_timeout / 1000,
                                        is_new=False)
                        group.members[member.member_id] = member
                        if member.group_instance_id:
                            group.static_members[member.group_instance_id] = member.member_id
                    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
                group.state_timestamp = now
                group.empty_since_ms = now
                self.groups[group_id] = group
            self.owned.add(number)
            log.info("loaded %s-%d: %d groups in %.0f ms", OFFSETS_TOPIC, number,
                     sum(1 for group in self.groups.values() if group.partition == number),
                     (asyncio.get_running_loop().time() - started) * 1000)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed", OFFSETS_TOPIC, number)
        finally:
            self.loading.discard(number)
            self._load_tasks.pop(number, None)

    @staticmethod
    def _read_all(partition: Partition) -> list[tuple[bytes, bytes | None]]:
        records: list[tuple[bytes, bytes | None]] = []
        for batch in partition.log.batches(partition.log.log_start_offset):
            for record in batch.records():
                if record.key is not None:
                    records.append((record.key, record.value))
        return records

    def _unload(self, number: int) -> None:
        self.owned.discard(number)
        for group_id, group in list(self.groups.items()):
            if group.partition != number:
                continue
            self._fail_waiters(group, NotCoordinatorError(f"group {group_id} moved to another coordinator"))
            self._cancel_timers(group)
            del self.groups[group_id]

    # -- find coordinator ---------------------------------------------------------------------
    async def find_coordinator(self, body: dict[str, Any]) -> dict[str, Any]:
        key = protocol.require(body, "key", str)
        key_type = protocol.require(body, "key_type", int, 0)
        if key_type != 0:
            raise InvalidRequestError("only group coordinators (key_type 0) exist")
        if not key:
            return _err(InvalidGroupIdError("the group id must not be empty"))
        if self._offsets_partition_count() == 0:
            error = await self._create_offsets_topic()
            if error is not None:
                return _err(error, node_id=-1, host="", port=-1)
        number = protocol.group_partition(key, self._offsets_partition_count())
        info = self.broker.metadata.partition(OFFSETS_TOPIC, number)
        endpoint = self.broker.metadata.endpoint(info.leader) if info else None
        if endpoint is None:
            return _err(CoordinatorNotAvailableError(f"{OFFSETS_TOPIC}-{number} has no leader yet"),
                        node_id=-1, host="", port=-1)
        return _ok(node_id=endpoint.broker_id, host=endpoint.host, port=endpoint.port, partition=number)

    async def _create_offsets_topic(self) -> BrokerResponseError | None:
        config = self.config
        live = len(self.broker.metadata.brokers)
        if live < config.offsets_topic_replication_factor:
            return CoordinatorNotAvailableError(
                f"{OFFSETS_TOPIC} needs offsets.topic.replication.factor={config.offsets_topic_replication_factor} "
                f"live brokers, {live} are alive")
        topic = NewTopic(OFFSETS_TOPIC, config.offsets_topic_num_partitions, config.offsets_topic_replication_factor,
                         configs={"cleanup.policy": "compact",
                                  "segment.bytes": str(config.offsets_topic_segment_bytes)})
        try:
            await self.broker.admin.create_topic(topic, wait_ms=5000, internal=True)
        except TopicAlreadyExistsError:
            pass
        except RequestTimedOutError:
            return CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} is being created")
        except BrokerResponseError as exc:
            return CoordinatorNotAvailableError(f"cannot create {OFFSETS_TOPIC}: {exc}")
        await self.broker.metadata.wait_for(lambda: self._offsets_partition_count() > 0, 5.0)
        return None if self._offsets_partition_count() else CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} not ready")

    # -- join ---------------------------------------------------------------------------------
    async def join_group(self, body: dict[str, Any]) -> dict[str, Any]:
        group_id = protocol.require(body, "group_id", str)
        member_id = protocol.require(body, "member_id", str, "")
        instance_id = protocol.require(body, "group_instance_id", str, None)
        session_timeout = protocol.require(body, "session_timeout_ms", int, maximum=protocol.INT32_MAX)
        rebalance_timeout = protocol.require(body, "rebalance_timeout_ms", int, session_timeout, minimum=0,
                                             maximum=protocol.INT32_MAX)
        protocol_type = protocol.require(body, "protocol_type", str, "consumer")
        client_id = protocol.require(body, "client_id", str, "")
        protocols_body = protocol.require(body, "protocols", list)
        protocols = []
        for item in protocols_body:
            if not isinstance(item, dict):
                raise InvalidRequestError("each protocol must be an object")
            protocols.append((protocol.require(item, "name", str), _unb64(item.get("metadata"), "protocol metadata")))
        if not protocols:
            raise InvalidRequestError("JoinGroup needs at least one protocol")
        if not self.config.group_min_session_timeout_ms <= session_timeout <= self.config.group_max_session_timeout_ms:
            return _err(InvalidSessionTimeoutError(
                f"session timeout {session_timeout} ms is outside [{self.config.group_min_session_timeout_ms}, "
                f"{self.config.group_max_session_timeout_ms}]"), member_id=member_id)
        number = self._check_owner(group_id)
        loop = asyncio.get_running_loop()
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return _err(UnknownMemberIdError(f"group {group_id} has no member {member_id}"), member_id=member_id)
            group = self.groups[group_id] = Group(group_id, number, state_timestamp=self.broker.clock(),
                                                  empty_since_ms=self.broker.clock())
        if group.state is GroupState.DEAD:
            return _err(CoordinatorNotAvailableError(f"group {group_id} is being removed"), member_id=member_id)
        if not group.supports(protocol_type, protocols):
            return _err(InconsistentGroupProtocolError(
                f"group {group_id} uses protocol type {group.protocol_type} "
                f"with {sorted(group.candidate_protocols())}"),
                member_id=member_id)
        host = str(body.get("_client_host", ""))
        deadline = loop.time() + session_timeout / 1000

        if not member_id:
            if instance_id:
                return await self._join_static(group, instance_id, client_id, host, session_timeout,
                                               rebalance_timeout, protocol_type, protocols)
            if len(group.members) + len(group.pending_members) >= self.config.group_max_size:
                return _err(GroupMaxSizeReachedError(f"group {group_id} is full"))
            new_id = f"{client_id or 'consumer'}-{uuid.uuid4()}"
            group.pending_members[new_id] = deadline
            return _err(MemberIdRequiredError("rejoin with the returned member id"), member_id=new_id)

        if instance_id and group.static_members.get(instance_id) not in (None, member_id):
            return _err(FencedInstanceIdError(f"{instance_id} is now member {group.static_members[instance_id]}"),
                        member_id=member_id)
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            joined = Member(member_id, instance_id, client_id, host, session_timeout, rebalance_timeout,
                            protocol_type, protocols, deadline=deadline)
            group.members[member_id] = joined
            if instance_id:
                group.static_members[instance_id] = member_id
            return await self._park_join(group, joined, trigger=True)
        member = group.members.get(member_id)
        if member is None:
            return _err(UnknownMemberIdError(f"group {group_id} has no member {member_id}"), member_id=member_id)
        changed = member.protocols != protocols
        member.protocols = protocols
        member.session_timeout_ms = session_timeout
        member.rebalance_timeout_ms = rebalance_timeout
        member.deadline = deadline
        if group.state is GroupState.PREPARING_REBALANCE:
            return await self._park_join(group, member, trigger=False)
        if group.state is GroupState.COMPLETING_REBALANCE and not changed:
            return self._join_answer(group, member)
        if group.state is GroupState.STABLE and not changed and member_id != group.leader_id:
            return self._join_answer(group, member)
        return await self._park_join(group, member, trigger=True)

    async def _join_static(self, group: Group, instance_id: str, client_id: str, host: str, session_timeout: int,
                           rebalance_timeout: int, protocol_type: str,
                           protocols: list[tuple[str, bytes]]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        new_id = f"{instance_id}-{uuid.uuid4()}"
        old_id = group.static_members.get(instance_id)
        old = group.members.pop(old_id, None) if old_id else None
        member = Member(new_id, instance_id, client_id, host, session_timeout, rebalance_timeout, protocol_type,
                        protocols, deadline=loop.time() + session_timeout / 1000)
        group.members[new_id] = member
        group.static_members[instance_id] = new_id
        if old is not None:
            self._fail_member(old, FencedInstanceIdError(f"{instance_id} rejoined as a new member"))
            member.assignment = old.assignment
            member.is_new = False
            if group.leader_id == old.member_id:
                group.leader_id = new_id
            if group.state is GroupState.STABLE and group.protocol_name in {name for name, _ in protocols}:
                # A restarting static member: no rebalance; it gets its previous assignment back.
                await self._write_group(group)
                log.info("group %s: static member %s rejoined as %s without a rebalance", group.group_id,
                         instance_id, new_id)
                return self._join_answer(group, member)
        return await self._park_join(group, member, trigger=True)

    def _join_answer(self, group: Group, member: Member) -> dict[str, Any]:
        members = []
        if member.member_id == group.leader_id:
            members = [{"member_id": other.member_id, "group_instance_id": other.group_instance_id,
                        "metadata": _b64(other.metadata_for(group.protocol_name or ""))}
                       for other in group.members.values()]
        return _ok(generation_id=group.generation, protocol_type=group.protocol_type,
                   protocol_name=group.protocol_name, leader=group.leader_id, member_id=member.member_id,
                   members=members)

    async def _park_join(self, group: Group, member: Member, trigger: bool) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(_err(UnknownMemberIdError("superseded by a newer JoinGroup")))
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        member.join_future = future
        if group.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        self._maybe_complete_join(group)
        timeout = member.rebalance_timeout_ms / 1000 + 5
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            return _err(RebalanceInProgressError("the rebalance did not complete in time"))

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        loop = asyncio.get_running_loop()
        was_empty = group.state is GroupState.EMPTY
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                if member.sync_future is not None and not member.sync_future.done():
                    member.sync_future.set_result(_err(RebalanceInProgressError("a new rebalance started")))
        if group.sync_timer:
            group.sync_timer.cancel()
            group.sync_timer = None
        group.transition_to(GroupState.PREPARING_REBALANCE, self.broker.clock())
        rebalance_timeout = max(group.rebalance_timeout_ms, 1) / 1000
        group.rebalance_deadline = loop.time() + rebalance_timeout
        if group.join_timer:
            group.join_timer.cancel()
        if was_empty and self.config.group_initial_rebalance_delay_ms > 0:
            delay = min(self.config.group_initial_rebalance_delay_ms / 1000, rebalance_timeout)
            group.initial_delay_until = loop.time() + delay
            group.join_timer = loop.call_later(delay, self._on_join_timer, group, group.generation)
        else:
            group.initial_delay_until = 0.0
            group.join_timer = loop.call_later(rebalance_timeout, self._on_join_timer, group, group.generation)
        log.info("group %s: preparing rebalance for generation %d (%s)", group.group_id, group.generation + 1, reason)

    def _on_join_timer(self, group: Group, generation: int) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE or group.generation != generation:
            return
        loop = asyncio.get_running_loop()
        if group.initial_delay_until and loop.time() < group.rebalance_deadline and self._new_members_arrived(group):
            # Members keep arriving: extend the initial delay, up to the rebalance timeout.
            delay = min(self.config.group_initial_rebalance_delay_ms / 1000, group.rebalance_deadline - loop.time())
            group.initial_delay_until = loop.time() + delay
            for member in group.members.values():
                member.is_new = False  # the next tick extends again only if more arrive
            group.join_timer = loop.call_later(max(delay, 0.001), self._on_join_timer, group, generation)
            return
        group.initial_delay_until = 0.0
        self._complete_join(group)

    @staticmethod
    def _new_members_arrived(group: Group) -> bool:
        return any(member.is_new for member in group.members.values())

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE or group.initial_delay_until:
            return
        if all(member.join_future is not None and not member.join_future.done()
               for member in group.members.values()) and not group.pending_members:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.join_timer:
            group.join_timer.cancel()
            group.join_timer = None
        for member_id, member in list(group.members.items()):
            if member.join_future is None or member.join_future.done():
                log.info("group %s: member %s did not rejoin in time; removed", group.group_id, member_id)
                self._remove_member(group, member)
        group.pending_members.clear()
        now = self.broker.clock()
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition_to(GroupState.EMPTY, now)
            asyncio.get_running_loop().create_task(self._write_group(group))
            log.info("group %s: generation %d is empty", group.group_id, group.generation)
            return
        group.protocol_type = next(iter(group.members.values())).protocol_type
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition_to(GroupState.COMPLETING_REBALANCE, now)
        for member in group.members.values():
            member.is_new = False
            answer = self._join_answer(group, member)
            if member.join_future is not None and not member.join_future.done():
                member.join_future.set_result(answer)
            member.join_future = None
            member.deadline = asyncio.get_running_loop().time() + member.session_timeout_ms / 1000
        loop = asyncio.get_running_loop()
        group.sync_timer = loop.call_later(max(group.rebalance_timeout_ms, 1) / 1000, self._on_sync_timeout, group,
                                           group.generation)
        log.info("group %s: generation %d with %d members, protocol %s, leader %s", group.group_id,
                 group.generation, len(group.members), group.protocol_name, group.leader_id)

    def _on_sync_timeout(self, group: Group, generation: int) -> None:
        if group.state is not GroupState.COMPLETING_REBALANCE or group.generation != generation:
            return
        for member in list(group.members.values()):
            if member.sync_future is None:
                self._remove_member(group, member)
        self._prepare_rebalance(group, "members did not sync in time")
        self._maybe_complete_join(group)

    # -- sync ---------------------------------------------------------------------------------
    async def sync_group(self, body: dict[str, Any]) -> dict[str, Any]:
        group_id = protocol.require(body, "group_id", str)
        generation = protocol.require(body, "generation_id", int)
        member_id = protocol.require(body, "member_id", str)
        protocol_type = protocol.require(body, "protocol_type", str, None)
        protocol_name = protocol.require(body, "protocol_name", str, None)
        assignments_body = protocol.require(body, "assignments", list, [])
        self._check_owner(group_id)
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group else None
        if group is None or member is None:
            return _err(UnknownMemberIdError(f"group {group_id} has no member {member_id}"))
        if generation != group.generation:
            return _err(IllegalGenerationError(f"generation {generation} is not {group.generation}"))
        if (protocol_type and protocol_type != group.protocol_type) or (
                protocol_name and protocol_name != group.protocol_name):
            return _err(InconsistentGroupProtocolError("the protocol does not match the group's"))
        member.deadline = asyncio.get_running_loop().time() + member.session_timeout_ms / 1000
        if group.state is GroupState.PREPARING_REBALANCE:
            return _err(RebalanceInProgressError("the group is rebalancing; rejoin"))
        if group.state is GroupState.STABLE:
            return _ok(assignment=_b64(member.assignment), protocol_type=group.protocol_type,
                       protocol_name=group.protocol_name)
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return _err(UnknownMemberIdError(f"group {group_id} is {group.state.value}"))
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        member.sync_future = future
        if member_id == group.leader_id:
            assignments: dict[str, bytes] = {}
            for item in assignments_body:
                if not isinstance(item, dict):
                    raise InvalidRequestError("each assignment must be an object")
                assignments[protocol.require(item, "member_id", str)] = _unb64(item.get("assignment"), "assignment")
            asyncio.get_running_loop().create_task(self._store_assignment(group, generation, assignments))
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(group.rebalance_timeout_ms, 1000) / 1000 + 5)
        except TimeoutError:
            return _err(RebalanceInProgressError("the group's assignment did not arrive in time"))

    async def _store_assignment(self, group: Group, generation: int, assignments: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        error = await self._write_group(group)
        if group.state is not GroupState.COMPLETING_REBALANCE or group.generation != generation:
            return
        if error is not None:
            for member in group.members.values():
                if member.sync_future is not None and not member.sync_future.done():
                    member.sync_future.set_result(_err(error))
            self._prepare_rebalance(group, f"storing the assignment failed: {error.message}")
            return
        if group.sync_timer:
            group.sync_timer.cancel()
            group.sync_timer = None
        group.transition_to(GroupState.STABLE, self.broker.clock())
        for member in group.members.values():
            if member.sync_future is not None and not member.sync_future.done():
                member.sync_future.set_result(_ok(assignment=_b64(member.assignment),
                                                  protocol_type=group.protocol_type,
                                                  protocol_name=group.protocol_name))
            member.sync_future = None
        log.info("group %s: generation %d is stable", group.group_id, group.generation)

    # -- heartbeat and leave ------------------------------------------------------------------
    async def heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        group_id = protocol.require(body, "group_id", str)
        generation = protocol.require(body, "generation_id", int)
        member_id = protocol.require(body, "member_id", str)
        instance_id = protocol.require(body, "group_instance_id", str, None)
        self._check_owner(group_id)
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group else None
        if group is not None and instance_id and group.static_members.get(instance_id) not in (None, member_id):
            return _err(FencedInstanceIdError(f"{instance_id} belongs to another member now"))
        if group is None or member is None or group.state is GroupState.EMPTY:
            return _err(UnknownMemberIdError(f"group {group_id} has no member {member_id}"))
        if generation != group.generation:
            return _err(IllegalGenerationError(f"generation {generation} is not {group.generation}"))
        member.deadline = asyncio.get_running_loop().time() + member.session_timeout_ms / 1000
        if group.state is GroupState.PREPARING_REBALANCE:
            return _err(RebalanceInProgressError("the group is rebalancing; rejoin"))
        return _ok()

    async def leave_group(self, body: dict[str, Any]) -> dict[str, Any]:
        group_id = protocol.require(body, "group_id", str)
        members_body = protocol.require(body, "members", list, None)
        if members_body is None:
            members_body = [{"member_id": protocol.require(body, "member_id", str)}]
        self._check_owner(group_id)
        group = self.groups.get(group_id)
        answers = []
        for item in members_body:
            member_id = str(item.get("member_id") or "") if isinstance(item, dict) else ""
            instance_id = item.get("group_instance_id") if isinstance(item, dict) else None
            if group is not None and not member_id and instance_id:
                member_id = group.static_members.get(str(instance_id), "")
            member = group.members.get(member_id) if group else None
            if member is None:
                answers.append({"member_id": member_id, **_err(UnknownMemberIdError(f"no member {member_id}"))})
                continue
            assert group is not None
            log.info("group %s: member %s leaves (%s)", group_id, member_id,
                     item.get("reason", "") if isinstance(item, dict) else "")
            self._remove_member(group, member)
            self._rebalance_after_departure(group)
            answers.append({"member_id": member_id, "error_code": 0})
        return _ok(members=answers)

    def _remove_member(self, group: Group, member: Member) -> None:
        group.members.pop(member.member_id, None)
        if member.group_instance_id and group.static_members.get(member.group_instance_id) == member.member_id:
            del group.static_members[member.group_instance_id]
        self._fail_member(member, UnknownMemberIdError(f"member {member.member_id} left the group"))

    def _rebalance_after_departure(self, group: Group) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, "a member left")
            self._maybe_complete_join(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)

    # -- offsets ------------------------------------------------------------------------------
    async def offset_commit(self, body: dict[str, Any]) -> dict[str, Any]:
        group_id = protocol.require(body, "group_id", str)
        generation = protocol.require(body, "generation_id", int, -1)
        member_id = protocol.require(body, "member_id", str, "")
        topics = protocol.require_objects(body, "topics")
        requested: list[tuple[str, int, int, int, str]] = []
        for topic in topics:
            name = protocol.require(topic, "name", str)
            for item in protocol.require_objects(topic, "partitions"):
                requested.append((name, protocol.require(item, "partition", int, minimum=0, maximum=protocol.INT32_MAX),
                                  protocol.require(item, "offset", int),
                                  protocol.require(item, "leader_epoch", int, -1, minimum=protocol.INT32_MIN,
                                                   maximum=protocol.INT32_MAX),
                                  protocol.require(item, "metadata", str, "") or ""))

        def answer_all(error: BrokerResponseError | None, per: dict[tuple[str, int], BrokerResponseError] | None = None
                       ) -> dict[str, Any]:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for name, number, *_ in requested:
                problem = (per or {}).get((name, number)) or error
                entry = {"partition": number, **(_err(problem) if problem else {"error_code": 0})}
                by_topic.setdefault(name, []).append(entry)
            return _ok(topics=[{"name": name, "partitions": entries} for name, entries in by_topic.items()])

        try:
            number = self._check_owner(group_id)
        except BrokerResponseError as exc:
            return answer_all(exc)
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0 or member_id:
                return answer_all(IllegalGenerationError(f"group {group_id} does not exist"))
            group = self.groups[group_id] = Group(group_id, number, state_timestamp=self.broker.clock(),
                                                  empty_since_ms=self.broker.clock())
        if group.state is GroupState.DEAD:
            return answer_all(CoordinatorNotAvailableError(f"group {group_id} is being removed"))
        if generation < 0 and not member_id:
            if group.members:
                return answer_all(UnknownMemberIdError(f"group {group_id} has active members; join it first"))
        else:
            member = group.members.get(member_id)
            if member is None:
                return answer_all(UnknownMemberIdError(f"group {group_id} has no member {member_id}"))
            if generation != group.generation:
                return answer_all(IllegalGenerationError(f"generation {generation} is not {group.generation}"))
            if group.state is GroupState.COMPLETING_REBALANCE:
                return answer_all(RebalanceInProgressError("the group is rebalancing"))
            member.deadline = max(member.deadline, asyncio.get_running_loop().time() + member.session_timeout_ms / 1000)
        per: dict[tuple[str, int], BrokerResponseError] = {}
        now = self.broker.clock()
        writes: list[tuple[OffsetKey, OffsetValue]] = []
        for name, partition_number, offset, epoch, metadata in requested:
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                per[(name, partition_number)] = OffsetMetadataTooLargeError(
                    f"metadata is longer than offset.metadata.max.bytes={self.config.offset_metadata_max_bytes}")
                continue
            writes.append((OffsetKey(group_id, name, partition_number), OffsetValue(offset, epoch, metadata, now)))
        if writes:
            error = await self._append(number, [(key.encode(), value.encode()) for key, value in writes])
            if error is not None:
                return answer_all(error, per)
            for key, value in writes:
                group.offsets[(key.topic, key.partition)] = value
        return answer_all(None, per)

    async def offset_fetch(self, body: dict[str, Any]) -> dict[str, Any]:
        group_id = protocol.require(body, "group_id", str)
        topics = protocol.require_objects(body, "topics", None)
        requested = None if topics is None else [
            (protocol.require(topic, "name", str), protocol.require_list_of(topic, "partitions", int, None))
            for topic in topics]
        self._check_owner(group_id)
        group = self.groups.get(group_id)
        offsets = group.offsets if group else {}
        wanted: list[tuple[str, int]]
        if requested is None:
            wanted = sorted(offsets)
        else:
            wanted = []
            for name, partitions in requested:
                if partitions is None:
                    wanted.extend(key for key in sorted(offsets) if key[0] == name)
                else:
                    wanted.extend((name, number) for number in partitions)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, number in wanted:
            value = offsets.get((name, number))
            by_topic.setdefault(name, []).append({
                "partition": number, "error_code": 0,
                "offset": value.offset if value else -1, "leader_epoch": value.leader_epoch if value else -1,
                "metadata": value.metadata if value else ""})
        return _ok(topics=[{"name": name, "partitions": entries} for name, entries in by_topic.items()])

    async def _append(self, number: int, records: list[tuple[bytes, bytes | None]]) -> BrokerResponseError | None:
        batch = build_batch([value for _, value in records], keys=[key for key, _ in records])
        request = protocol.ProduceRequest(-1, self.config.offsets_commit_timeout_ms,
                                          [protocol.ProducePartition(OFFSETS_TOPIC, number, batch)])
        results = await self.broker.replica_manager.produce(request, allow_internal=True)
        code = results[0].error_code if results else 0
        if code == 0:
            return None
        mapped = _WRITE_ERROR_MAP.get(code)
        message = results[0].error_message
        return mapped(message) if mapped else protocol.error_for(code, message)

    async def _write_group(self, group: Group) -> BrokerResponseError | None:
        if group.partition not in self.owned:
            return NotCoordinatorError(f"group {group.group_id} moved to another coordinator")
        value = group.to_record().encode() if (group.members or group.generation > 0) else None
        return await self._append(group.partition, [(GroupKey(group.group_id).encode(), value)])

    # -- admin --------------------------------------------------------------------------------
    async def list_groups(self, body: dict[str, Any]) -> dict[str, Any]:
        states = protocol.require_list_of(body, "states", str, None)
        groups = [{"group_id": group.group_id, "protocol_type": group.protocol_type or "consumer",
                   "state": group.state.value}
                  for group in sorted(self.groups.values(), key=lambda item: item.group_id)
                  if group.partition in self.owned and (not states or group.state.value in states)]
        return _ok(groups=groups, loading=sorted(self.loading))

    async def describe_groups(self, body: dict[str, Any]) -> dict[str, Any]:
        answers = []
        for group_id in protocol.require_list_of(body, "groups", str):
            try:
                self._check_owner(str(group_id))
            except BrokerResponseError as exc:
                answers.append({"group_id": group_id, **_err(exc)})
                continue
            group = self.groups.get(str(group_id))
            if group is None:
                answers.append({"group_id": group_id, "error_code": 0, "state": "Dead", "protocol_type": "",
                                "protocol": "", "generation_id": -1, "leader": "", "members": []})
            else:
                answers.append({"error_code": 0, **group.describe()})
        return _ok(groups=answers)

    async def delete_groups(self, body: dict[str, Any]) -> dict[str, Any]:
        answers = []
        for group_id in protocol.require_list_of(body, "groups", str):
            try:
                self._check_owner(str(group_id))
                group = self.groups.get(str(group_id))
                if group is None:
                    raise GroupIdNotFoundError(f"group {group_id} does not exist")
                if group.state is not GroupState.EMPTY:
                    raise NonEmptyGroupError(f"group {group_id} has active members")
                error = await self._delete_group(group)
                if error is not None:
                    raise error
                answers.append({"group_id": group_id, "error_code": 0})
            except BrokerResponseError as exc:
                answers.append({"group_id": group_id, **_err(exc)})
        return _ok(groups=answers)

    async def _delete_group(self, group: Group) -> BrokerResponseError | None:
        tombstones: list[tuple[bytes, bytes | None]] = [
            (OffsetKey(group.group_id, topic, number).encode(), None) for topic, number in group.offsets]
        tombstones.append((GroupKey(group.group_id).encode(), None))
        error = await self._append(group.partition, tombstones)
        if error is None:
            group.transition_to(GroupState.DEAD, self.broker.clock())
            self.groups.pop(group.group_id, None)
        return error

    # -- sweeping -----------------------------------------------------------------------------
    async def _sweep_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_expiry_check = loop.time() + self.config.offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(_SWEEP_INTERVAL)
            now = loop.time()
            for group in list(self.groups.values()):
                if group.partition not in self.owned:
                    continue
                for pending_id, deadline in list(group.pending_members.items()):
                    if deadline < now:
                        del group.pending_members[pending_id]
                        self._maybe_complete_join(group)
                expired = [member for member in group.members.values() if not member.awaiting and member.deadline < now]
                for member in expired:
                    log.info("group %s: member %s session timed out", group.group_id, member.member_id)
                    self._remove_member(group, member)
                if expired:
                    self._rebalance_after_departure(group)
            if now >= next_expiry_check:
                next_expiry_check = now + self.config.offsets_retention_check_interval_ms / 1000
                await self._expire_offsets()

    async def _expire_offsets(self) -> None:
        retention_ms = self.config.offsets_retention_minutes * 60_000
        now = self.broker.clock()
        for group in list(self.groups.values()):
            if group.partition not in self.owned or group.state is not GroupState.EMPTY:
                continue
            newest_commit = max((value.commit_timestamp for value in group.offsets.values()), default=0)
            if now - max(group.empty_since_ms, newest_commit) > retention_ms:
                log.info("group %s: offsets expired after %d minutes empty", group.group_id,
                         self.config.offsets_retention_minutes)
                await self._delete_group(group)

    # -- helpers ------------------------------------------------------------------------------
    def _fail_member(self, member: Member, error: BrokerResponseError) -> None:
        for future in (member.join_future, member.sync_future):
            if future is not None and not future.done():
                future.set_result(_err(error, member_id=member.member_id))
        member.join_future = member.sync_future = None

    def _fail_waiters(self, group: Group, error: BrokerResponseError) -> None:
        for member in group.members.values():
            self._fail_member(member, error)

    @staticmethod
    def _cancel_timers(group: Group) -> None:
        for timer in (group.join_timer, group.sync_timer):
            if timer is not None:
                timer.cancel()
        group.join_timer = group.sync_timer = None
