"""The group state machine: membership, generations and rebalances of Kafka's classic protocol.

:class:`GroupMembership` holds the groups of the offsets partitions this broker coordinates and
drives each :class:`~kafkalite.broker.group.Group` through its states: JoinGroup (member ids,
MEMBER_ID_REQUIRED, protocol choice by vote, the leader gets the members' metadata, static
membership through ``group.instance.id``, the initial rebalance delay), SyncGroup (the leader's
assignment reaches every member once stored), Heartbeat (REBALANCE_IN_PROGRESS asks members to
rejoin), LeaveGroup, and the generation and member checks of an offset commit. Session timeouts
remove silent members (:meth:`GroupMembership.sweep`); members that do not rejoin within the
rebalance timeout are dropped from the new generation, and members that do not sync in time
start a new rebalance.

It knows nothing of ownership, the offsets topic or any wire format: time comes from an
injected :class:`GroupClock` (the event loop's, or a fake one in tests) and a group's record is
stored through an injected ``write_group`` coroutine. JoinGroup and SyncGroup answer with a
future that completes when the rebalance step does.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from kafkalite.broker.group import Group, GroupState, Member, Timer
from kafkalite.broker.group_api import (
    HeartbeatRequest,
    JoinedMember,
    JoinGroupAnswer,
    JoinGroupRequest,
    LeaveGroupAnswer,
    LeaveGroupRequest,
    MemberOutcome,
    SyncGroupAnswer,
    SyncGroupRequest,
)
from kafkalite.config import BrokerConfig
from kafkalite.errors import (
    BrokerResponseError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

log = logging.getLogger(__name__)


class GroupClock(Protocol):
    """Time as the state machine sees it: a monotonic clock in seconds for deadlines and timers,
    and wall-clock milliseconds for the timestamps stored with a group."""

    def monotonic(self) -> float: ...

    def wall_ms(self) -> int: ...

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> Timer: ...


class LoopClock:
    """The running event loop's clock and timers, with ``wall_ms`` for stored timestamps."""

    def __init__(self, wall_ms: Callable[[], int]) -> None:
        self._wall_ms = wall_ms

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    def wall_ms(self) -> int:
        return self._wall_ms()

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback, *args)


WriteGroup = Callable[[Group], Coroutine[Any, Any, BrokerResponseError | None]]


def _done(answer: Any) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_result(answer)
    return future


class GroupMembership:
    """The groups this broker coordinates and their rebalances. See the module docstring."""

    def __init__(self, config: BrokerConfig, clock: GroupClock, write_group: WriteGroup) -> None:
        self.config = config
        self.clock = clock
        self.write_group = write_group
        self.groups: dict[str, Group] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        #: rebalances completed with members (a new generation), for ``GET /metrics``
        self.rebalances = 0

    def _spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def new_group(self, group_id: str, partition: int) -> Group:
        now = self.clock.wall_ms()
        group = self.groups[group_id] = Group(group_id, partition, state_timestamp=now, empty_since_ms=now)
        return group

    def _session_deadline(self, member: Member) -> float:
        return self.clock.monotonic() + member.session_timeout_ms / 1000

    # -- join ---------------------------------------------------------------------------------
    def session_timeout_problem(self, request: JoinGroupRequest) -> JoinGroupAnswer | None:
        """INVALID_SESSION_TIMEOUT when the request's session timeout is outside the broker's range."""
        low, high = self.config.group_min_session_timeout_ms, self.config.group_max_session_timeout_ms
        if low <= request.session_timeout_ms <= high:
            return None
        return JoinGroupAnswer(InvalidSessionTimeoutError(
            f"session timeout {request.session_timeout_ms} ms is outside [{low}, {high}]"), request.member_id)

    async def join(self, request: JoinGroupRequest, partition: int) -> asyncio.Future[JoinGroupAnswer]:
        """Handle a JoinGroup for a group of offsets partition ``partition``; the future completes
        with the answer (at once, or when the rebalance completes)."""
        problem = self.session_timeout_problem(request)
        if problem is not None:
            return _done(problem)
        group_id, member_id, instance_id = request.group_id, request.member_id, request.group_instance_id
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return _done(JoinGroupAnswer(UnknownMemberIdError(f"group {group_id} has no member {member_id}"),
                                             member_id))
            group = self.new_group(group_id, partition)
        if group.state is GroupState.DEAD:
            return _done(JoinGroupAnswer(CoordinatorNotAvailableError(f"group {group_id} is being removed"),
                                         member_id))
        if not group.supports(request.protocol_type, request.protocols):
            return _done(JoinGroupAnswer(InconsistentGroupProtocolError(
                f"group {group_id} uses protocol type {group.protocol_type} "
                f"with {sorted(group.candidate_protocols())}"), member_id))
        deadline = self.clock.monotonic() + request.session_timeout_ms / 1000

        if not member_id:
            if instance_id:
                return await self._join_static(group, request, instance_id)
            if len(group.members) + len(group.pending_members) >= self.config.group_max_size:
                return _done(JoinGroupAnswer(GroupMaxSizeReachedError(f"group {group_id} is full")))
            new_id = f"{request.client_id or 'consumer'}-{uuid.uuid4()}"
            group.pending_members[new_id] = deadline
            return _done(JoinGroupAnswer(MemberIdRequiredError("rejoin with the returned member id"), new_id))

        if instance_id and group.static_members.get(instance_id) not in (None, member_id):
            return _done(JoinGroupAnswer(FencedInstanceIdError(
                f"{instance_id} is now member {group.static_members[instance_id]}"), member_id))
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            joined = Member(member_id, instance_id, request.client_id, request.client_host,
                            request.session_timeout_ms, request.rebalance_timeout_ms, request.protocol_type,
                            request.protocols, deadline=deadline)
            group.members[member_id] = joined
            if instance_id:
                group.static_members[instance_id] = member_id
            return self._park_join(group, joined)
        member = group.members.get(member_id)
        if member is None:
            return _done(JoinGroupAnswer(UnknownMemberIdError(f"group {group_id} has no member {member_id}"),
                                         member_id))
        changed = member.protocols != request.protocols
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.deadline = deadline
        if group.state is GroupState.PREPARING_REBALANCE:
            return self._park_join(group, member)
        if group.state is GroupState.COMPLETING_REBALANCE and not changed:
            return _done(self._join_answer(group, member))
        if group.state is GroupState.STABLE and not changed and member_id != group.leader_id:
            return _done(self._join_answer(group, member))
        return self._park_join(group, member)

    async def _join_static(self, group: Group, request: JoinGroupRequest,
                           instance_id: str) -> asyncio.Future[JoinGroupAnswer]:
        new_id = f"{instance_id}-{uuid.uuid4()}"
        old_id = group.static_members.get(instance_id)
        old = group.members.pop(old_id, None) if old_id else None
        member = Member(new_id, instance_id, request.client_id, request.client_host, request.session_timeout_ms,
                        request.rebalance_timeout_ms, request.protocol_type, request.protocols,
                        deadline=self.clock.monotonic() + request.session_timeout_ms / 1000)
        group.members[new_id] = member
        group.static_members[instance_id] = new_id
        if old is not None:
            self._fail_member(old, FencedInstanceIdError(f"{instance_id} rejoined as a new member"))
            member.assignment = old.assignment
            member.is_new = False
            if group.leader_id == old.member_id:
                group.leader_id = new_id
            if group.state is GroupState.STABLE and group.protocol_name in {name for name, _ in request.protocols}:
                # A restarting static member: no rebalance; it gets its previous assignment back.
                await self.write_group(group)
                log.info("group %s: static member %s rejoined as %s without a rebalance", group.group_id,
                         instance_id, new_id)
                return _done(self._join_answer(group, member))
        return self._park_join(group, member)

    @staticmethod
    def _join_answer(group: Group, member: Member) -> JoinGroupAnswer:
        members = []
        if member.member_id == group.leader_id:
            members = [JoinedMember(other.member_id, other.group_instance_id,
                                    other.metadata_for(group.protocol_name or ""))
                       for other in group.members.values()]
        return JoinGroupAnswer(None, member.member_id, group.generation, group.protocol_type, group.protocol_name,
                               group.leader_id, members)

    def _park_join(self, group: Group, member: Member) -> asyncio.Future[JoinGroupAnswer]:
        if member.join_future is not None and not member.join_future.done():
            # A known member keeps its id (Kafka's rule): the older JoinGroup is told to rejoin,
            # which clients do with the same id; UNKNOWN_MEMBER_ID would make them drop it.
            member.join_future.set_result(JoinGroupAnswer(
                RebalanceInProgressError("superseded by a newer JoinGroup of the same member; rejoin"),
                member.member_id))
        future: asyncio.Future[JoinGroupAnswer] = asyncio.get_running_loop().create_future()
        member.join_future = future
        if group.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        self._maybe_complete_join(group)
        return future

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        clock = self.clock
        was_empty = group.state is GroupState.EMPTY
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                if member.sync_future is not None and not member.sync_future.done():
                    member.sync_future.set_result(SyncGroupAnswer(RebalanceInProgressError("a new rebalance started")))
        if group.sync_timer:
            group.sync_timer.cancel()
            group.sync_timer = None
        group.transition_to(GroupState.PREPARING_REBALANCE, clock.wall_ms())
        rebalance_timeout = max(group.rebalance_timeout_ms, 1) / 1000
        group.rebalance_deadline = clock.monotonic() + rebalance_timeout
        if group.join_timer:
            group.join_timer.cancel()
        if was_empty and self.config.group_initial_rebalance_delay_ms > 0:
            delay = min(self.config.group_initial_rebalance_delay_ms / 1000, rebalance_timeout)
            group.initial_delay_until = clock.monotonic() + delay
            group.join_timer = clock.call_later(delay, self._on_join_timer, group, group.generation)
        else:
            group.initial_delay_until = 0.0
            group.join_timer = clock.call_later(rebalance_timeout, self._on_join_timer, group, group.generation)
        log.info("group %s: preparing rebalance for generation %d (%s)", group.group_id, group.generation + 1, reason)

    def _on_join_timer(self, group: Group, generation: int) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE or group.generation != generation:
            return
        now = self.clock.monotonic()
        if group.initial_delay_until and now < group.rebalance_deadline and any(
                member.is_new for member in group.members.values()):
            # Members keep arriving: extend the initial delay, up to the rebalance timeout.
            delay = min(self.config.group_initial_rebalance_delay_ms / 1000, group.rebalance_deadline - now)
            group.initial_delay_until = now + delay
            for member in group.members.values():
                member.is_new = False  # the next tick extends again only if more arrive
            group.join_timer = self.clock.call_later(max(delay, 0.001), self._on_join_timer, group, generation)
            return
        group.initial_delay_until = 0.0
        self._complete_join(group)

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
        now = self.clock.wall_ms()
        group.generation += 1
        if group.members:
            self.rebalances += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition_to(GroupState.EMPTY, now)
            self._spawn(self.write_group(group))
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
            member.deadline = self._session_deadline(member)
        group.sync_timer = self.clock.call_later(max(group.rebalance_timeout_ms, 1) / 1000, self._on_sync_timeout,
                                                 group, group.generation)
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
    async def sync(self, request: SyncGroupRequest) -> asyncio.Future[SyncGroupAnswer]:
        """Handle a SyncGroup; the future completes when the leader's assignment is stored. The
        leader's call returns once the store has been attempted."""
        group_id, member_id, generation = request.group_id, request.member_id, request.generation_id
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group else None
        if group is None or member is None:
            return _done(SyncGroupAnswer(UnknownMemberIdError(f"group {group_id} has no member {member_id}")))
        if generation != group.generation:
            return _done(SyncGroupAnswer(IllegalGenerationError(f"generation {generation} is not {group.generation}")))
        if (request.protocol_type and request.protocol_type != group.protocol_type) or (
                request.protocol_name and request.protocol_name != group.protocol_name):
            return _done(SyncGroupAnswer(InconsistentGroupProtocolError("the protocol does not match the group's")))
        member.deadline = self._session_deadline(member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return _done(SyncGroupAnswer(RebalanceInProgressError("the group is rebalancing; rejoin")))
        if group.state is GroupState.STABLE:
            return _done(SyncGroupAnswer(None, member.assignment, group.protocol_type, group.protocol_name))
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return _done(SyncGroupAnswer(UnknownMemberIdError(f"group {group_id} is {group.state.value}")))
        future: asyncio.Future[SyncGroupAnswer] = asyncio.get_running_loop().create_future()
        member.sync_future = future
        if member_id == group.leader_id:
            await self._store_assignment(group, generation, request.assignments)
        return future

    async def _store_assignment(self, group: Group, generation: int, assignments: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        error = await self.write_group(group)
        if group.state is not GroupState.COMPLETING_REBALANCE or group.generation != generation:
            return
        if error is not None:
            for member in group.members.values():
                if member.sync_future is not None and not member.sync_future.done():
                    member.sync_future.set_result(SyncGroupAnswer(error))
            self._prepare_rebalance(group, f"storing the assignment failed: {error.message}")
            return
        if group.sync_timer:
            group.sync_timer.cancel()
            group.sync_timer = None
        group.transition_to(GroupState.STABLE, self.clock.wall_ms())
        for member in group.members.values():
            if member.sync_future is not None and not member.sync_future.done():
                member.sync_future.set_result(SyncGroupAnswer(None, member.assignment, group.protocol_type,
                                                              group.protocol_name))
            member.sync_future = None
        log.info("group %s: generation %d is stable", group.group_id, group.generation)

    # -- heartbeat, leave and commits ---------------------------------------------------------
    def heartbeat(self, request: HeartbeatRequest) -> None:
        """Keep a member alive; raises the named error the member must react to."""
        group_id, member_id, instance_id = request.group_id, request.member_id, request.group_instance_id
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group else None
        if group is not None and instance_id and group.static_members.get(instance_id) not in (None, member_id):
            raise FencedInstanceIdError(f"{instance_id} belongs to another member now")
        if group is None or member is None or group.state is GroupState.EMPTY:
            raise UnknownMemberIdError(f"group {group_id} has no member {member_id}")
        if request.generation_id != group.generation:
            raise IllegalGenerationError(f"generation {request.generation_id} is not {group.generation}")
        member.deadline = self._session_deadline(member)
        if group.state is GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgressError("the group is rebalancing; rejoin")

    def leave(self, request: LeaveGroupRequest) -> LeaveGroupAnswer:
        group = self.groups.get(request.group_id)
        answers = []
        for leaving in request.members:
            member_id = leaving.member_id
            if group is not None and not member_id and leaving.group_instance_id:
                member_id = group.static_members.get(leaving.group_instance_id, "")
            member = group.members.get(member_id) if group else None
            if group is None or member is None:
                answers.append(MemberOutcome(member_id, UnknownMemberIdError(f"no member {member_id}")))
                continue
            log.info("group %s: member %s leaves (%s)", request.group_id, member_id, leaving.reason)
            self._remove_member(group, member)
            self._rebalance_after_departure(group)
            answers.append(MemberOutcome(member_id, None))
        return LeaveGroupAnswer(answers)

    def check_commit(self, group_id: str, generation: int, member_id: str, partition: int) -> Group:
        """The group an offset commit may write to: a simple (memberless) commit to a group with no
        members, or one from a current member of the current generation outside a sync. Creates a
        group for a simple commit; raises the named error otherwise."""
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0 or member_id:
                raise IllegalGenerationError(f"group {group_id} does not exist")
            group = self.new_group(group_id, partition)
        if group.state is GroupState.DEAD:
            raise CoordinatorNotAvailableError(f"group {group_id} is being removed")
        if generation < 0 and not member_id:
            if group.members:
                raise UnknownMemberIdError(f"group {group_id} has active members; join it first")
            return group
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"group {group_id} has no member {member_id}")
        if generation != group.generation:
            raise IllegalGenerationError(f"generation {generation} is not {group.generation}")
        if group.state is GroupState.COMPLETING_REBALANCE:
            raise RebalanceInProgressError("the group is rebalancing")
        member.deadline = max(member.deadline, self._session_deadline(member))
        return group

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

    # -- expiry -------------------------------------------------------------------------------
    def sweep(self, owned: set[int] | None = None) -> float | None:
        """Drop pending member ids and members whose session deadline passed (only in groups of
        the ``owned`` offsets partitions, when given), rebalancing their groups. Returns the
        earliest deadline still ahead (by the coordinator's clock), None when there is none."""
        now = self.clock.monotonic()
        earliest: float | None = None
        for group in list(self.groups.values()):
            if owned is not None and group.partition not in owned:
                continue
            for pending_id, deadline in list(group.pending_members.items()):
                if deadline < now:
                    del group.pending_members[pending_id]
                    self._maybe_complete_join(group)
                elif earliest is None or deadline < earliest:
                    earliest = deadline
            expired = [member for member in group.members.values() if not member.awaiting and member.deadline < now]
            for member in expired:
                log.info("group %s: member %s session timed out", group.group_id, member.member_id)
                self._remove_member(group, member)
            if expired:
                self._rebalance_after_departure(group)
            for member in group.members.values():
                if not member.awaiting and member.deadline >= now and (earliest is None or member.deadline < earliest):
                    earliest = member.deadline
        return earliest

    def unload(self, partition: int) -> None:
        """Forget the groups of offsets partition ``partition``: parked requests get NOT_COORDINATOR."""
        for group_id, group in list(self.groups.items()):
            if group.partition != partition:
                continue
            for member in group.members.values():
                self._fail_member(member, NotCoordinatorError(f"group {group_id} moved to another coordinator"))
            for timer in (group.join_timer, group.sync_timer):
                if timer is not None:
                    timer.cancel()
            group.join_timer = group.sync_timer = None
            del self.groups[group_id]

    @staticmethod
    def _fail_member(member: Member, error: BrokerResponseError) -> None:
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinGroupAnswer(error, member.member_id))
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncGroupAnswer(error, member_id=member.member_id))
        member.join_future = member.sync_future = None
