"""The group and offset APIs over the Kafka protocol, handler by handler.

The handlers get kio request objects of the version under test and a context whose group
coordinator is the real :class:`GroupCoordinator` (its offsets partition a real partition log in
a temp dir, owned by this broker); only the cluster metadata it asks for the coordinator's
address is a small stand-in. Answers are checked by kio field name, as the listener's response
builder reads them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import struct
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.delete_groups.v2 import request as delete_groups_v2
from kio.schema.describe_groups.v5 import request as describe_groups_v5
from kio.schema.find_coordinator.v3 import request as find_coordinator_v3
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.heartbeat.v4 import request as heartbeat_v4
from kio.schema.join_group.v3 import request as join_group_v3
from kio.schema.join_group.v9 import request as join_group_v9
from kio.schema.leave_group.v0 import request as leave_group_v0
from kio.schema.leave_group.v5 import request as leave_group_v5
from kio.schema.list_groups.v4 import request as list_groups_v4
from kio.schema.offset_commit.v8 import request as offset_commit_v8
from kio.schema.offset_delete.v0 import request as offset_delete_v0
from kio.schema.offset_fetch.v1 import request as offset_fetch_v1
from kio.schema.offset_fetch.v7 import request as offset_fetch_v7
from kio.schema.offset_fetch.v8 import request as offset_fetch_v8
from kio.schema.sync_group.v5 import request as sync_group_v5

from kafkalite.broker.group_coordinator import GroupCoordinator, subscribed_topics
from kafkalite.broker.group_offsets import OFFSETS_TOPIC
from kafkalite.broker.kafka import codec, groups
from kafkalite.broker.kafka.context import KafkaRequestContext
from kafkalite.config import BrokerConfig
from kafkalite.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    NotCoordinatorError,
    UnknownMemberIdError,
)
from tests.unit.test_group_membership import TmpDirOffsetLog

GROUP = "orders"
SESSION = datetime.timedelta(seconds=10)


def consumer_metadata(*topics: str) -> bytes:
    """Kafka's ConsumerProtocolSubscription v0: version, topics, user data."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)


class Cluster:
    """The cluster metadata the coordinator reads: one broker, an offsets topic of one partition."""

    def __init__(self) -> None:
        self.topics = {OFFSETS_TOPIC: SimpleNamespace(partitions={0: object()})}
        self.brokers = {1: object()}

    def partition(self, topic: str, number: int) -> Any:
        return SimpleNamespace(leader=1)

    def endpoint(self, broker_id: int) -> Any:
        return SimpleNamespace(broker_id=broker_id, host="broker1.example", port=9092)


def context(coordinator: GroupCoordinator, version: int, api_key: int = 0) -> KafkaRequestContext:
    services: Any = SimpleNamespace(groups=coordinator, metadata=SimpleNamespace(cache=SimpleNamespace(brokers={})))
    return KafkaRequestContext(services, api_key, version, 7, "kafka-python-3.0", "127.0.0.1")


async def call(handler: Any, coordinator: GroupCoordinator, version: int, request: Any) -> Any:
    """The handler's answer to ``request`` of ``version``; the answer must also build into the
    kio response of that version and encode, as the listener does with it."""
    api = next(item for item in groups.HANDLERS if item.handle is handler)
    assert api.min_version <= version <= api.max_version
    answer = await handler(context(coordinator, version, api.api_key), request)
    codec.encode_response(api.api_key, version, 1, codec.build_response(api.api_key, version, answer))
    return answer


def run(scenario: Callable[[GroupCoordinator], Coroutine[Any, Any, None]], directory: Path) -> None:
    async def main() -> None:
        config = dataclasses.replace(BrokerConfig(), group_initial_rebalance_delay_ms=0,
                                     group_min_session_timeout_ms=1000)
        coordinator = GroupCoordinator(config, Cluster(), None, TmpDirOffsetLog(directory),  # type: ignore[arg-type]
                                       lambda: int(time.time() * 1000))
        coordinator.owned.add(0)
        await scenario(coordinator)

    asyncio.run(main())


def join_v9(member_id: str = "", metadata: bytes = b"") -> Any:
    return join_group_v9.JoinGroupRequest(
        group_id=GROUP, session_timeout=SESSION, rebalance_timeout=SESSION, member_id=member_id,
        group_instance_id=None, protocol_type="consumer",
        protocols=(join_group_v9.JoinGroupRequestProtocol(name="range", metadata=metadata),), reason=None)


async def stable_member(coordinator: GroupCoordinator, metadata: bytes, assignment: bytes,
                        answers: list[Any] | None = None) -> tuple[str, int]:
    """One member joined (v9, through MEMBER_ID_REQUIRED) and synced: its id and generation (the
    two JoinGroup answers appended to ``answers``)."""
    first = await call(groups.join_group, coordinator, 9, join_v9(metadata=metadata))
    assert first["error_code"] == MemberIdRequiredError.errno and first["member_id"]
    joined = await call(groups.join_group, coordinator, 9, join_v9(first["member_id"], metadata))
    assert joined["error_code"] == 0
    if answers is not None:
        answers.extend([first, joined])
    member_id, generation = joined["member_id"], joined["generation_id"]
    synced = await call(groups.sync_group, coordinator, 5, sync_group_v5.SyncGroupRequest(
        group_id=GROUP, generation_id=generation, member_id=member_id, group_instance_id=None,
        protocol_type="consumer", protocol_name="range",
        assignments=(sync_group_v5.SyncGroupRequestAssignment(member_id=member_id, assignment=assignment),)))
    assert synced == {"error_code": 0, "assignment": assignment, "protocol_type": "consumer",
                      "protocol_name": "range"}
    return member_id, generation


def test_find_coordinator_one_key_and_batched_keys(tmp_path: Path) -> None:
    async def scenario(coordinator: GroupCoordinator) -> None:
        one = await call(groups.find_coordinator, coordinator, 3,
                                            find_coordinator_v3.FindCoordinatorRequest(key=GROUP, key_type=0))
        assert one == {"key": GROUP, "error_code": 0, "error_message": None, "node_id": 1,
                       "host": "broker1.example", "port": 9092}
        batched = await call(groups.find_coordinator, coordinator, 4, find_coordinator_v4.FindCoordinatorRequest(
            key_type=0, coordinator_keys=(GROUP, "", "billing")))
        coordinators = batched["coordinators"]
        assert [(item["key"], item["error_code"], item["node_id"]) for item in coordinators] == [
            (GROUP, 0, 1), ("", 24, -1), ("billing", 0, 1)]  # 24: INVALID_GROUP_ID

    run(scenario, tmp_path)


def test_join_sync_heartbeat_pass_member_bytes_through(tmp_path: Path) -> None:
    metadata, assignment = consumer_metadata("clicks"), b"\x00\x00kafka-assignment-bytes"

    async def scenario(coordinator: GroupCoordinator) -> None:
        answers: list[Any] = []
        member_id, _ = await stable_member(coordinator, metadata, assignment, answers)
        first, joined = answers
        assert first["error_code"] == MemberIdRequiredError.errno and first["member_id"] == member_id
        assert member_id.startswith("kafka-python-3.0-")
        assert joined["leader"] == member_id and joined["protocol_name"] == "range"
        assert joined["protocol_type"] == "consumer" and joined["generation_id"] == 1
        assert joined["members"] == [{"member_id": member_id, "group_instance_id": None, "metadata": metadata}]
        generation = coordinator.groups[GROUP].generation
        beat = await call(groups.heartbeat, coordinator, 4, heartbeat_v4.HeartbeatRequest(
            group_id=GROUP, generation_id=generation, member_id=member_id, group_instance_id=None))
        assert beat == {"error_code": 0}
        stranger = await call(groups.heartbeat, coordinator, 4, heartbeat_v4.HeartbeatRequest(
            group_id=GROUP, generation_id=generation, member_id="nobody", group_instance_id=None))
        assert stranger == {"error_code": UnknownMemberIdError.errno}
        described = await call(groups.describe_groups, coordinator, 5, describe_groups_v5.DescribeGroupsRequest(
            groups=(GROUP, "nothing-here"), include_authorized_operations=False))
        group, missing = described["groups"]
        assert (group["error_code"], group["group_state"], group["protocol_type"], group["protocol_data"]) == (
            0, "Stable", "consumer", "range")
        assert group["members"][0]["member_metadata"] == metadata
        assert group["members"][0]["member_assignment"] == assignment
        assert group["members"][0]["client_host"] == "127.0.0.1"
        assert (missing["error_code"], missing["group_state"], missing["members"]) == (0, "Dead", [])

    run(scenario, tmp_path)


def test_join_before_v4_never_answers_member_id_required(tmp_path: Path) -> None:
    async def scenario(coordinator: GroupCoordinator) -> None:
        answer = await call(groups.join_group, coordinator, 3, join_group_v3.JoinGroupRequest(
            group_id=GROUP, session_timeout=SESSION, rebalance_timeout=SESSION, member_id="",
            protocol_type="consumer",
            protocols=(join_group_v3.JoinGroupRequestProtocol(name="range", metadata=b"m"),)))
        assert answer["error_code"] == 0
        assert answer["member_id"] and answer["leader"] == answer["member_id"]
        assert answer["generation_id"] == 1

    run(scenario, tmp_path)


def test_join_a_group_this_broker_does_not_coordinate(tmp_path: Path) -> None:
    async def scenario(coordinator: GroupCoordinator) -> None:
        coordinator.owned.clear()
        answer = await call(groups.join_group, coordinator, 9, join_v9())
        assert answer["error_code"] == NotCoordinatorError.errno
        assert answer["generation_id"] == -1 and answer["members"] == []

    run(scenario, tmp_path)


def test_commit_then_fetch_single_and_batched_groups(tmp_path: Path) -> None:
    async def scenario(coordinator: GroupCoordinator) -> None:
        member_id, generation = await stable_member(coordinator, consumer_metadata("clicks"), b"a")
        committed = await call(groups.offset_commit, coordinator, 8, offset_commit_v8.OffsetCommitRequest(
            group_id=GROUP, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
            topics=(offset_commit_v8.OffsetCommitRequestTopic(name="clicks", partitions=(
                offset_commit_v8.OffsetCommitRequestPartition(partition_index=0, committed_offset=42,
                                                              committed_leader_epoch=3, committed_metadata="m0"),
                offset_commit_v8.OffsetCommitRequestPartition(partition_index=1, committed_offset=7,
                                                              committed_leader_epoch=-1, committed_metadata=None))),)))
        assert committed == {"topics": [{"name": "clicks", "partitions": [
            {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 0}]}]}
        stale = await call(groups.offset_commit, coordinator, 8, offset_commit_v8.OffsetCommitRequest(
            group_id=GROUP, generation_id_or_member_epoch=generation, member_id="nobody", group_instance_id=None,
            topics=(offset_commit_v8.OffsetCommitRequestTopic(name="clicks", partitions=(
                offset_commit_v8.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                              committed_leader_epoch=-1, committed_metadata=""),)),)))
        assert stale["topics"][0]["partitions"][0]["error_code"] == UnknownMemberIdError.errno

        every = await call(groups.offset_fetch, coordinator, 7, offset_fetch_v7.OffsetFetchRequest(
            group_id=GROUP, topics=None, require_stable=True))
        assert every["error_code"] == 0
        assert every["topics"] == [{"name": "clicks", "partitions": [
            {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": 3, "metadata": "m0",
             "error_code": 0},
            {"partition_index": 1, "committed_offset": 7, "committed_leader_epoch": -1, "metadata": "",
             "error_code": 0}]}]
        batched = await call(groups.offset_fetch, coordinator, 8, offset_fetch_v8.OffsetFetchRequest(
            groups=(offset_fetch_v8.OffsetFetchRequestGroup(group_id=GROUP, topics=(
                        offset_fetch_v8.OffsetFetchRequestTopics(name="clicks", partition_indexes=(1, 5)),)),
                    offset_fetch_v8.OffsetFetchRequestGroup(group_id="other", topics=None)),
            require_stable=False))
        mine, other = batched["groups"]
        assert [(item["partition_index"], item["committed_offset"]) for item in mine["topics"][0]["partitions"]] \
            == [(1, 7), (5, -1)]
        assert other == {"group_id": "other", "error_code": 0, "topics": []}

        coordinator.owned.clear()
        moved = await call(groups.offset_fetch, coordinator, 1, offset_fetch_v1.OffsetFetchRequest(
            group_id=GROUP, topics=(offset_fetch_v1.OffsetFetchRequestTopic(name="clicks", partition_indexes=(0,)),)))
        # v1 has no group error: the requested partitions carry it
        assert moved["topics"][0]["partitions"][0]["error_code"] == NotCoordinatorError.errno

    run(scenario, tmp_path)


def test_leave_list_delete_and_offset_delete(tmp_path: Path) -> None:
    async def scenario(coordinator: GroupCoordinator) -> None:
        member_id, generation = await stable_member(coordinator, consumer_metadata("clicks"), b"a")
        await call(groups.offset_commit, coordinator, 8, offset_commit_v8.OffsetCommitRequest(
            group_id=GROUP, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
            topics=tuple(offset_commit_v8.OffsetCommitRequestTopic(name=topic, partitions=(
                offset_commit_v8.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                              committed_leader_epoch=-1, committed_metadata=""),))
                for topic in ("clicks", "views"))))
        delete_request = offset_delete_v0.OffsetDeleteRequest(group_id=GROUP, topics=tuple(
            offset_delete_v0.OffsetDeleteRequestTopic(
                name=topic, partitions=(offset_delete_v0.OffsetDeleteRequestPartition(partition_index=0),))
            for topic in ("clicks", "views")))
        deleted = await call(groups.offset_delete, coordinator, 0, delete_request)
        assert deleted == {"error_code": 0, "topics": [
            {"name": "clicks", "partitions": [{"partition_index": 0,
                                               "error_code": GroupSubscribedToTopicError.errno}]},
            {"name": "views", "partitions": [{"partition_index": 0, "error_code": 0}]}]}
        assert set(coordinator.groups[GROUP].offsets) == {("clicks", 0)}

        listed = await call(groups.list_groups, coordinator, 4,
                                          list_groups_v4.ListGroupsRequest(states_filter=("Stable",)))
        assert listed == {"error_code": 0, "groups": [{"group_id": GROUP, "protocol_type": "consumer",
                                                       "group_state": "Stable"}]}
        none = await call(groups.list_groups, coordinator, 4, list_groups_v4.ListGroupsRequest(
            states_filter=("Empty",)))
        assert none["groups"] == []
        busy = await call(groups.delete_groups, coordinator, 2, delete_groups_v2.DeleteGroupsRequest(
            groups_names=(GROUP, "unknown")))
        assert busy == {"results": [{"group_id": GROUP, "error_code": NonEmptyGroupError.errno},
                                    {"group_id": "unknown", "error_code": GroupIdNotFoundError.errno}]}

        left = await call(groups.leave_group, coordinator, 5, leave_group_v5.LeaveGroupRequest(
            group_id=GROUP, members=(leave_group_v5.MemberIdentity(member_id=member_id, group_instance_id=None,
                                                                   reason="shutting down"),
                                     leave_group_v5.MemberIdentity(member_id="ghost", group_instance_id=None,
                                                                   reason=None))))
        assert left == {"error_code": 0, "members": [
            {"member_id": member_id, "group_instance_id": None, "error_code": 0},
            {"member_id": "ghost", "group_instance_id": None, "error_code": UnknownMemberIdError.errno}]}
        again = await call(groups.leave_group, coordinator, 0, leave_group_v0.LeaveGroupRequest(
            group_id=GROUP, member_id=member_id))
        assert again == {"error_code": UnknownMemberIdError.errno}

        now_empty = await call(groups.offset_delete, coordinator, 0, delete_request)
        assert [topic["partitions"][0]["error_code"] for topic in now_empty["topics"]] == [0, 0]
        assert coordinator.groups[GROUP].offsets == {}
        gone = await call(groups.delete_groups, coordinator, 2, delete_groups_v2.DeleteGroupsRequest(
            groups_names=(GROUP,)))
        assert gone == {"results": [{"group_id": GROUP, "error_code": 0}]}
        missing = await call(groups.offset_delete, coordinator, 0, delete_request)
        assert missing == {"error_code": GroupIdNotFoundError.errno, "topics": []}

    run(scenario, tmp_path)


@pytest.mark.parametrize(("metadata", "expected"), [
    (consumer_metadata("a", "bb"), ["a", "bb"]),
    (consumer_metadata(), []),
    (b'{"topics":["a"]}', None),
    (b"\x00\x00\x00\x00\x00\x02\x00\x05ab", None),
    (b"", None),
])
def test_subscribed_topics_reads_kafka_consumer_metadata_only(metadata: bytes, expected: list[str] | None) -> None:
    assert subscribed_topics(metadata) == expected
