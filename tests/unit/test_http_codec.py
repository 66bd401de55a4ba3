"""The HTTP front end's JSON codec: bodies into typed requests, typed answers into the documented
JSON shapes (the same the integration tests and docs/openapi.yaml check against a live broker)."""

from __future__ import annotations

import pytest

from kafkalite.broker import http_codec as codec
from kafkalite.broker.admin import NewTopic
from kafkalite.broker.group_api import (
    FindCoordinatorAnswer,
    JoinedMember,
    JoinGroupAnswer,
    OffsetCommitAnswer,
    PartitionOutcome,
    SyncGroupAnswer,
)
from kafkalite.broker.services import ItemOutcome, Rejected
from kafkalite.errors import (
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    MemberIdRequiredError,
    TopicAlreadyExistsError,
)


def test_join_group_decodes_protocols_and_rejects_bad_ones() -> None:
    request = codec.decode_join_group({"group_id": "g", "session_timeout_ms": 10_000, "protocols": [
        {"name": "range", "metadata": "AAE="}]}, "10.0.0.1")
    assert (request.group_id, request.member_id, request.rebalance_timeout_ms) == ("g", "", 10_000)
    assert request.protocols == [("range", b"\x00\x01")] and request.client_host == "10.0.0.1"
    with pytest.raises(InvalidRequestError):
        codec.decode_join_group({"group_id": "g", "session_timeout_ms": 10_000, "protocols": []}, "")
    with pytest.raises(InvalidRequestError):
        codec.decode_join_group({"group_id": "g", "session_timeout_ms": 10_000,
                                 "protocols": [{"name": "range", "metadata": "not base64!"}]}, "")


def test_join_group_answers_keep_their_shapes() -> None:
    required = codec.encode_join_group(JoinGroupAnswer(MemberIdRequiredError("rejoin"), "member-1"))
    assert required["error_code"] == MemberIdRequiredError.errno and required["member_id"] == "member-1"
    assert "member_id" not in codec.encode_join_group(JoinGroupAnswer(CoordinatorNotAvailableError("x")))
    joined = codec.encode_join_group(JoinGroupAnswer(None, "m", 3, "consumer", "range", "m",
                                                     [JoinedMember("m", None, b"\x01")]))
    assert joined == {"error_code": 0, "error": None, "generation_id": 3, "protocol_type": "consumer",
                      "protocol_name": "range", "leader": "m", "member_id": "m",
                      "members": [{"member_id": "m", "group_instance_id": None, "metadata": "AQ=="}]}
    assert codec.encode_sync_group(SyncGroupAnswer(None, b"\x02", "consumer", "range"))["assignment"] == "Ag=="


def test_find_coordinator_error_names_no_node() -> None:
    body = codec.encode_find_coordinator(FindCoordinatorAnswer(CoordinatorNotAvailableError("no leader")))
    assert (body["node_id"], body["host"], body["port"]) == (-1, "", -1)
    assert body["error"] == "COORDINATOR_NOT_AVAILABLE"


def test_offset_commit_answers_group_partitions_by_topic_in_request_order() -> None:
    body = codec.encode_offset_commit(OffsetCommitAnswer([
        PartitionOutcome("a", 1, None), PartitionOutcome("b", 0, IllegalGenerationError("stale")),
        PartitionOutcome("a", 0, None)]))
    assert [topic["name"] for topic in body["topics"]] == ["a", "b"]
    assert body["topics"][0]["partitions"] == [{"partition": 1, "error_code": 0}, {"partition": 0, "error_code": 0}]
    assert body["topics"][1]["partitions"][0]["error"] == "ILLEGAL_GENERATION"


def test_create_topics_rejects_one_bad_item_and_keeps_the_rest() -> None:
    topics = codec.decode_new_topics({"topics": [
        {"name": "good", "num_partitions": 2},
        {"name": "bad", "replica_assignment": {"zero": [1]}},
        {"name": "wrong-type", "num_partitions": "two"}]})
    assert topics[0] == NewTopic("good", 2, -1, None, {})
    assert isinstance(topics[1], Rejected) and isinstance(topics[1].error, InvalidReplicaAssignmentError)
    assert isinstance(topics[2], Rejected) and isinstance(topics[2].error, InvalidRequestError)
    body = codec.encode_created_topics([ItemOutcome("good", None, {0: [1, 2], 1: [2, 1]}),
                                        ItemOutcome("dup", TopicAlreadyExistsError("exists"))])
    assert body["topics"][0] == {"name": "good", "error_code": 0, "num_partitions": 2, "replication_factor": 2,
                                 "assignment": {"0": [1, 2], "1": [2, 1]}}
    assert body["topics"][1]["error"] == "TOPIC_ALREADY_EXISTS" and "assignment" not in body["topics"][1]
