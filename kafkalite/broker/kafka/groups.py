"""The group and offset APIs over the Kafka protocol: FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups and
OffsetDelete.

Each handler reads the kio request, calls the
:class:`~kafkalite.broker.group_coordinator.GroupCoordinator` with its typed request
(:mod:`kafkalite.broker.group_api`) and answers with kio field names (see
:mod:`kafkalite.broker.kafka.context`). A group is the same object whichever front end joined
it: protocol metadata and assignments pass through as the bytes the members sent, so Kafka
clients and kafkalite's clients share groups and committed offsets.

Per-version behaviour kept from Kafka: JoinGroup before v4 never answers MEMBER_ID_REQUIRED
(the broker joins the member under the id it hands out at once); FindCoordinator v4 and
OffsetFetch v8 carry several keys / groups, each answered with its own error; LeaveGroup v3+
carries several members. A named error the coordinator raises for the whole request is answered
in the response's error fields (per item where the version has no top-level error), never by
closing the connection.

Concurrency: event-loop only, like every handler; JoinGroup and SyncGroup wait for their
rebalance step.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from kafkalite.broker.group_api import (
    CommitPartition,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupAnswer,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeavingMember,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    PartitionOutcome,
    SyncGroupRequest,
)
from kafkalite.broker.kafka.context import ApiHandler, KafkaAnswer, KafkaRequestContext
from kafkalite.errors import (
    BrokerResponseError,
    CoordinatorLoadInProgressError,
    MemberIdRequiredError,
)

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP = 8, 9, 10, 11, 12, 13
SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 14, 15, 16, 42, 47

#: DescribeGroups' "authorized operations not asked for" (Kafka's Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
#: FindCoordinator's key types.
GROUP_KEY, TRANSACTION_KEY = 0, 1


def _milliseconds(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, timedelta) else int(value)


def _code(error: BrokerResponseError | None) -> int:
    return error.errno if error is not None else 0


def _by_topic(items: Iterable[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per-partition answers grouped under their topic names, in first-seen order."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition in items:
        topics.setdefault(topic, []).append(partition)
    return [{"name": name, "partitions": partitions} for name, partitions in topics.items()]


# -- FindCoordinator --------------------------------------------------------------------------------
async def _find_one(context: KafkaRequestContext, key: str, key_type: int) -> dict[str, Any]:
    error: BrokerResponseError | None
    try:
        if key_type == TRANSACTION_KEY:
            node_id, host, port = await context.services.transactions.find_coordinator(key)
            return {"key": key, "error_code": 0, "error_message": None, "node_id": node_id, "host": host,
                    "port": port}
        answer = await context.services.groups.find_coordinator(FindCoordinatorRequest(key, key_type))
        error = answer.error
    except BrokerResponseError as exc:
        error = exc
    if error is not None:
        message = str(error.args[0]) if error.args else error.description
        return {"key": key, "error_code": error.errno, "error_message": message, "node_id": -1, "host": "",
                "port": -1}
    host, port = context.advertised_address(answer.node_id) or (answer.host, answer.port)
    return {"key": key, "error_code": 0, "error_message": None, "node_id": answer.node_id, "host": host,
            "port": port}


async def find_coordinator(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """v0–v3 ask for one key; v4 for several (``coordinator_keys``), each answered on its own."""
    key_type = int(getattr(request, "key_type", GROUP_KEY))
    if context.api_version >= 4:
        return {"coordinators": [await _find_one(context, key, key_type) for key in request.coordinator_keys]}
    return await _find_one(context, request.key, key_type)


# -- membership -----------------------------------------------------------------------------------
def _join_answer(context: KafkaRequestContext, answer: JoinGroupAnswer, member_id: str) -> dict[str, Any]:
    nullable = context.api_version >= 7  # protocol type/name are nullable from v7
    return {
        "error_code": _code(answer.error),
        "generation_id": answer.generation_id,
        "protocol_type": answer.protocol_type,
        "protocol_name": answer.protocol_name if nullable else answer.protocol_name or "",
        "leader": answer.leader or "",
        "skip_assignment": False,
        "member_id": answer.member_id if answer.member_id is not None else member_id,
        "members": [{"member_id": member.member_id, "group_instance_id": member.group_instance_id,
                     "metadata": member.metadata} for member in answer.members],
    }


async def join_group(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """Join (or rejoin) a group. Before v4 a client cannot handle MEMBER_ID_REQUIRED, so the
    broker rejoins at once with the member id the coordinator handed out, as Kafka does."""
    session_timeout_ms = _milliseconds(request.session_timeout)
    rebalance_timeout_ms = _milliseconds(getattr(request, "rebalance_timeout", -1))
    typed = JoinGroupRequest(
        group_id=request.group_id, member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms >= 0 else session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=[(protocol.name, bytes(protocol.metadata)) for protocol in request.protocols],
        client_id=context.client_id or "", client_host=context.client_host)
    groups = context.services.groups
    try:
        answer = await groups.join_group(typed)
        if context.api_version < 4 and isinstance(answer.error, MemberIdRequiredError) and answer.member_id:
            typed = JoinGroupRequest(typed.group_id, answer.member_id, typed.group_instance_id,
                                     typed.session_timeout_ms, typed.rebalance_timeout_ms, typed.protocol_type,
                                     typed.protocols, typed.client_id, typed.client_host)
            answer = await groups.join_group(typed)
    except BrokerResponseError as exc:
        answer = JoinGroupAnswer(exc)
    return _join_answer(context, answer, typed.member_id)


async def sync_group(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """The leader hands in every member's assignment; each member gets its own, as sent."""
    typed = SyncGroupRequest(
        request.group_id, request.generation_id, request.member_id,
        getattr(request, "protocol_type", None), getattr(request, "protocol_name", None),
        {item.member_id: bytes(item.assignment) for item in request.assignments})
    try:
        answer = await context.services.groups.sync_group(typed)
    except BrokerResponseError as exc:
        return {"error_code": exc.errno, "assignment": b""}
    return {"error_code": _code(answer.error), "assignment": answer.assignment,
            "protocol_type": answer.protocol_type, "protocol_name": answer.protocol_name}


async def heartbeat(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    try:
        await context.services.groups.heartbeat(HeartbeatRequest(
            request.group_id, request.generation_id, request.member_id,
            getattr(request, "group_instance_id", None)))
    except BrokerResponseError as exc:
        return {"error_code": exc.errno}
    return {"error_code": 0}


async def leave_group(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """v0–v2 name one member; v3+ several, each answered with its own error."""
    batched = context.api_version >= 3
    if batched:
        members = [LeavingMember(item.member_id, item.group_instance_id, getattr(item, "reason", None) or "")
                   for item in request.members]
    else:
        members = [LeavingMember(request.member_id)]
    try:
        answer = await context.services.groups.leave_group(LeaveGroupRequest(request.group_id, members))
    except BrokerResponseError as exc:
        return {"error_code": exc.errno, "members": []}
    if not batched:
        return {"error_code": _code(answer.members[0].error if answer.members else None)}
    instance_ids = {member.member_id: member.group_instance_id for member in members}
    return {"error_code": 0, "members": [
        {"member_id": outcome.member_id, "group_instance_id": instance_ids.get(outcome.member_id),
         "error_code": _code(outcome.error)} for outcome in answer.members]}


# -- offsets --------------------------------------------------------------------------------------
def _partition_outcomes(outcomes: Iterable[PartitionOutcome]) -> list[dict[str, Any]]:
    return _by_topic((outcome.topic, {"partition_index": outcome.partition, "error_code": _code(outcome.error)})
                     for outcome in outcomes)


async def offset_commit(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """Commit offsets (a generation of -1 with an empty member id is a simple, memberless commit).
    The retention time of v2–v4 is ignored: retention is the broker's ``offsets.retention.minutes``."""
    partitions = [CommitPartition(topic.name, item.partition_index, item.committed_offset,
                                  getattr(item, "committed_leader_epoch", -1), item.committed_metadata or "")
                  for topic in request.topics for item in topic.partitions]
    typed = OffsetCommitRequest(request.group_id, request.generation_id_or_member_epoch, request.member_id,
                                partitions)
    try:
        answer = await context.services.groups.offset_commit(typed)
        outcomes = answer.partitions
    except BrokerResponseError as exc:
        outcomes = [PartitionOutcome(item.topic, item.partition, exc) for item in partitions]
    return {"topics": _partition_outcomes(outcomes)}


async def _fetch_group(context: KafkaRequestContext, group_id: str, topics: Any,
                       require_stable: bool = False) -> dict[str, Any]:
    """One group's committed offsets as an OffsetFetch group entry (``error_code`` and ``topics``).
    ``topics`` is the request's topic list (None: every committed partition)."""
    wanted: list[tuple[str, list[int] | None]] | None = None if topics is None else [
        (topic.name, list(topic.partition_indexes)) for topic in topics]
    try:
        answer = await context.services.groups.offset_fetch(OffsetFetchRequest(group_id, wanted, require_stable))
    except BrokerResponseError as exc:
        # answered in the group's error and, for v1 (which has none), in each requested partition
        return {"group_id": group_id, "error_code": exc.errno, "topics": _by_topic(
            (name, {"partition_index": number, "committed_offset": -1, "committed_leader_epoch": -1,
                    "metadata": "", "error_code": exc.errno})
            for name, numbers in wanted or [] for number in numbers or [])}
    return {"group_id": group_id, "error_code": 0, "topics": _by_topic(
        (item.topic, {"partition_index": item.partition, "committed_offset": item.offset,
                      "committed_leader_epoch": item.leader_epoch, "metadata": item.metadata,
                      "error_code": _code(item.error)})
        for item in answer.partitions)}


async def offset_fetch(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """Committed offsets of one group (v1–v7) or several (v8). With ``require_stable`` (v7+) a
    partition whose transactional commit is still pending answers UNSTABLE_OFFSET_COMMIT."""
    stable = bool(getattr(request, "require_stable", False))
    if context.api_version >= 8:
        return {"groups": [await _fetch_group(context, group.group_id, group.topics, stable)
                           for group in request.groups]}
    return await _fetch_group(context, request.group_id, request.topics, stable)


async def offset_delete(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    typed = OffsetDeleteRequest(request.group_id, [(topic.name, item.partition_index)
                                                   for topic in request.topics for item in topic.partitions])
    try:
        outcomes = await context.services.groups.offset_delete(typed)
    except BrokerResponseError as exc:
        return {"error_code": exc.errno, "topics": []}
    return {"error_code": 0, "topics": _partition_outcomes(outcomes)}


# -- admin of groups ------------------------------------------------------------------------------
async def list_groups(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """The groups this broker coordinates (v4: only those in ``states_filter``, when given).
    While an offsets partition loads, the answer says COORDINATOR_LOAD_IN_PROGRESS, as Kafka's."""
    states = list(getattr(request, "states_filter", None) or []) or None
    answer = await context.services.groups.list_groups(states)
    return {"error_code": CoordinatorLoadInProgressError.errno if answer.loading else 0,
            "groups": [{"group_id": group.group_id, "protocol_type": group.protocol_type,
                        "group_state": group.state} for group in answer.groups]}


async def describe_groups(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    descriptions = await context.services.groups.describe_groups(list(request.groups))
    return {"groups": [{
        "error_code": _code(group.error), "group_id": group.group_id, "group_state": group.state,
        "protocol_type": group.protocol_type, "protocol_data": group.protocol,
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        "members": [{"member_id": member.member_id, "group_instance_id": member.group_instance_id,
                     "client_id": member.client_id, "client_host": member.client_host,
                     "member_metadata": member.metadata, "member_assignment": member.assignment}
                    for member in group.members]} for group in descriptions]}


async def delete_groups(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    outcomes = await context.services.groups.delete_groups(list(request.groups_names))
    return {"results": [{"group_id": outcome.group_id, "error_code": _code(outcome.error)} for outcome in outcomes]}


HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(FIND_COORDINATOR, 0, 4, find_coordinator),
    ApiHandler(JOIN_GROUP, 0, 9, join_group),
    ApiHandler(SYNC_GROUP, 0, 5, sync_group),
    ApiHandler(HEARTBEAT, 0, 4, heartbeat),
    ApiHandler(LEAVE_GROUP, 0, 5, leave_group),
    ApiHandler(OFFSET_COMMIT, 2, 8, offset_commit),
    ApiHandler(OFFSET_FETCH, 1, 8, offset_fetch),
    ApiHandler(LIST_GROUPS, 0, 4, list_groups),
    ApiHandler(DESCRIBE_GROUPS, 0, 5, describe_groups),
    ApiHandler(DELETE_GROUPS, 0, 2, delete_groups),
    ApiHandler(OFFSET_DELETE, 0, 0, offset_delete),
)
