"""The HTTP front end's JSON codec: request bodies into the services' typed requests, typed
answers into the documented JSON bodies (docs/openapi.yaml).

Decoders type-check every field with :func:`kafkalite.protocol.require` and friends, so bad
input is INVALID_REQUEST (or the field's own Kafka error) before any service runs; an item of a
batch request that fails to decode becomes a :class:`~kafkalite.broker.services.Rejected`
answered in its place. Encoders write a success as ``error_code`` 0 and an error as Kafka's
code, name and message (:func:`kafkalite.protocol.error_body`). No aiohttp here: the handlers in
:mod:`kafkalite.broker.http` read the body, call a decoder, a service and an encoder.

Concurrency: pure functions, safe anywhere.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from kafkalite import protocol
from kafkalite.broker.admin import NewTopic, check_partition_count
from kafkalite.broker.group_api import (
    CommitPartition,
    FindCoordinatorAnswer,
    FindCoordinatorRequest,
    GroupDescription,
    GroupOutcome,
    HeartbeatRequest,
    JoinGroupAnswer,
    JoinGroupRequest,
    LeaveGroupAnswer,
    LeaveGroupRequest,
    LeavingMember,
    ListGroupsAnswer,
    OffsetCommitAnswer,
    OffsetCommitRequest,
    OffsetFetchAnswer,
    OffsetFetchRequest,
    SyncGroupAnswer,
    SyncGroupRequest,
)
from kafkalite.broker.services import (
    BrokerHealth,
    ConfigChange,
    ConfigResource,
    DeleteRecordsAnswer,
    DeleteRecordsQuery,
    EpochAnswer,
    EpochQuery,
    FetchedRecords,
    ItemOutcome,
    NewPartitions,
    OffsetAnswer,
    OffsetQuery,
    ProducedRecord,
    RecordToProduce,
    Rejected,
    TxnMarkerRequest,
    TxnMarkerResult,
    as_response_error,
)
from kafkalite.errors import BrokerResponseError, InvalidReplicaAssignmentError, InvalidRequestError, KafkaliteError

Json = dict[str, Any]


def ok(**fields: Any) -> Json:
    return {"error_code": 0, "error": None, **fields}


def error(problem: BrokerResponseError, **fields: Any) -> Json:
    return {**protocol.error_body(problem), **fields}


def outcome(problem: BrokerResponseError | None) -> Json:
    """A per-item result: ``error_code`` 0, or the error's code, name and message."""
    return protocol.error_body(problem) if problem is not None else {"error_code": 0}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: Any, what: str) -> bytes:
    if value in (None, ""):
        return b""
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        raise InvalidRequestError(f"{what} is not valid base64") from None


# -- metadata, offsets, producer ids ------------------------------------------------------------
def encode_health(health: BrokerHealth) -> Json:
    return {"status": "ok", "broker_id": health.broker_id, "controller_id": health.controller_id,
            "is_controller": health.is_controller, "cluster_id": health.cluster_id,
            "offline_log_dirs": [{"path": path, "reason": reason} for path, reason in health.offline_log_dirs]}


def decode_offset_queries(body: Json) -> list[OffsetQuery]:
    return [OffsetQuery(protocol.require(item, "topic", str), protocol.require(item, "partition", int),
                        protocol.require(item, "timestamp", int, protocol.LATEST_TIMESTAMP),
                        protocol.require(item, "current_leader_epoch", int, -1))
            for item in protocol.require_objects(body, "partitions")]


def encode_offset_answers(answers: list[OffsetAnswer]) -> Json:
    return {"partitions": [{"topic": item.topic, "partition": item.partition, "offset": item.offset,
                            "timestamp": item.timestamp, **outcome(item.error),
                            **({"leader_epoch": item.leader_epoch} if item.error is None else {})}
                           for item in answers]}


def decode_epoch_queries(body: Json) -> list[EpochQuery]:
    return [EpochQuery(protocol.require(item, "topic", str), protocol.require(item, "partition", int),
                       protocol.require(item, "leader_epoch", int))
            for item in protocol.require_objects(body, "partitions")]


def encode_epoch_answers(answers: list[EpochAnswer]) -> Json:
    return {"partitions": [{"topic": item.topic, "partition": item.partition, "leader_epoch": item.leader_epoch,
                            "end_offset": item.end_offset, **outcome(item.error)} for item in answers]}


def decode_delete_records(body: Json, default_timeout_ms: int) -> tuple[list[DeleteRecordsQuery], int]:
    """The partitions of a DeleteRecords (offset -1: the high watermark) and its timeout."""
    timeout_ms = protocol.require(body, "timeout_ms", int, default_timeout_ms, minimum=0, maximum=protocol.INT32_MAX)
    return [DeleteRecordsQuery(protocol.require(item, "topic", str),
                               protocol.require(item, "partition", int, minimum=0, maximum=protocol.INT32_MAX),
                               protocol.require(item, "offset", int))
            for item in protocol.require_objects(body, "partitions")], timeout_ms


def encode_delete_records(answers: list[DeleteRecordsAnswer]) -> Json:
    return {"partitions": [{"topic": item.topic, "partition": item.partition, "low_watermark": item.low_watermark,
                            **outcome(item.error)} for item in answers]}


def decode_txn_markers(body: Json, default_timeout_ms: int) -> tuple[list[TxnMarkerRequest], int]:
    """The markers of a WriteTxnMarkers and its timeout."""
    timeout_ms = protocol.require(body, "timeout_ms", int, default_timeout_ms, minimum=0, maximum=protocol.INT32_MAX)
    markers = []
    for item in protocol.require_objects(body, "markers"):
        partitions = [(protocol.require(entry, "topic", str),
                       protocol.require(entry, "partition", int, minimum=0, maximum=protocol.INT32_MAX))
                      for entry in protocol.require_objects(item, "partitions")]
        markers.append(TxnMarkerRequest(
            protocol.require(item, "producer_id", int, minimum=0),
            protocol.require(item, "producer_epoch", int, minimum=0, maximum=32767),
            protocol.require(item, "committed", bool),
            protocol.require(item, "coordinator_epoch", int, minimum=0, maximum=protocol.INT32_MAX),
            partitions))
    return markers, timeout_ms


def encode_txn_markers(markers: list[TxnMarkerRequest], results: list[TxnMarkerResult]) -> Json:
    """Per marker, per partition in the order asked: ``error_code`` (0: written and replicated)."""
    answers = []
    for marker, result in zip(markers, results):
        partitions = []
        for topic, number in marker.partitions:
            code = result.errors.get((topic, number), 0)
            partitions.append({"topic": topic, "partition": number,
                               **outcome(protocol.error_for(code) if code else None)})
        answers.append({"producer_id": result.producer_id, "partitions": partitions})
    return {"markers": answers}


# -- admin --------------------------------------------------------------------------------------
def parse_new_topic(body: Json) -> NewTopic:
    """A create_topics item, type-checked field by field (INVALID_REQUEST on a wrong type)."""
    name = protocol.require(body, "name", str)
    assignment_body = protocol.require(body, "replica_assignment", dict, None)
    replica_assignment = None
    if assignment_body:
        replica_assignment = {}
        for partition, brokers in assignment_body.items():
            if not isinstance(partition, str) or not partition.isascii() or not partition.isdigit() \
                    or len(partition) > 10:
                raise InvalidReplicaAssignmentError(f"replica assignment keys are partition numbers, got {partition!r}")
            replica_assignment[int(partition)] = protocol.require_list_of({"brokers": brokers}, "brokers", int)
        check_partition_count(len(replica_assignment))
    configs = protocol.require(body, "configs", dict, {})
    partitions = protocol.require(body, "num_partitions", int, -1)
    factor = protocol.require(body, "replication_factor", int, -1)
    return NewTopic(name, partitions, factor, replica_assignment, {str(k): str(v) for k, v in configs.items()})


def _rejected(name: str, exc: KafkaliteError) -> Rejected:
    return Rejected(name, as_response_error(exc))


def decode_new_topics(body: Json) -> list[NewTopic | Rejected]:
    topics: list[NewTopic | Rejected] = []
    for item in protocol.require_objects(body, "topics"):
        try:
            topics.append(parse_new_topic(item))
        except KafkaliteError as exc:
            topics.append(_rejected(str(item.get("name", "")), exc))
    return topics


def _assignment_json(assignment: dict[int, list[int]]) -> dict[str, list[int]]:
    return {str(key): value for key, value in assignment.items()}


def encode_created_topics(answers: list[ItemOutcome[dict[int, list[int]]]]) -> Json:
    topics = []
    for answer in answers:
        if answer.error is not None or answer.result is None:
            topics.append({"name": answer.name, **outcome(answer.error)})
        else:
            topics.append({"name": answer.name, "error_code": 0, "num_partitions": len(answer.result),
                           "replication_factor": len(next(iter(answer.result.values()))),
                           "assignment": _assignment_json(answer.result)})
    return {"topics": topics}


def encode_deleted_topics(answers: list[ItemOutcome[None]]) -> Json:
    return {"topics": [{"name": answer.name, **outcome(answer.error)} for answer in answers]}


def decode_new_partitions(body: Json) -> list[NewPartitions | Rejected]:
    items: list[NewPartitions | Rejected] = []
    for item in protocol.require_objects(body, "topics"):
        try:
            name = protocol.require(item, "name", str)
            count = protocol.require(item, "count", int)
            assignment = protocol.require_list_of(item, "assignment", list, None)
            for replicas in assignment or []:
                protocol.require_list_of({"assignment": replicas}, "assignment", int)
            items.append(NewPartitions(name, count, assignment))
        except KafkaliteError as exc:
            items.append(_rejected(str(item.get("name", "")), exc))
    return items


def encode_created_partitions(answers: list[ItemOutcome[dict[int, list[int]]]]) -> Json:
    return {"topics": [{"name": answer.name, **outcome(answer.error),
                        **({"assignment": _assignment_json(answer.result)} if answer.result is not None else {})}
                       for answer in answers]}


def decode_config_resources(body: Json) -> list[ConfigResource]:
    return [ConfigResource(str(item.get("type", "")), str(item.get("name", "")))
            for item in protocol.require_objects(body, "resources")]


def encode_described_configs(resources: list[ConfigResource], answers: list[ItemOutcome[list[Json]]]) -> Json:
    return {"resources": [{"type": resource.type, "name": resource.name, **outcome(answer.error),
                           "configs": answer.result if answer.result is not None else []}
                          for resource, answer in zip(resources, answers, strict=True)]}


def decode_config_changes(body: Json) -> tuple[list[ConfigResource], list[ConfigChange | Rejected]]:
    resources: list[ConfigResource] = []
    changes: list[ConfigChange | Rejected] = []
    for item in protocol.require_objects(body, "resources"):
        resource = ConfigResource(str(item.get("type", "")), str(item.get("name", "")))
        resources.append(resource)
        try:
            set_configs = protocol.require(item, "set", dict, {})
            delete_configs = protocol.require_list_of(item, "delete", str, [])
            changes.append(ConfigChange(resource.type, resource.name,
                                        {str(k): str(v) for k, v in set_configs.items()},
                                        [str(k) for k in delete_configs]))
        except KafkaliteError as exc:
            changes.append(_rejected(resource.name, exc))
    return resources, changes


def encode_altered_configs(resources: list[ConfigResource], answers: list[ItemOutcome[None]]) -> Json:
    return {"resources": [{"type": resource.type, "name": resource.name, **outcome(answer.error)}
                          for resource, answer in zip(resources, answers, strict=True)]}


def decode_election(body: Json) -> list[tuple[str, int]] | None:
    """The partitions of a preferred election (None: all); only ``preferred`` is supported."""
    election_type = protocol.require(body, "election_type", str, "preferred")
    if election_type != "preferred":
        raise InvalidRequestError("only preferred leader election is supported")
    items = protocol.require_objects(body, "partitions", None)
    return None if items is None else [(protocol.require(item, "topic", str), protocol.require(item, "partition", int))
                                       for item in items]


def encode_election(outcome_by_partition: dict[tuple[str, int], str]) -> Json:
    return {"partitions": [{"topic": topic, "partition": number, "result": result}
                           for (topic, number), result in sorted(outcome_by_partition.items())]}


def decode_reassignments(body: Json) -> dict[tuple[str, int], list[int]]:
    targets: dict[tuple[str, int], list[int]] = {}
    for item in protocol.require_objects(body, "partitions"):
        replicas = protocol.require_list_of(item, "replicas", int, None)
        if replicas is None:
            raise InvalidRequestError("cancelling a reassignment is not supported; give target replicas")
        targets[(protocol.require(item, "topic", str), protocol.require(item, "partition", int))] = replicas
    return targets


def encode_reassignments(results: dict[tuple[str, int], BrokerResponseError | None]) -> Json:
    return {"partitions": [{"topic": topic, "partition": partition, **outcome(problem)}
                           for (topic, partition), problem in results.items()]}


# -- records ------------------------------------------------------------------------------------
def _payload(record: Json, name: str, index: int) -> bytes | None:
    encoded = protocol.require(record, f"{name}_b64", str, None)
    if encoded is not None:
        try:
            return base64.b64decode(encoded, validate=True)
        except ValueError:
            raise InvalidRequestError(f"record {index}: {name}_b64 is not valid base64") from None
    value = record.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    return protocol.dumps(value)


def _headers(record: Json, index: int) -> list[tuple[str, bytes | None]]:
    """A record's headers: an ordered array of ``[key, value]`` pairs (keys may repeat), or the
    older object shape ``{key: value}``; values are strings or null."""
    headers = record.get("headers")
    if headers is None:
        return []
    if isinstance(headers, dict):
        pairs: list[Any] = list(headers.items())
    elif isinstance(headers, list):
        pairs = headers
    else:
        raise InvalidRequestError(f"record {index}: headers must be an array of [key, value] pairs")
    decoded: list[tuple[str, bytes | None]] = []
    for position, pair in enumerate(pairs):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise InvalidRequestError(f"record {index}: header {position} must be a [key, value] pair")
        key, value = pair
        if not isinstance(key, str) or not (value is None or isinstance(value, str)):
            raise InvalidRequestError(f"record {index}: header {position} needs a string key and a string "
                                      f"or null value")
        decoded.append((key, None if value is None else value.encode("utf-8")))
    return decoded


def decode_records(body: Json) -> tuple[list[RecordToProduce], int]:
    """The records and acks of a JSON produce."""
    records = protocol.require_objects(body, "records")
    acks = protocol.parse_acks(body.get("acks", "all"))
    return [RecordToProduce(_payload(record, "key", index), _payload(record, "value", index),
                            protocol.require(record, "partition", int, None), _headers(record, index))
            for index, record in enumerate(records)], acks


def encode_produced(answers: list[ProducedRecord]) -> Json:
    offsets: list[Json] = []
    for answer in answers:
        if answer.error is not None:
            offsets.append({"partition": answer.partition, "offset": -1, "error_code": answer.error.errno,
                            "error": answer.error.message, "message": answer.error_message})
        else:
            offsets.append({"partition": answer.partition, "offset": answer.offset, "error_code": 0})
    return {"offsets": offsets}


def render_headers(headers: Sequence[tuple[str, bytes | None]]) -> list[list[str | None]]:
    """Headers for JSON: ``[key, value]`` pairs in record order (duplicate keys kept); values are
    text (bytes that are not UTF-8 are decoded with replacement characters)."""
    return [[key, None if value is None else value.decode("utf-8", "replace")] for key, value in headers]


def render_payload(data: bytes | None, name: str) -> Json:
    """A key or value for JSON: text when UTF-8, else base64 under ``<name>_b64``."""
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.b64encode(data).decode("ascii")}


def encode_fetched(fetched: FetchedRecords) -> Json:
    records = []
    for record in fetched.records:
        entry: Json = {"offset": record.offset, "timestamp": record.timestamp, "partition": fetched.partition}
        entry.update(render_payload(record.key, "key"))
        entry.update(render_payload(record.value, "value"))
        entry["headers"] = render_headers(record.headers)
        records.append(entry)
    return {"topic": fetched.topic, "partition": fetched.partition, "records": records,
            "next_offset": fetched.next_offset, "high_watermark": fetched.high_watermark,
            "log_start_offset": fetched.log_start_offset}


# -- groups -------------------------------------------------------------------------------------
def decode_find_coordinator(body: Json) -> FindCoordinatorRequest:
    return FindCoordinatorRequest(protocol.require(body, "key", str), protocol.require(body, "key_type", int, 0))


def encode_find_coordinator(answer: FindCoordinatorAnswer) -> Json:
    if answer.error is not None:
        return error(answer.error, node_id=-1, host="", port=-1)
    return ok(node_id=answer.node_id, host=answer.host, port=answer.port, partition=answer.partition)


def decode_join_group(body: Json, client_host: str) -> JoinGroupRequest:
    group_id = protocol.require(body, "group_id", str)
    member_id = protocol.require(body, "member_id", str, "")
    instance_id = protocol.require(body, "group_instance_id", str, None)
    session_timeout = protocol.require(body, "session_timeout_ms", int, maximum=protocol.INT32_MAX)
    rebalance_timeout = protocol.require(body, "rebalance_timeout_ms", int, session_timeout, minimum=0,
                                         maximum=protocol.INT32_MAX)
    protocol_type = protocol.require(body, "protocol_type", str, "consumer")
    client_id = protocol.require(body, "client_id", str, "")
    protocols = []
    for item in protocol.require(body, "protocols", list):
        if not isinstance(item, dict):
            raise InvalidRequestError("each protocol must be an object")
        protocols.append((protocol.require(item, "name", str), _unb64(item.get("metadata"), "protocol metadata")))
    if not protocols:
        raise InvalidRequestError("JoinGroup needs at least one protocol")
    return JoinGroupRequest(group_id, member_id, instance_id, session_timeout, rebalance_timeout, protocol_type,
                            protocols, client_id, client_host)


def encode_join_group(answer: JoinGroupAnswer) -> Json:
    if answer.error is not None:
        return error(answer.error, **({"member_id": answer.member_id} if answer.member_id is not None else {}))
    return ok(generation_id=answer.generation_id, protocol_type=answer.protocol_type,
              protocol_name=answer.protocol_name, leader=answer.leader, member_id=answer.member_id,
              members=[{"member_id": member.member_id, "group_instance_id": member.group_instance_id,
                        "metadata": _b64(member.metadata)} for member in answer.members])


def decode_sync_group(body: Json) -> SyncGroupRequest:
    request = SyncGroupRequest(protocol.require(body, "group_id", str), protocol.require(body, "generation_id", int),
                               protocol.require(body, "member_id", str), protocol.require(body, "protocol_type", str,
                                                                                          None),
                               protocol.require(body, "protocol_name", str, None))
    for item in protocol.require(body, "assignments", list, []):
        if not isinstance(item, dict):
            raise InvalidRequestError("each assignment must be an object")
        request.assignments[protocol.require(item, "member_id", str)] = _unb64(item.get("assignment"), "assignment")
    return request


def encode_sync_group(answer: SyncGroupAnswer) -> Json:
    if answer.error is not None:
        return error(answer.error, **({"member_id": answer.member_id} if answer.member_id is not None else {}))
    return ok(assignment=_b64(answer.assignment), protocol_type=answer.protocol_type,
              protocol_name=answer.protocol_name)


def decode_heartbeat(body: Json) -> HeartbeatRequest:
    return HeartbeatRequest(protocol.require(body, "group_id", str), protocol.require(body, "generation_id", int),
                            protocol.require(body, "member_id", str),
                            protocol.require(body, "group_instance_id", str, None))


def decode_leave_group(body: Json) -> LeaveGroupRequest:
    group_id = protocol.require(body, "group_id", str)
    members_body = protocol.require(body, "members", list, None)
    if members_body is None:
        members_body = [{"member_id": protocol.require(body, "member_id", str)}]
    members = []
    for item in members_body:
        if isinstance(item, dict):
            instance_id = item.get("group_instance_id")
            members.append(LeavingMember(str(item.get("member_id") or ""),
                                         str(instance_id) if instance_id else None, str(item.get("reason", ""))))
        else:
            members.append(LeavingMember(""))
    return LeaveGroupRequest(group_id, members)


def encode_leave_group(answer: LeaveGroupAnswer) -> Json:
    return ok(members=[{"member_id": member.member_id, **outcome(member.error)} for member in answer.members])


def decode_offset_commit(body: Json) -> OffsetCommitRequest:
    group_id = protocol.require(body, "group_id", str)
    generation = protocol.require(body, "generation_id", int, -1)
    member_id = protocol.require(body, "member_id", str, "")
    partitions = []
    for topic in protocol.require_objects(body, "topics"):
        name = protocol.require(topic, "name", str)
        for item in protocol.require_objects(topic, "partitions"):
            partitions.append(CommitPartition(
                name, protocol.require(item, "partition", int, minimum=0, maximum=protocol.INT32_MAX),
                protocol.require(item, "offset", int),
                protocol.require(item, "leader_epoch", int, -1, minimum=protocol.INT32_MIN, maximum=protocol.INT32_MAX),
                protocol.require(item, "metadata", str, "") or ""))
    return OffsetCommitRequest(group_id, generation, member_id, partitions)


def encode_offset_commit(answer: OffsetCommitAnswer) -> Json:
    by_topic: dict[str, list[Json]] = {}
    for item in answer.partitions:
        by_topic.setdefault(item.topic, []).append({"partition": item.partition, **outcome(item.error)})
    return ok(topics=[{"name": name, "partitions": entries} for name, entries in by_topic.items()])


def decode_offset_fetch(body: Json) -> OffsetFetchRequest:
    group_id = protocol.require(body, "group_id", str)
    topics = protocol.require_objects(body, "topics", None)
    return OffsetFetchRequest(group_id, None if topics is None else [
        (protocol.require(topic, "name", str), protocol.require_list_of(topic, "partitions", int, None))
        for topic in topics], protocol.require(body, "require_stable", bool, False))


def encode_offset_fetch(answer: OffsetFetchAnswer) -> Json:
    by_topic: dict[str, list[Json]] = {}
    for item in answer.partitions:
        by_topic.setdefault(item.topic, []).append({
            "partition": item.partition, **outcome(item.error), "offset": item.offset,
            "leader_epoch": item.leader_epoch, "metadata": item.metadata})
    return ok(topics=[{"name": name, "partitions": entries} for name, entries in by_topic.items()])


def decode_group_states(body: Json) -> list[str] | None:
    states: list[str] | None = protocol.require_list_of(body, "states", str, None)
    return states


def decode_group_ids(body: Json) -> list[str]:
    return [str(group_id) for group_id in protocol.require_list_of(body, "groups", str)]


def encode_list_groups(answer: ListGroupsAnswer) -> Json:
    return ok(groups=[{"group_id": group.group_id, "protocol_type": group.protocol_type, "state": group.state}
                      for group in answer.groups], loading=answer.loading)


def encode_describe_groups(answers: list[GroupDescription]) -> Json:
    groups = []
    for group in answers:
        if group.error is not None:
            groups.append({"group_id": group.group_id, **error(group.error)})
            continue
        groups.append({"error_code": 0, "group_id": group.group_id, "state": group.state,
                       "protocol_type": group.protocol_type, "protocol": group.protocol,
                       "generation_id": group.generation_id, "leader": group.leader, "members": [{
                           "member_id": member.member_id, "group_instance_id": member.group_instance_id,
                           "client_id": member.client_id, "client_host": member.client_host,
                           "metadata": _b64(member.metadata), "assignment": _b64(member.assignment),
                       } for member in group.members]})
    return ok(groups=groups)


def encode_delete_groups(answers: list[GroupOutcome]) -> Json:
    return ok(groups=[{"group_id": answer.group_id, **outcome(answer.error)} for answer in answers])
