"""Unit tests of kafkalite.coord.znodes: paths, payload round trips, malformed data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, strategies as st

from kafkalite.coord import znodes
from kafkalite.coord.znodes import (
    BrokerRegistration,
    ClusterId,
    ConfigChangeNotification,
    ConfigEntity,
    ControllerEpoch,
    ControllerInfo,
    IsrChangeNotification,
    PartitionReassignment,
    PartitionRef,
    PartitionState,
    PreferredElectionRequest,
    ProducerIdBlock,
    ReassignmentRequest,
    TopicAssignment,
    ZNodePayload,
)
from kafkalite.errors import CoordinationError, InvalidTopicError

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]

SAMPLES: list[ZNodePayload] = [
    ClusterId("mAqN1f2bQ0KtDy8pV3w7Xg"),
    BrokerRegistration(host="127.0.0.1", port=9092, endpoints=["http://127.0.0.1:9092"],
                       rack="r1", timestamp_ms=1_700_000_000_123),
    BrokerRegistration(host="broker-2", port=19092, endpoints=["http://broker-2:19092"],
                       timestamp_ms=5),
    TopicAssignment(partitions={0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}, topic_id="t-uuid"),
    PartitionState(leader=2, leader_epoch=5, isr=[2, 3], controller_epoch=7),
    PartitionState(leader=-1, leader_epoch=0, isr=[1], controller_epoch=1),
    ControllerInfo(broker_id=2, timestamp_ms=1_700_000_000_000),
    ControllerEpoch(epoch=0),
    ControllerEpoch(epoch=41),
    ConfigEntity(config={"retention.ms": "86400000", "cleanup.policy": "compact"}),
    ConfigEntity(config={}),
    ConfigChangeNotification.for_topic("orders"),
    ConfigChangeNotification.for_broker(3),
    ConfigChangeNotification.for_broker(None),
    IsrChangeNotification(partitions=[PartitionRef("orders", 0), PartitionRef("orders", 3)]),
    PreferredElectionRequest(partitions=[PartitionRef("a.b-c_d", 1)]),
    ReassignmentRequest(partitions=[PartitionReassignment("orders", 0, [4, 5, 6]),
                                    PartitionReassignment("orders", 1, [5])]),
    ProducerIdBlock(broker_id=1, block_start=1000, block_end=1999),
]


@pytest.mark.parametrize("payload", SAMPLES, ids=lambda p: type(p).__name__)
def test_round_trip(payload: ZNodePayload) -> None:
    data = payload.to_bytes()
    document = json.loads(data.decode("utf-8"))
    assert document["version"] == type(payload).VERSION
    assert next(iter(document)) == "version"
    assert type(payload).from_bytes(data, "/some/path") == payload


def test_broker_registration_layout_matches_kafka() -> None:
    registration = BrokerRegistration.for_http("h1", 9092, timestamp_ms=42)
    assert json.loads(registration.to_bytes()) == {
        "version": 1, "host": "h1", "port": 9092, "endpoints": ["http://h1:9092"],
        "timestamp": 42,
    }
    with_rack = BrokerRegistration.for_http("h1", 9092, rack="east", timestamp_ms=42)
    assert json.loads(with_rack.to_bytes())["rack"] == "east"


def test_topic_assignment_uses_string_partition_keys() -> None:
    assignment = TopicAssignment(partitions={1: [2, 1], 0: [1, 2]}, topic_id="x")
    document = json.loads(assignment.to_bytes())
    assert document["partitions"] == {"0": [1, 2], "1": [2, 1]}
    assert list(assignment.partitions) == [0, 1]
    assert assignment.partition_count == 2


def test_readers_accept_kafka_string_numbers_and_extra_fields() -> None:
    kafka_broker = (b'{"version":5,"host":"h","port":9092,"endpoints":["PLAINTEXT://h:9092"],'
                    b'"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"jmx_port":-1,'
                    b'"timestamp":"1700000000000","features":{}}')
    registration = BrokerRegistration.from_bytes(kafka_broker)
    assert registration.timestamp_ms == 1_700_000_000_000
    assert registration.rack is None
    assert ClusterId.from_bytes(b'{"version":"1","id":"abc"}').cluster_id == "abc"
    block = ProducerIdBlock.from_bytes(
        b'{"version":1,"broker":3,"block_start":"2000","block_end":"2999"}')
    assert (block.block_start, block.block_end, block.size) == (2000, 2999, 1000)
    assert ControllerEpoch.from_bytes(b"7") == ControllerEpoch(7)


def test_producer_id_blocks_follow_each_other() -> None:
    first = ProducerIdBlock.first(broker_id=1)
    assert (first.block_start, first.block_end) == (0, 999)
    second = first.next_for(broker_id=2)
    assert (second.broker_id, second.block_start, second.block_end) == (2, 1000, 1999)


def test_paths() -> None:
    assert znodes.broker_path(3) == "/brokers/ids/3"
    assert znodes.topic_path("orders") == "/brokers/topics/orders"
    assert znodes.partition_state_path("orders", 2) == "/brokers/topics/orders/partitions/2/state"
    assert znodes.delete_topic_path("orders") == "/admin/delete_topics/orders"
    assert znodes.topic_config_path("orders") == "/config/topics/orders"
    assert znodes.broker_config_path(4) == "/config/brokers/4"
    assert znodes.broker_config_path(None) == "/config/brokers/<default>"
    assert znodes.config_entity_path("brokers", "<default>") == "/config/brokers/<default>"
    assert znodes.config_change_prefix_path() == "/config/changes/config_change_"
    assert znodes.isr_change_prefix_path() == "/isr_change_notification/isr_change_"
    assert ConfigChangeNotification.for_topic("t").config_path == "/config/topics/t"
    name = znodes.sequence_child_name(znodes.CONFIG_CHANGE_PREFIX, 12)
    assert name == "config_change_0000000012"
    assert znodes.sequence_number(name, znodes.CONFIG_CHANGE_PREFIX) == 12
    assert znodes.broker_id_from_child("17") == 17
    for path in znodes.PERSISTENT_PATHS:
        assert path.startswith("/") and not path.endswith("/")
    assert znodes.BROKER_IDS_PATH in znodes.PERSISTENT_PATHS


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "with space", "x" * 250, "ü"])
def test_illegal_topic_names_are_rejected(name: str) -> None:
    with pytest.raises(InvalidTopicError):
        znodes.topic_path(name)


def test_bad_path_arguments_are_rejected() -> None:
    with pytest.raises(ValueError):
        znodes.broker_path(-1)
    with pytest.raises(ValueError):
        znodes.partition_state_path("t", -1)
    with pytest.raises(ValueError):
        znodes.config_entity_path("groups", "bob")
    with pytest.raises(CoordinationError):
        znodes.sequence_number("config_change_x1", znodes.CONFIG_CHANGE_PREFIX)
    with pytest.raises(CoordinationError):
        znodes.broker_id_from_child("broker-1")


MALFORMED: list[tuple[type[ZNodePayload], bytes, str]] = [
    (PartitionState, b"", "empty"),
    (PartitionState, b"\xff\xfe", "UTF-8"),
    (PartitionState, b"{not json", "JSON"),
    (PartitionState, b"[1,2]", "JSON object"),
    (PartitionState, b'{"leader":1,"leader_epoch":0,"isr":[1],"controller_epoch":1}', "version"),
    (PartitionState, b'{"version":0,"leader":1,"leader_epoch":0,"isr":[1],"controller_epoch":1}',
     "version"),
    (PartitionState, b'{"version":true,"leader":1,"leader_epoch":0,"isr":[1],"controller_epoch":1}',
     "version"),
    (PartitionState, b'{"version":1,"leader_epoch":0,"isr":[1],"controller_epoch":1}', "leader"),
    (PartitionState, b'{"version":1,"leader":"1","leader_epoch":0,"isr":[1],"controller_epoch":1}',
     "leader"),
    (PartitionState, b'{"version":1,"leader":1,"leader_epoch":0,"isr":"1","controller_epoch":1}',
     "isr"),
    (PartitionState, b'{"version":1,"leader":1,"leader_epoch":0,"isr":[1,1],"controller_epoch":1}',
     "duplicate"),
    (PartitionState, b'{"version":1,"leader":1,"leader_epoch":-3,"isr":[1],"controller_epoch":1}',
     "leader_epoch"),
    (PartitionState,
     b'{"version":1,"version":2,"leader":1,"leader_epoch":0,"isr":[1],"controller_epoch":1}',
     "duplicate key"),
    (PartitionState, b'{"version":1,"leader":NaN,"leader_epoch":0,"isr":[1],"controller_epoch":1}',
     "JSON"),
    (TopicAssignment, b'{"version":1,"partitions":{"0":[1],"2":[1]},"topic_id":"x"}', "0..1"),
    (TopicAssignment, b'{"version":1,"partitions":{"a":[1]},"topic_id":"x"}', "partition key"),
    (TopicAssignment, b'{"version":1,"partitions":{"0":[]},"topic_id":"x"}', "empty"),
    (TopicAssignment, b'{"version":1,"partitions":{},"topic_id":"x"}', "partitions"),
    (TopicAssignment, b'{"version":1,"partitions":{"0":[1]}}', "topic_id"),
    (BrokerRegistration, b'{"version":1,"host":"h","port":70000,"endpoints":[],"timestamp":1}',
     "port"),
    (BrokerRegistration, b'{"version":1,"host":"","port":1,"endpoints":[],"timestamp":1}', "host"),
    (BrokerRegistration, b'{"version":1,"host":"h","port":1,"endpoints":"x","timestamp":1}',
     "endpoints"),
    (BrokerRegistration, b'{"version":1,"host":"h","port":1,"endpoints":[],"timestamp":"soon"}',
     "timestamp"),
    (ControllerInfo, b'{"version":1,"timestamp":1}', "brokerid"),
    (ControllerEpoch, b'{"version":1,"epoch":-1}', "epoch"),
    (ConfigEntity, b'{"version":1,"config":{"retention.ms":86400000}}', "config"),
    (ConfigChangeNotification, b'{"version":1,"entity_path":"groups/bob"}', "entity"),
    (ConfigChangeNotification, b'{"version":2,"entity_path":"users/a:b"}', "sanitized"),
    (ConfigChangeNotification, b'{"version":2,"entity_path":"users/a/topics/b"}', "entity_path"),
    (ConfigChangeNotification, b'{"version":1,"entity_path":"topics/a/b"}', "entity_path"),
    (ConfigChangeNotification, b'{"version":1,"entity_path":"topics/bad name"}', "topic"),
    (IsrChangeNotification, b'{"version":1,"partitions":[{"topic":"t"}]}', "partition"),
    (IsrChangeNotification, b'{"version":1,"partitions":[{"topic":"t","partition":0},'
                            b'{"topic":"t","partition":0}]}', "twice"),
    (PreferredElectionRequest, b'{"version":1,"partitions":{"t":0}}', "partitions"),
    (ReassignmentRequest, b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}',
     "duplicate"),
    (ProducerIdBlock, b'{"version":1,"broker":1,"block_start":2000,"block_end":1999}', "block_end"),
    (ClusterId, b'{"version":1,"id":""}', "cluster id"),
]


@pytest.mark.parametrize(("payload_type", "data", "fragment"), MALFORMED,
                         ids=[f"{t.__name__}-{i}" for i, (t, _, _) in enumerate(MALFORMED)])
def test_malformed_data_raises_coordination_error(payload_type: type[ZNodePayload], data: bytes,
                                                  fragment: str) -> None:
    path = "/brokers/topics/t/partitions/0/state"
    with pytest.raises(CoordinationError) as caught:
        payload_type.from_bytes(data, path)
    message = str(caught.value)
    assert path in message
    assert fragment.lower() in message.lower()


def test_malformed_data_without_path_names_the_payload() -> None:
    with pytest.raises(CoordinationError, match="partition state"):
        PartitionState.from_bytes(b"{}")


def test_constructors_validate() -> None:
    with pytest.raises(ValueError):
        PartitionState(leader=-2, leader_epoch=0, isr=[], controller_epoch=0)
    with pytest.raises(ValueError):
        TopicAssignment(partitions={0: [1, 1]}, topic_id="x")
    with pytest.raises(ValueError):
        BrokerRegistration(host="h", port=0, endpoints=[])
    with pytest.raises(InvalidTopicError):
        PartitionRef("bad/topic", 0)
    with pytest.raises(TypeError):
        IsrChangeNotification(partitions=[("t", 0)])  # type: ignore[list-item]


def test_payloads_are_frozen() -> None:
    state = PartitionState(leader=1, leader_epoch=0, isr=[1], controller_epoch=1)
    with pytest.raises(AttributeError):
        state.leader = 2  # type: ignore[misc]


def test_module_does_not_import_kazoo() -> None:
    probe = ("import sys, kafkalite.coord, kafkalite.coord.znodes; "
             "sys.exit(1 if 'kazoo' in sys.modules else 0)")
    completed = subprocess.run([sys.executable, "-c", probe], cwd=REPOSITORY_ROOT,
                               capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr


_ids = st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=5, unique=True)


@given(partitions=st.lists(_ids, min_size=1, max_size=20),
       topic_id=st.text(min_size=1, max_size=30))
def test_topic_assignment_round_trips(partitions: list[list[int]], topic_id: str) -> None:
    assignment = TopicAssignment(partitions=dict(enumerate(partitions)), topic_id=topic_id)
    assert TopicAssignment.from_bytes(assignment.to_bytes()) == assignment


@given(leader=st.integers(min_value=-1, max_value=2**31), epoch=st.integers(0, 2**31),
       isr=st.lists(st.integers(0, 2**31), unique=True, max_size=6),
       controller_epoch=st.integers(0, 2**31))
def test_partition_state_round_trips(leader: int, epoch: int, isr: list[int],
                                     controller_epoch: int) -> None:
    state = PartitionState(leader=leader, leader_epoch=epoch, isr=isr,
                           controller_epoch=controller_epoch)
    assert PartitionState.from_bytes(state.to_bytes()) == state


@given(config=st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=40), max_size=8))
def test_config_entity_round_trips(config: dict[str, str]) -> None:
    entity = ConfigEntity(config=config)
    assert ConfigEntity.from_bytes(entity.to_bytes()) == entity


@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_coordination_error(data: bytes) -> None:
    for payload_type in (PartitionState, TopicAssignment, BrokerRegistration, ConfigEntity,
                         ReassignmentRequest, ControllerEpoch):
        try:
            payload_type.from_bytes(data, "/x")
        except CoordinationError:
            pass


@given(document=st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["version", "partitions", "topic", "partition", "replicas", "leader",
                         "isr", "config", "0", "x"]), children, max_size=4),
    max_leaves=12))
def test_arbitrary_json_never_raises_anything_but_coordination_error(document: Any) -> None:
    data = json.dumps(document).encode()
    for payload_type in (PartitionState, TopicAssignment, ReassignmentRequest, ConfigEntity,
                         IsrChangeNotification, ConfigChangeNotification):
        try:
            payload_type.from_bytes(data, "/x")
        except CoordinationError:
            pass


def test_user_and_client_entities_in_kafkas_layout() -> None:
    assert znodes.config_entity_path("users", "alice") == "/config/users/alice"
    assert znodes.config_entity_path("clients", "<default>") == "/config/clients/<default>"
    assert znodes.user_client_entity_path("alice", None) == "users/alice"
    assert znodes.user_client_entity_path(None, "c-1") == "clients/c-1"
    assert znodes.user_client_entity_path("<default>", "c.1") == "users/<default>/clients/c.1"
    assert znodes.user_client_entity_path("CN=a,O=b", None) == "users/CN%3Da%2CO%3Db"
    assert znodes.desanitize_entity_name("CN%3Da%2CO%3Db") == "CN=a,O=b"
    notification = ConfigChangeNotification("users/alice/clients/c1")
    assert notification.to_bytes() == b'{"version":2,"entity_path":"users/alice/clients/c1"}'
    assert ConfigChangeNotification.from_bytes(notification.to_bytes()).config_path == \
        "/config/users/alice/clients/c1"
    assert ConfigChangeNotification.for_topic("t").to_bytes() == b'{"version":2,"entity_path":"topics/t"}'
