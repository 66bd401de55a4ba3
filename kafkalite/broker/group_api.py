"""Typed requests and answers of the group coordinator (Kafka's classic group protocol).

A front end decodes its wire format into these requests and encodes these answers; the group
coordinator (:mod:`kafkalite.broker.group_coordinator`) never sees JSON or HTTP. An answer
carries ``error`` (a kafkalite error with Kafka's name and code) or ``None`` on success; an
error that concerns the whole request is raised instead, and the front end answers it the same
way as any other named error.

Concurrency: plain immutable values, safe anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafkalite.errors import BrokerResponseError


@dataclass(frozen=True)
class FindCoordinatorRequest:
    key: str
    key_type: int = 0


@dataclass(frozen=True)
class FindCoordinatorAnswer:
    error: BrokerResponseError | None
    node_id: int = -1
    host: str = ""
    port: int = -1
    partition: int = -1


@dataclass(frozen=True)
class JoinGroupRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class JoinedMember:
    """One member as the leader sees it in a JoinGroup answer."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinGroupAnswer:
    error: BrokerResponseError | None
    #: The member id the caller must use from now on (given with MEMBER_ID_REQUIRED too), or
    #: None when the answer names none.
    member_id: str | None = None
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    #: Filled for the leader only.
    members: list[JoinedMember] = field(default_factory=list)


@dataclass(frozen=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    protocol_type: str | None = None
    protocol_name: str | None = None
    #: The leader's assignment per member id (empty for the other members).
    assignments: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class SyncGroupAnswer:
    error: BrokerResponseError | None
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None
    #: Named in the answer of a parked SyncGroup that failed because the member was removed.
    member_id: str | None = None


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class LeaveGroupRequest:
    group_id: str
    members: list[LeavingMember]


@dataclass(frozen=True)
class MemberOutcome:
    member_id: str
    error: BrokerResponseError | None


@dataclass(frozen=True)
class LeaveGroupAnswer:
    members: list[MemberOutcome]


@dataclass(frozen=True)
class CommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    partitions: list[CommitPartition]


@dataclass(frozen=True)
class TxnOffsetCommitRequest:
    """Offsets committed inside a transaction (TxnOffsetCommit): pending until the producer's
    marker lands in the group's ``__consumer_offsets`` partition."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str | None
    partitions: list[CommitPartition]


@dataclass(frozen=True)
class PartitionOutcome:
    topic: str
    partition: int
    error: BrokerResponseError | None


@dataclass(frozen=True)
class OffsetCommitAnswer:
    partitions: list[PartitionOutcome]


@dataclass(frozen=True)
class OffsetDeleteRequest:
    group_id: str
    #: (topic, partition) pairs whose committed offsets to delete.
    partitions: list[tuple[str, int]]


@dataclass(frozen=True)
class OffsetFetchRequest:
    group_id: str
    #: Topics and their partitions (None: every committed partition of the topic); None: all.
    topics: list[tuple[str, list[int] | None]] | None = None
    #: Answer UNSTABLE_OFFSET_COMMIT for partitions with a transactional commit still pending.
    require_stable: bool = False


@dataclass(frozen=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: BrokerResponseError | None = None


@dataclass(frozen=True)
class OffsetFetchAnswer:
    partitions: list[CommittedOffset]


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True)
class ListGroupsAnswer:
    groups: list[GroupListing]
    #: Offsets partitions still loading (their groups are not listed yet).
    loading: list[int]


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    error: BrokerResponseError | None
    state: str = "Dead"
    protocol_type: str = ""
    protocol: str = ""
    generation_id: int = -1
    leader: str = ""
    members: list[MemberDescription] = field(default_factory=list)


@dataclass(frozen=True)
class GroupOutcome:
    group_id: str
    error: BrokerResponseError | None
