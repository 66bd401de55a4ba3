"""One consumer group's state: members, generation, protocol and committed offsets.

The group is an explicit state machine with Kafka's five states; :data:`TRANSITIONS` lists the
only moves allowed and :meth:`Group.transition_to` refuses any other, so an illegal move is a
bug that shows at once instead of a silently corrupted group::

    Empty ──join──▶ PreparingRebalance ──all joined──▶ CompletingRebalance ──leader sync──▶ Stable
      ▲                 ▲    │ (no members left)                │  ▲                          │
      └─────────────────┼────┘                                  └──┼── join/leave/failure ◀────┘
                        └──────────────────────────────────────────┘
    any state ──offsets partition moved / group deleted──▶ Dead

Members carry their parked JoinGroup / SyncGroup answers (futures) and their session deadline.
The state machine (:mod:`kafkalite.broker.group_membership`) drives the transitions.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Protocol

from kafkalite.broker.group_api import GroupDescription, JoinGroupAnswer, MemberDescription, SyncGroupAnswer
from kafkalite.broker.group_records import GroupValue, MemberRecord, OffsetValue
from kafkalite.errors import IllegalStateError


class Timer(Protocol):
    """A scheduled callback that can be cancelled (an :class:`asyncio.TimerHandle`, or a fake
    clock's timer in tests)."""

    def cancel(self) -> None: ...


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


TRANSITIONS: dict[GroupState, set[GroupState]] = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE, GroupState.DEAD},
    GroupState.PREPARING_REBALANCE: {GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD},
    GroupState.COMPLETING_REBALANCE: {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.DEAD},
    GroupState.STABLE: {GroupState.PREPARING_REBALANCE, GroupState.DEAD},
    GroupState.DEAD: set(),
}


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[JoinGroupAnswer] | None = None
    sync_future: asyncio.Future[SyncGroupAnswer] | None = None
    deadline: float = 0.0
    is_new: bool = True

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    @property
    def awaiting(self) -> bool:
        return (self.join_future is not None and not self.join_future.done()) or (
            self.sync_future is not None and not self.sync_future.done())


@dataclass
class Group:
    """A consumer group. See the module docstring."""

    group_id: str
    partition: int
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: dict[str, float] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetValue] = field(default_factory=dict)
    state_timestamp: int = 0
    rebalance_deadline: float = 0.0
    join_timer: Timer | None = None
    sync_timer: Timer | None = None
    initial_delay_until: float = 0.0
    empty_since_ms: int = 0

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if target not in TRANSITIONS[self.state]:
            raise IllegalStateError(f"group {self.group_id}: illegal move {self.state.value} -> {target.value}")
        self.state = target
        self.state_timestamp = now_ms
        if target is GroupState.EMPTY:
            self.empty_since_ms = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """A joining member is compatible when types match and one protocol is common to all."""
        if not self.members:
            return bool(protocols)
        current_type = self.protocol_type or next(iter(self.members.values())).protocol_type
        if protocol_type != current_type:
            return False
        offered = {name for name, _ in protocols}
        return bool(offered & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        candidates: set[str] | None = None
        for member in self.members.values():
            names = set(member.protocol_names)
            candidates = names if candidates is None else candidates & names
        return candidates or set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those all support."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name in member.protocol_names if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        first_member = next(iter(self.members.values()))
        order = [name for name in first_member.protocol_names if name in candidates]
        return max(order, key=lambda name: (votes.get(name, 0), -order.index(name)))

    def to_record(self) -> GroupValue:
        protocol = self.protocol_name
        return GroupValue(self.protocol_type or "consumer", self.generation, protocol, self.leader_id,
                          self.state_timestamp, [
                              MemberRecord(member.member_id, member.group_instance_id, member.client_id,
                                           member.client_host, member.rebalance_timeout_ms,
                                           member.session_timeout_ms,
                                           member.metadata_for(protocol) if protocol else b"", member.assignment)
                              for member in self.members.values()])

    def describe(self) -> GroupDescription:
        protocol = self.protocol_name or ""
        return GroupDescription(
            self.group_id, None, self.state.value, self.protocol_type or "", protocol, self.generation,
            self.leader_id or "", [MemberDescription(member.member_id, member.group_instance_id, member.client_id,
                                                     member.client_host, member.metadata_for(protocol),
                                                     member.assignment)
                                   for member in self.members.values()])
