"""The ACL authorizer end to end: two brokers with ``authorizer.class.name`` set, ACLs in ZooKeeper.

One table drives most of the module: principal x operation x resource x front end → allowed, or
the named Kafka error. Each row sends one real request: a raw Kafka-protocol request (kio) on the
Kafka front end, the JSON (or binary) route on the HTTP front end. An allowed row must not be
refused for authorization (it may still fail for an unrelated reason, e.g. a heartbeat from an
unknown member); a denied row must carry its error: the code on the Kafka answer's items, or
HTTP 403 with the Kafka name in the JSON body. Rows for ``User:ANONYMOUS`` go to the brokers'
PLAINTEXT listener; rows for the users ``alice``, ``bob`` and the super user ``admin`` go to their
SASL_PLAINTEXT listener, authenticated there (SaslHandshake + SaslAuthenticate with PLAIN on the
Kafka front end, HTTP Basic on the HTTP one) against the SCRAM credentials kept in ZooKeeper.

The ACLs are written into ZooKeeper before the brokers start (as Kafka's ``kafka-acls
--authorizer-properties zookeeper.connect=...`` does), then changed through CreateAcls on one
broker and seen by the other through the change notifications. confluent-kafka and the kafkalite
client are denied and allowed per ACL with the named errors; metadata is filtered; deny wins;
prefixed ACLs apply.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from kafkalite import KafkaConsumer as KafkaliteConsumer, KafkaProducer as KafkaliteProducer
from kafkalite.broker.authorizer import Authorizer
from kafkalite.coord.zk import ZooKeeperClient
from kafkalite.errors import TopicAuthorizationFailedError
from kafkalite.record.batch import build_batch
from kafkalite.security import scram
from kafkalite.security.acl import (
    AccessControlEntry,
    AclBinding,
    Operation as Op,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType as RT,
)
from tests.support import kafka_wire
from tests.support.cluster import BrokerCluster, HttpError, free_port, http

pytestmark = pytest.mark.integration

ANON = "User:ANONYMOUS"
ALICE, BOB, ADMIN = "User:alice", "User:bob", "User:admin"
#: The SASL users and their passwords (SCRAM-SHA-512 credentials in /config/users before the start).
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}
AUTHORIZATION_ERRORS = {29: "TOPIC_AUTHORIZATION_FAILED", 30: "GROUP_AUTHORIZATION_FAILED",
                        31: "CLUSTER_AUTHORIZATION_FAILED", 53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}
CODES = {name: code for code, name in AUTHORIZATION_ERRORS.items()}


def _acl(resource_type: RT, name: str, operation: Op, permission: Permission = Permission.ALLOW,
         principal: str = ANON, pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern),
                      AccessControlEntry(principal, "*", operation, permission))


#: The ACLs the brokers start with.
SEED_ACLS = [
    _acl(RT.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION), _acl(RT.CLUSTER, "kafka-cluster", Op.ALTER),
    _acl(RT.CLUSTER, "kafka-cluster", Op.DESCRIBE),
    _acl(RT.TOPIC, "acl-", Op.CREATE, pattern=PatternType.PREFIXED),
    _acl(RT.TOPIC, "pay.", Op.CREATE, pattern=PatternType.PREFIXED),
    _acl(RT.TOPIC, "pay.", Op.WRITE, pattern=PatternType.PREFIXED),
    _acl(RT.TOPIC, "pay.", Op.READ, pattern=PatternType.PREFIXED),
    _acl(RT.TOPIC, "acl-rw", Op.READ), _acl(RT.TOPIC, "acl-rw", Op.WRITE),
    _acl(RT.TOPIC, "acl-ro", Op.READ),
    _acl(RT.TOPIC, "acl-wo", Op.WRITE),
    _acl(RT.TOPIC, "acl-denied", Op.ALL), _acl(RT.TOPIC, "acl-denied", Op.WRITE, Permission.DENY, "User:*"),
    _acl(RT.TOPIC, "acl-del", Op.DELETE),
    _acl(RT.TOPIC, "acl-alter", Op.ALTER), _acl(RT.TOPIC, "acl-alter", Op.DELETE),
    _acl(RT.TOPIC, "acl-cfg", Op.ALTER_CONFIGS),
    _acl(RT.TOPIC, "secret", Op.CREATE), _acl(RT.TOPIC, "secret", Op.READ, principal="User:bob"),
    _acl(RT.GROUP, "g-ok", Op.READ), _acl(RT.GROUP, "g-desc", Op.DESCRIBE), _acl(RT.GROUP, "g-del", Op.DELETE),
    _acl(RT.GROUP, "g-", Op.READ, pattern=PatternType.PREFIXED, principal="User:bob"),
    _acl(RT.TRANSACTIONAL_ID, "tx-ok", Op.WRITE),
    # the SASL users
    _acl(RT.TOPIC, "acl-ro", Op.WRITE, principal=ALICE),  # ANONYMOUS may only read it
    _acl(RT.TOPIC, "pay.eu", Op.DESCRIBE, principal="User:*"),
    _acl(RT.TOPIC, "pay.eu", Op.DESCRIBE, Permission.DENY, principal=BOB),  # deny wins over User:*
    _acl(RT.GROUP, "*", Op.DESCRIBE, principal=ALICE),  # every group (the wildcard resource)
    _acl(RT.TRANSACTIONAL_ID, "tx-alice", Op.WRITE, principal=ALICE),
    _acl(RT.CLUSTER, "kafka-cluster", Op.DESCRIBE_CONFIGS, principal=ALICE),
]
TOPICS = ["acl-rw", "acl-ro", "acl-wo", "acl-denied", "acl-del", "acl-alter", "acl-cfg", "pay.eu", "secret"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    connect = f"{zookeeper.connect_string}/acl-{uuid.uuid4().hex[:8]}"

    async def seed() -> None:
        client = ZooKeeperClient(connect)
        await client.start()
        try:
            writer = Authorizer(client)
            await writer.start()
            await writer.create_acls(SEED_ACLS)
            writer.stop()
            for user, password in PASSWORDS.items():
                credential = scram.new_credential("SCRAM-SHA-512", password).to_text()
                await client.create(f"/config/users/{user}", json.dumps(
                    {"version": 1, "config": {"SCRAM-SHA-512": credential}}).encode(), makepath=True)
        finally:
            await client.stop()

    asyncio.run(seed())
    brokers = BrokerCluster(tmp_path_factory.mktemp("acl"), connect, size=2, extra_properties={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": ADMIN, "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.num.partitions": "1", "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"})
    for broker_id, process in brokers.brokers.items():  # the brokers talk to each other on PLAINTEXT
        brokers.per_broker_properties[broker_id] = {
            "listeners": f"PLAINTEXT://127.0.0.1:{process.port},SASL_PLAINTEXT://127.0.0.1:{free_port()}"}
    brokers.start()
    try:
        for topic in TOPICS:
            brokers.create_topic(topic, partitions=1, replication_factor=1)
        for topic in TOPICS:
            if topic not in ("secret", "acl-cfg"):  # ANONYMOUS may not Describe them: metadata leaves them out
                brokers.wait_for(lambda topic=topic: _has_leader(brokers, topic), 30, f"a leader of {topic}")
        yield brokers
    finally:
        brokers.stop()
    assert brokers.error_lines() == []


def _has_leader(cluster: BrokerCluster, topic: str) -> bool:
    for broker_id in cluster.brokers:
        partitions = cluster.partitions(topic, broker_id)
        if not partitions or partitions[0]["leader"] <= 0:
            return False
    return True


# --- the Kafka front end ---------------------------------------------------------------------------

def kafka_call(address: str, api_key: int, version: int, fields: dict[str, Any], user: str | None = None) -> Any:
    """One Kafka-protocol request on a fresh connection (authenticated as ``user`` with PLAIN
    first, when given); the kio response."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=15) as connection:
        if user is not None:
            handshake = _exchange(connection, 17, 1, {"mechanism": "PLAIN"}, 5)
            assert handshake.error_code == 0, handshake
            token = scram.plain_token(user, PASSWORDS[user])
            authenticated = _exchange(connection, 36, 2, {"auth_bytes": token}, 6)
            assert authenticated.error_code == 0, authenticated
        return _exchange(connection, api_key, version, fields, 7)


def _exchange(connection: socket.socket, api_key: int, version: int, fields: dict[str, Any],
              correlation_id: int) -> Any:
    connection.sendall(kafka_wire.request_frame(api_key, version, correlation_id,
                                                kafka_wire.request(api_key, version, fields)))
    head = _read_exactly(connection, 4)
    body = _read_exactly(connection, struct.unpack(">i", head)[0])
    return kafka_wire.read_response(head + body, api_key, version)[1]


def sasl_address(cluster: BrokerCluster, broker_id: int) -> str:
    """``host:port`` of broker ``broker_id``'s SASL_PLAINTEXT listener."""
    listeners = cluster.per_broker_properties[broker_id]["listeners"]
    return listeners.split("SASL_PLAINTEXT://", 1)[1]


def _read_exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data


def error_codes(entity: Any) -> set[int]:
    """Every non-zero error code (``error_code``, ``partition_error_code``) anywhere in a kio response."""
    codes: set[int] = set()
    if isinstance(entity, tuple | list):
        for item in entity:
            codes |= error_codes(item)
    elif hasattr(entity, "__dataclass_fields__"):
        for name in entity.__dataclass_fields__:
            value = getattr(entity, name)
            if name.endswith("error_code") and int(value) != 0:
                codes.add(int(value))
            elif isinstance(value, tuple | list) or hasattr(value, "__dataclass_fields__"):
                codes |= error_codes(value)
    return codes


def _batch() -> bytes:
    return bytes(build_batch([b"v"]))


def _produce(topic: str) -> tuple[int, int, dict[str, Any]]:
    return 0, 8, {"acks": 1, "timeout": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": _batch()}]}]}


def _fetch(topic: str) -> tuple[int, int, dict[str, Any]]:
    return 1, 11, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}


def _list_offsets(topic: str) -> tuple[int, int, dict[str, Any]]:
    return 2, 5, {"replica_id": -1, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "timestamp": -1}]}]}


def _metadata(topic: str) -> tuple[int, int, dict[str, Any]]:
    return 3, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}


def _create_topic(topic: str) -> tuple[int, int, dict[str, Any]]:
    return 19, 5, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
                   "timeout": 10_000, "validate_only": True}


def _delete_topic(topic: str) -> tuple[int, int, dict[str, Any]]:
    return 20, 4, {"topic_names": [topic], "timeout": 10_000}


def _create_partitions(topic: str) -> tuple[int, int, dict[str, Any]]:
    return 37, 1, {"topics": [{"name": topic, "count": 2, "assignments": None}], "timeout": 10_000,
                   "validate_only": True}


def _describe_configs(resource: str) -> tuple[int, int, dict[str, Any]]:
    resource_type, name = (4, "1") if resource == "broker" else (2, resource)
    return 32, 1, {"resources": [{"resource_type": resource_type, "resource_name": name,
                                  "configuration_keys": None}]}


def _alter_configs(resource: str) -> tuple[int, int, dict[str, Any]]:
    resource_type, name = (4, "1") if resource == "broker" else (2, resource)
    return 33, 1, {"resources": [{"resource_type": resource_type, "resource_name": name, "configs": [
        {"name": "retention.ms" if resource_type == 2 else "log.cleaner.backoff.ms", "value": "600000"}]}],
        "validate_only": True}


def _delete_records(topic: str) -> tuple[int, int, dict[str, Any]]:
    return 21, 1, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 0}]}],
                   "timeout": 10_000}


def _heartbeat(group: str) -> tuple[int, int, dict[str, Any]]:
    return 12, 3, {"group_id": group, "generation_id": 1, "member_id": "nobody"}


def _join(group: str) -> tuple[int, int, dict[str, Any]]:
    return 11, 5, {"group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000, "member_id": "",
                   "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}


def _offset_commit(group_topic: str) -> tuple[int, int, dict[str, Any]]:
    group, topic = group_topic.split("/")
    return 8, 7, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 0}]}]}


def _offset_fetch(group: str) -> tuple[int, int, dict[str, Any]]:
    return 9, 6, {"group_id": group, "topics": None}


def _describe_group(group: str) -> tuple[int, int, dict[str, Any]]:
    return 15, 4, {"groups": [group]}


def _delete_group(group: str) -> tuple[int, int, dict[str, Any]]:
    return 42, 1, {"groups_names": [group]}


def _find_coordinator(key: str) -> tuple[int, int, dict[str, Any]]:
    return 10, 2, {"key": key, "key_type": 1 if key.startswith("tx-") else 0}


def _init_producer_id(transactional_id: str) -> tuple[int, int, dict[str, Any]]:
    return 22, 2, {"transactional_id": transactional_id or None, "transaction_timeout": 60_000}


def _end_txn(transactional_id: str) -> tuple[int, int, dict[str, Any]]:
    return 26, 1, {"transactional_id": transactional_id, "producer_id": 1, "producer_epoch": 0, "committed": True}


def _add_partitions(transactional_id_topic: str) -> tuple[int, int, dict[str, Any]]:
    transactional_id, topic = transactional_id_topic.split("/")
    return 24, 1, {"v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": 1,
                   "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]}


def _txn_offset_commit(transactional_id_group_topic: str) -> tuple[int, int, dict[str, Any]]:
    transactional_id, group, topic = transactional_id_group_topic.split("/")
    return 28, 3, {"transactional_id": transactional_id, "group_id": group, "producer_id": 1, "producer_epoch": 0,
                   "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
                       {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


def _describe_transactions(transactional_id: str) -> tuple[int, int, dict[str, Any]]:
    return 65, 0, {"transactional_ids": [transactional_id]}


def _describe_acls(_: str) -> tuple[int, int, dict[str, Any]]:
    return 29, 1, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                   "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}


def _elect_leaders(topic: str) -> tuple[int, int, dict[str, Any]]:
    return 43, 1, {"election_type": 0, "topic_partitions": [{"topic": topic, "partitions": [0]}],
                   "timeout": 10_000}


KAFKA_REQUESTS: dict[str, Callable[[str], tuple[int, int, dict[str, Any]]]] = {
    "Produce": _produce, "Fetch": _fetch, "ListOffsets": _list_offsets, "Metadata": _metadata,
    "CreateTopics": _create_topic, "DeleteTopics": _delete_topic, "CreatePartitions": _create_partitions,
    "DescribeConfigs": _describe_configs, "AlterConfigs": _alter_configs, "DeleteRecords": _delete_records,
    "Heartbeat": _heartbeat, "JoinGroup": _join, "OffsetCommit": _offset_commit, "OffsetFetch": _offset_fetch,
    "DescribeGroups": _describe_group, "DeleteGroups": _delete_group, "FindCoordinator": _find_coordinator,
    "InitProducerId": _init_producer_id, "EndTxn": _end_txn, "AddPartitionsToTxn": _add_partitions,
    "TxnOffsetCommit": _txn_offset_commit,
    "DescribeTransactions": _describe_transactions, "DescribeAcls": _describe_acls,
    "ElectLeaders": _elect_leaders,
}


# --- the HTTP front end ----------------------------------------------------------------------------

def _http_request(operation: str, resource: str) -> tuple[str, str, Any]:
    """(method, path, JSON body) of the HTTP route doing ``operation`` on ``resource``."""
    if operation == "Produce":
        return "POST", f"/v1/topics/{resource}/records", {"records": [{"value": "dg=="}], "acks": 1}
    if operation == "Fetch":
        return "GET", f"/v1/topics/{resource}/partitions/0/records?offset=0", None
    if operation == "ListOffsets":
        return "POST", "/v1/list_offsets", {"partitions": [{"topic": resource, "partition": 0}]}
    if operation == "CreateTopics":
        return "POST", "/v1/admin/create_topics", {"topics": [{"name": resource, "num_partitions": 1,
                                                              "replication_factor": 1}], "validate_only": True}
    if operation == "DeleteTopics":
        return "POST", "/v1/admin/delete_topics", {"topics": [resource]}
    if operation == "DescribeConfigs":
        name = ("broker", "1") if resource == "broker" else ("topic", resource)
        return "POST", "/v1/admin/describe_configs", {"resources": [{"type": name[0], "name": name[1]}]}
    if operation == "DeleteRecords":
        return "POST", "/v1/delete_records", {"partitions": [{"topic": resource, "partition": 0, "offset": 0}]}
    if operation == "Heartbeat":
        return "POST", "/v1/groups/heartbeat", {"group_id": resource, "generation_id": 1, "member_id": "nobody"}
    if operation == "OffsetFetch":
        return "POST", "/v1/groups/offset_fetch", {"group_id": resource}
    if operation == "DescribeGroups":
        return "POST", "/v1/groups/describe", {"groups": [resource]}
    if operation == "DeleteGroups":
        return "POST", "/v1/groups/delete", {"groups": [resource]}
    if operation == "InitProducerId":
        return "POST", "/v1/init_producer_id", {"transactional_id": resource} if resource else {}
    if operation == "DescribeTransactions":
        return "POST", "/v1/txn/describe", {"transactional_ids": [resource]}
    if operation == "TxnOffsetCommit":
        transactional_id, group, topic = resource.split("/")
        return "POST", "/v1/txn/offset_commit", {
            "transactional_id": transactional_id, "producer_id": 1, "producer_epoch": 0, "group_id": group,
            "topics": [{"name": topic, "partitions": [{"partition": 0, "offset": 1}]}]}
    if operation == "ListPartitionReassignments":
        return "POST", "/v1/admin/list_partition_reassignments", {}
    raise AssertionError(f"no HTTP route for {operation}")


# --- the table -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    principal: str
    operation: str
    resource: str
    front_end: str  # "kafka" or "http"
    expected: str  # "allowed" or the Kafka error name

    def __str__(self) -> str:
        who = "" if self.principal == ANON else self.principal.removeprefix("User:") + "-"
        return f"{who}{self.front_end}-{self.operation}-{self.resource}-{self.expected}"


def _both(operation: str, resource: str, expected: str, principal: str = ANON) -> list[Case]:
    return [Case(principal, operation, resource, "kafka", expected),
            Case(principal, operation, resource, "http", expected)]


OK, TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = (
    "allowed", "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")

TABLE: list[Case] = [
    *_both("Produce", "acl-rw", OK), *_both("Produce", "acl-ro", TOPIC_DENIED),
    *_both("Produce", "acl-denied", TOPIC_DENIED),  # Allow All, Deny Write to User:*: deny wins
    *_both("Produce", "pay.eu", OK),  # prefixed ACL
    *_both("Produce", "secret", TOPIC_DENIED),  # ACLs only for User:bob
    *_both("Fetch", "acl-rw", OK), *_both("Fetch", "acl-wo", TOPIC_DENIED), *_both("Fetch", "acl-denied", OK),
    *_both("ListOffsets", "acl-ro", OK),  # Describe implied by Read
    *_both("ListOffsets", "secret", TOPIC_DENIED),
    Case(ANON, "Metadata", "acl-wo", "kafka", OK), Case(ANON, "Metadata", "secret", "kafka", TOPIC_DENIED),
    *_both("CreateTopics", "acl-new", OK), *_both("CreateTopics", "other-new", TOPIC_DENIED),
    *_both("DeleteTopics", "acl-rw", TOPIC_DENIED), Case(ANON, "DeleteTopics", "acl-del", "kafka", OK),
    Case(ANON, "CreatePartitions", "acl-alter", "kafka", OK),
    Case(ANON, "CreatePartitions", "acl-rw", "kafka", TOPIC_DENIED),
    *_both("DescribeConfigs", "acl-cfg", OK),  # implied by AlterConfigs
    *_both("DescribeConfigs", "acl-rw", TOPIC_DENIED), *_both("DescribeConfigs", "broker", CLUSTER_DENIED),
    Case(ANON, "AlterConfigs", "acl-cfg", "kafka", OK), Case(ANON, "AlterConfigs", "broker", "kafka", CLUSTER_DENIED),
    *_both("DeleteRecords", "acl-alter", OK), *_both("DeleteRecords", "acl-rw", TOPIC_DENIED),
    *_both("Heartbeat", "g-ok", OK), *_both("Heartbeat", "g-desc", GROUP_DENIED),
    Case(ANON, "JoinGroup", "g-no", "kafka", GROUP_DENIED),
    Case(ANON, "OffsetCommit", "g-ok/acl-rw", "kafka", OK),
    Case(ANON, "OffsetCommit", "g-ok/acl-wo", "kafka", TOPIC_DENIED),  # Read on the topic is needed
    Case(ANON, "OffsetCommit", "g-desc/acl-rw", "kafka", GROUP_DENIED),
    *_both("OffsetFetch", "g-desc", OK), *_both("OffsetFetch", "g-no", GROUP_DENIED),
    *_both("DescribeGroups", "g-ok", OK), *_both("DescribeGroups", "g-no", GROUP_DENIED),
    *_both("DeleteGroups", "g-ok", GROUP_DENIED), *_both("DeleteGroups", "g-del", OK),
    Case(ANON, "FindCoordinator", "g-no", "kafka", GROUP_DENIED),
    Case(ANON, "FindCoordinator", "tx-no", "kafka", TXN_DENIED),
    *_both("InitProducerId", "tx-ok", OK), *_both("InitProducerId", "tx-no", TXN_DENIED),
    *_both("InitProducerId", "", OK),  # idempotent: Write on some topic implies IdempotentWrite
    Case(ANON, "EndTxn", "tx-no", "kafka", TXN_DENIED),
    Case(ANON, "AddPartitionsToTxn", "tx-ok/acl-ro", "kafka", TOPIC_DENIED),
    Case(ANON, "AddPartitionsToTxn", "tx-no/acl-rw", "kafka", TXN_DENIED),
    *_both("TxnOffsetCommit", "tx-ok/g-ok/acl-wo", TOPIC_DENIED),  # Read on the committed topics
    *_both("TxnOffsetCommit", "tx-ok/g-ok/acl-rw", OK), *_both("TxnOffsetCommit", "tx-ok/g-no/acl-rw", GROUP_DENIED),
    *_both("DescribeTransactions", "tx-no", TXN_DENIED),
    Case(ANON, "DescribeAcls", "kafka-cluster", "kafka", OK),
    Case(ANON, "ElectLeaders", "acl-rw", "kafka", OK),
    Case(ANON, "ListPartitionReassignments", "kafka-cluster", "http", OK),
    # users authenticated on the SASL listener
    *_both("Produce", "acl-ro", OK, ALICE), *_both("Produce", "acl-ro", TOPIC_DENIED, BOB),
    *_both("Produce", "acl-denied", TOPIC_DENIED, ALICE),  # the Deny for User:* holds for her too
    *_both("Fetch", "secret", OK, BOB), *_both("Fetch", "secret", TOPIC_DENIED, ALICE),
    *_both("Fetch", "acl-rw", TOPIC_DENIED, ALICE),  # ANONYMOUS's Read is not hers
    Case(BOB, "Metadata", "secret", "kafka", OK), Case(ALICE, "Metadata", "secret", "kafka", TOPIC_DENIED),
    *_both("ListOffsets", "pay.eu", OK, ALICE),  # Describe for User:*
    *_both("ListOffsets", "pay.eu", TOPIC_DENIED, BOB),  # ... denied to bob by name: deny wins
    *_both("Heartbeat", "g-no", OK, BOB),  # bob's prefixed Read on g-
    *_both("Heartbeat", "g-no", GROUP_DENIED, ALICE),  # Describe on every group is not Read
    *_both("DescribeGroups", "g-no", OK, ALICE), *_both("OffsetFetch", "g-no", OK, BOB),
    Case(BOB, "OffsetCommit", "g-no/secret", "kafka", OK),
    Case(BOB, "OffsetCommit", "g-no/acl-rw", "kafka", TOPIC_DENIED),
    *_both("InitProducerId", "tx-alice", OK, ALICE), *_both("InitProducerId", "tx-alice", TXN_DENIED, BOB),
    *_both("InitProducerId", "tx-ok", TXN_DENIED, ALICE),  # tx-ok's Write is ANONYMOUS's
    *_both("DescribeConfigs", "broker", OK, ALICE), *_both("DescribeConfigs", "broker", CLUSTER_DENIED, BOB),
    Case(BOB, "DescribeAcls", "kafka-cluster", "kafka", CLUSTER_DENIED),
    Case(ALICE, "CreateTopics", "other-new", "kafka", TOPIC_DENIED),
    *_both("CreateTopics", "other-new", OK, ADMIN),  # super.users: no ACL needed
    Case(ADMIN, "AlterConfigs", "broker", "kafka", OK), *_both("DeleteGroups", "g-admin", OK, ADMIN),
]


def test_the_table_has_forty_rows_or_more() -> None:
    assert len(TABLE) >= 40
    assert len([case for case in TABLE if case.principal != ANON]) >= 40  # as many for SASL users


def test_a_wrong_password_on_the_sasl_listener_is_refused_on_both_front_ends(cluster: BrokerCluster) -> None:
    address = sasl_address(cluster, 1)
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=15) as connection:
        assert _exchange(connection, 17, 1, {"mechanism": "PLAIN"}, 1).error_code == 0
        refused = _exchange(connection, 36, 2, {"auth_bytes": scram.plain_token("alice", "wrong")}, 2)
        assert refused.error_code == 58
    with pytest.raises(HttpError) as failed:
        http(address, "GET", "/v1/metadata", headers=_basic("alice", "wrong"))
    assert failed.value.status == 401 and failed.value.body["error"] == "SASL_AUTHENTICATION_FAILED"


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.mark.parametrize("case", TABLE, ids=str)
def test_authorization_table(cluster: BrokerCluster, case: Case) -> None:
    user = None if case.principal == ANON else case.principal.removeprefix("User:")
    address = cluster.brokers[1].address if user is None else sasl_address(cluster, 1)
    if case.front_end == "kafka":
        api_key, version, fields = KAFKA_REQUESTS[case.operation](case.resource)
        codes = error_codes(kafka_call(address, api_key, version, fields, user))
        if case.expected == OK:
            assert not codes & set(AUTHORIZATION_ERRORS), f"{case}: answered {codes}"
        else:
            assert CODES[case.expected] in codes, f"{case}: answered {codes}"
        return
    method, path, body = _http_request(case.operation, case.resource)
    try:
        answer = http(address, method, path, body, headers=None if user is None else _basic(user, PASSWORDS[user]))
    except HttpError as exc:
        if case.expected == OK:
            assert exc.status != 403, f"{case}: {exc}"
            return
        assert exc.status == 403, f"{case}: {exc}"
        assert exc.body["error"] == case.expected and exc.body["error_code"] == CODES[case.expected]
        return
    assert case.expected == OK, f"{case}: answered {answer}"


# --- clients ----------------------------------------------------------------------------------------

def test_metadata_lists_only_topics_one_may_describe(cluster: BrokerCluster) -> None:
    answer = kafka_call(cluster.brokers[1].address, 3, 9, {"topics": None, "allow_auto_topic_creation": False})
    names = {topic.name for topic in answer.topics}
    assert {"acl-rw", "acl-ro", "acl-wo", "acl-denied", "pay.eu", "acl-alter"} <= names
    assert "secret" not in names and "acl-cfg" not in names  # AlterConfigs implies DescribeConfigs, not Describe
    listed = http(cluster.brokers[1].address, "GET", "/v1/metadata")
    assert "secret" not in {topic["name"] for topic in listed["topics"]} and "acl-rw" in {
        topic["name"] for topic in listed["topics"]}


def test_confluent_kafka_is_denied_and_allowed_per_acl(cluster: BrokerCluster) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    config = {"bootstrap.servers": cluster.brokers[1].address, "broker.address.family": "v4"}
    producer = confluent_kafka.Producer({**config, "enable.idempotence": False, "message.timeout.ms": 10_000})
    outcomes: dict[str, Any] = {}
    for topic in ("acl-rw", "acl-ro"):
        producer.produce(topic, b"from-confluent",
                         on_delivery=lambda error, message, topic=topic: outcomes.__setitem__(topic, error))
    producer.flush(20)
    assert outcomes["acl-rw"] is None
    assert outcomes["acl-ro"] is not None and outcomes["acl-ro"].code() == \
        confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED

    consumer = confluent_kafka.Consumer({**config, "group.id": "g-ok", "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False})
    try:
        consumer.subscribe(["acl-wo"])
        deadline = time.monotonic() + 20
        error = None
        while error is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                error = message.error()
        assert error is not None and error.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()

    admin = AdminClient(config)
    listed = admin.list_topics(timeout=10)
    assert "secret" not in listed.topics and "acl-rw" in listed.topics
    bindings = admin.describe_acls(confluent_kafka.admin.AclBindingFilter(
        confluent_kafka.admin.ResourceType.TOPIC, "acl-rw", confluent_kafka.admin.ResourcePatternType.LITERAL,
        None, None, confluent_kafka.admin.AclOperation.ANY, confluent_kafka.admin.AclPermissionType.ANY)).result(10)
    assert {(str(binding.operation).split(".")[-1], binding.principal) for binding in bindings} == \
        {("READ", ANON), ("WRITE", ANON)}


def test_kafkalite_client_gets_the_named_errors(cluster: BrokerCluster) -> None:
    producer = KafkaliteProducer(bootstrap_servers=cluster.bootstrap, acks=1, retries=0)
    try:
        assert producer.send("pay.eu", b"allowed").get(20).offset >= 0
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("acl-ro", b"denied").get(20)
    finally:
        producer.close()
    consumer = KafkaliteConsumer("acl-wo", bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=10_000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in consumer:
                pass
    finally:
        consumer.close()


def test_acl_changes_reach_the_other_broker(cluster: BrokerCluster) -> None:
    """CreateAcls and DeleteAcls on broker 1; broker 2's cache follows the change notifications."""
    other = cluster.brokers[2].address
    method, path, body = _http_request("Fetch", "acl-wo")

    def fetch_allowed() -> bool:
        try:
            http(other, method, path, body)
            return True
        except HttpError as exc:
            assert exc.status == 403, exc
            return False

    assert not fetch_allowed()
    created = kafka_call(cluster.brokers[1].address, 30, 2, {"creations": [{
        "resource_type": 2, "resource_name": "acl-w", "resource_pattern_type": 4, "principal": "User:*",
        "host": "*", "operation": 3, "permission_type": 3}]})
    assert error_codes(created) == set()
    cluster.wait_for(fetch_allowed, 15, "broker 2 to allow Read on acl-w* (prefixed) after CreateAcls on broker 1")
    deleted = kafka_call(cluster.brokers[1].address, 31, 2, {"filters": [{
        "resource_type_filter": 2, "resource_name_filter": "acl-w", "pattern_type_filter": 4,
        "principal_filter": "User:*", "host_filter": None, "operation": 1, "permission_type": 1}]})
    assert error_codes(deleted) == set()
    assert [acl.resource_name for acl in deleted.filter_results[0].matching_acls] == ["acl-w"]
    cluster.wait_for(lambda: not fetch_allowed(), 15, "broker 2 to deny Read on acl-wo again after DeleteAcls")


def test_acls_tool_and_admin_client(cluster: BrokerCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """kafkalite-acls.sh's --add (with Kafka's --producer / --consumer expansions), --list and
    --remove, checked through the admin client's describe_acls (both over /v1/acls/*)."""
    from kafkalite.client.admin import KafkaAdminClient
    from kafkalite.security.acl import AclBindingFilter
    from kafkalite.tools import acls as acls_tool
    from kafkalite.tools.common import run_cli

    bootstrap = ["--bootstrap-server", cluster.bootstrap]
    assert acls_tool.main([*bootstrap, "--add", "--allow-principal", "User:alice", "--producer", "--topic", "tool-t",
                           "--transactional-id", "tool-tx", "--command-config", "/dev/null"]) == 0
    out = capsys.readouterr().out
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=tool-t, patternType=LITERAL)`" in out
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in out
    assert acls_tool.main([*bootstrap, "--add", "--allow-principal", "User:bob", "--consumer", "--topic", "tool-",
                           "--group", "tool-g", "--resource-pattern-type", "prefixed"]) == 0
    capsys.readouterr()
    _wait_until_every_broker_has(cluster, 3 + 2 + 2 + 1)  # alice: tool-t 3, tool-tx 2; bob: tool- 2, tool-g 1
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        found, error = admin.describe_acls(AclBindingFilter(RT.TOPIC, "tool-t", PatternType.MATCH))
        assert error is None
        assert {(str(b.entry.principal), str(b.entry.operation), str(b.pattern.pattern_type)) for b in found} == {
            ("User:alice", "Write", "Literal"), ("User:alice", "Describe", "Literal"),
            ("User:alice", "Create", "Literal"), ("User:bob", "Read", "Prefixed"), ("User:bob", "Describe", "Prefixed")}
        txn, _ = admin.describe_acls(AclBindingFilter(RT.TRANSACTIONAL_ID, "tool-tx"))
        assert {str(b.entry.operation) for b in txn} == {"Write", "Describe"}
        group, _ = admin.describe_acls(AclBindingFilter(RT.GROUP, "tool-g", PatternType.PREFIXED))
        assert [str(b.entry.operation) for b in group] == ["Read"]

        assert acls_tool.main([*bootstrap, "--list", "--topic", "tool-t"]) == 0
        listed = capsys.readouterr().out
        assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=tool-t, patternType=LITERAL)`" \
            in listed and "operation=CREATE" in listed

        assert acls_tool.main([*bootstrap, "--remove", "--force", "--topic", "tool-t"]) == 0
        _wait_until_every_broker_has(cluster, 2 + 2 + 1)  # tool-t's 3 removed
        assert admin.describe_acls(AclBindingFilter(RT.TOPIC, "tool-t"))[0] == []
        created = admin.create_acls([_acl(RT.GROUP, "tool-g2", Op.READ, principal="User:carol")])
        assert len(created["succeeded"]) == 1 and created["failed"] == []
        deleted = admin.delete_acls([AclBindingFilter(RT.GROUP, "tool-g2", principal="User:carol")])
        assert [(str(acl.entry.principal), error) for acl, error in deleted[0][1]] == [("User:carol", None)]
    assert run_cli(acls_tool.main, [*bootstrap, "--add", "--operation", "Fly", "--topic", "x",
                                    "--allow-principal", "User:a"]) == 2
    assert "unknown Operation 'Fly'" in capsys.readouterr().err


def _wait_until_every_broker_has(cluster: BrokerCluster, count: int) -> None:
    """Until every broker's cache lists ``count`` ACLs of the tool test's principals (ACL changes
    reach the other brokers through the change notifications, a moment later)."""
    def settled() -> bool:
        for broker in cluster.brokers.values():
            acls = http(broker.address, "POST", "/v1/acls/describe", {"resource_name": None})["acls"]
            if len([acl for acl in acls if acl["principal"] in ("User:alice", "User:bob")
                    and acl["resource_name"].startswith("tool-")]) != count:
                return False
        return True
    cluster.wait_for(settled, 15, f"{count} tool ACLs on every broker")


def test_only_a_caller_allowed_cluster_action_may_ask_on_another_principals_behalf(cluster: BrokerCluster) -> None:
    """A broker forwarding a JSON records request names the client's principal in a header; the
    leader authorizes that principal, and believes the header only from a caller allowed
    ClusterAction (here ANONYMOUS, the brokers' own identity on PLAINTEXT), as Kafka's Envelope."""
    path = "/v1/topics/secret/partitions/0/records?offset=0"
    forwarded_as_bob = {"Kafkalite-Forwarded-Principal": BOB}
    assert "records" in http(cluster.brokers[1].address, "GET", path, headers=forwarded_as_bob)
    with pytest.raises(HttpError) as denied:  # ANONYMOUS may not read it on its own behalf
        http(cluster.brokers[1].address, "GET", path)
    assert denied.value.body["error"] == TOPIC_DENIED
    with pytest.raises(HttpError) as impersonating:  # alice may not claim to be admin
        http(sasl_address(cluster, 1), "GET", path, headers={**_basic("alice", PASSWORDS["alice"]),
                                                             "Kafkalite-Forwarded-Principal": ADMIN})
    assert impersonating.value.status == 403 and impersonating.value.body["error"] == CLUSTER_DENIED


# --- requests naming several resources: split item by item -----------------------------------------

def _by_name(items: Any, name_field: str = "name") -> dict[str, set[int]]:
    """Each item's name and the error codes anywhere in it (0 when none)."""
    return {str(getattr(item, name_field)): error_codes(item) or {0} for item in items}


def _group_coordinator(address: str, group: str, user: str | None = None) -> str:
    answer = kafka_call(address, 10, 2, {"key": group, "key_type": 0}, user)
    assert answer.error_code == 0, answer
    return f"{answer.host}:{answer.port}"


def test_requests_naming_allowed_and_denied_resources_are_answered_item_by_item(cluster: BrokerCluster) -> None:
    """As Kafka's authorizer: the items one may not use carry their AUTHORIZATION_FAILED code and
    the others are served in the same request (AddPartitionsToTxn serves none of them then)."""
    address = cluster.brokers[1].address
    leader = cluster.partitions("acl-rw", 1)[0]["leader"]
    listed = kafka_call(cluster.brokers[leader].address, 2, 5, {"replica_id": -1, "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "timestamp": -1}]} for name in ("acl-rw", "secret")]})
    assert _by_name(listed.topics) == {"acl-rw": {0}, "secret": {29}}

    configs = kafka_call(address, 32, 1, {"resources": [
        {"resource_type": 2, "resource_name": name, "configuration_keys": None} for name in ("acl-cfg", "secret")]
        + [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}]})
    assert _by_name(configs.results, "resource_name") == {"acl-cfg": {0}, "secret": {29}, "1": {31}}
    assert any(entry.name == "retention.ms" for result in configs.results if result.resource_name == "acl-cfg"
               for entry in result.configs)

    created = kafka_call(address, 19, 5, {"topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1} for name in ("acl-split-new", "other-split")],
        "timeout": 10_000, "validate_only": True})
    assert _by_name(created.topics) == {"acl-split-new": {0}, "other-split": {29}}

    groups = kafka_call(_group_coordinator(address, "g-desc"), 15, 4, {"groups": ["g-desc", "g-none"]})
    assert _by_name(groups.groups, "group_id") == {"g-desc": {0}, "g-none": {30}}

    coordinators = kafka_call(address, 10, 4, {"key_type": 0, "coordinator_keys": ["g-ok", "g-none"]})
    assert _by_name(coordinators.coordinators, "key") == {"g-ok": {0}, "g-none": {30}}

    # OffsetCommit: the allowed topic's offset is committed, the denied one's is not
    coordinator = _group_coordinator(address, "g-ok")
    committed = kafka_call(coordinator, 8, 7, {
        "group_id": "g-ok", "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 7}]}
            for name in ("acl-rw", "acl-wo")]})
    assert _by_name(committed.topics) == {"acl-rw": {0}, "acl-wo": {29}}
    fetched = kafka_call(coordinator, 9, 6, {"group_id": "g-ok", "topics": [
        {"name": name, "partition_indexes": [0]} for name in ("acl-rw", "secret")]})
    assert _by_name(fetched.topics) == {"acl-rw": {0}, "secret": {29}}
    assert [partition.committed_offset for topic in fetched.topics if topic.name == "acl-rw"
            for partition in topic.partitions] == [7]

    # an OffsetFetch of every committed offset lists only the topics one may Describe
    admin_coordinator = _group_coordinator(sasl_address(cluster, 1), "g-ok", "admin")
    assert kafka_call(admin_coordinator, 8, 7, {
        "group_id": "g-ok", "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
            {"name": "secret", "partitions": [{"partition_index": 0, "committed_offset": 3}]}]}, "admin"
    ).topics[0].partitions[0].error_code == 0
    everything = kafka_call(coordinator, 9, 6, {"group_id": "g-ok", "topics": None})
    assert {topic.name for topic in everything.topics} == {"acl-rw"}
    as_admin = kafka_call(admin_coordinator, 9, 6, {"group_id": "g-ok", "topics": None}, "admin")
    assert {topic.name for topic in as_admin.topics} == {"acl-rw", "secret"}

    # AddPartitionsToTxn: one denied topic, and nothing is added
    added = kafka_call(address, 24, 1, {
        "v3_and_below_transactional_id": "tx-ok", "v3_and_below_producer_id": 1, "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": name, "partitions": [0]} for name in ("acl-rw", "acl-ro")]})
    assert _by_name(added.results_by_topic_v3_and_below) == {"acl-rw": {55}, "acl-ro": {29}}

    # TxnOffsetCommit needs Read on the topics whose offsets it commits
    transactional = kafka_call(coordinator, 28, 3, {
        "transactional_id": "tx-ok", "group_id": "g-ok", "producer_id": 1, "producer_epoch": 0,
        "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                                           "committed_metadata": ""}]} for name in ("acl-rw", "acl-wo")]})
    codes = _by_name(transactional.topics)
    assert codes["acl-wo"] == {29} and not codes["acl-rw"] & set(AUTHORIZATION_ERRORS), codes


def test_http_routes_naming_allowed_and_denied_resources_are_answered_item_by_item(cluster: BrokerCluster) -> None:
    """The HTTP front end splits as the Kafka one: denied items answered 29/30/31/53 in the
    answer's list, the others served (AddPartitionsToTxn: OPERATION_NOT_ATTEMPTED for them)."""
    address = cluster.brokers[1].address

    def codes(answer: dict[str, Any], field: str, key: str) -> dict[str, int]:
        return {str(item[key]): int(item.get("error_code", 0)) for item in answer[field]}

    leader = cluster.brokers[cluster.partitions("acl-rw", 1)[0]["leader"]].address
    listed = http(leader, "POST", "/v1/list_offsets", {"partitions": [
        {"topic": "acl-rw", "partition": 0}, {"topic": "secret", "partition": 0}]})
    assert codes(listed, "partitions", "topic") == {"acl-rw": 0, "secret": 29}

    configs = http(address, "POST", "/v1/admin/describe_configs", {"resources": [
        {"type": "topic", "name": "acl-cfg"}, {"type": "topic", "name": "secret"}, {"type": "broker", "name": "1"}]})
    assert codes(configs, "resources", "name") == {"acl-cfg": 0, "secret": 29, "1": 31}
    assert any(entry["name"] == "retention.ms" for resource in configs["resources"]
               if resource["name"] == "acl-cfg" for entry in resource["configs"])

    created = http(address, "POST", "/v1/admin/create_topics", {"validate_only": True, "topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1} for name in ("acl-http-new", "other-http")]})
    assert codes(created, "topics", "name") == {"acl-http-new": 0, "other-http": 29}

    with pytest.raises(HttpError) as refused:  # every item denied: refused as a whole, as a single one is
        http(address, "POST", "/v1/admin/delete_topics", {"topics": ["acl-rw-no-such", "acl-rw"]})
    assert refused.value.status == 403 and refused.value.body["error"] == "TOPIC_AUTHORIZATION_FAILED"
    assert cluster.partitions("acl-rw", 1)

    described = http(address, "POST", "/v1/txn/describe", {"transactional_ids": ["tx-ok", "tx-no"]})
    assert codes(described, "transactions", "transactional_id")["tx-no"] == 53
    assert described["transactions"][0]["transactional_id"] == "tx-ok"

    coordinator = _group_coordinator(address, "g-ok")
    committed = http(coordinator, "POST", "/v1/groups/offset_commit", {"group_id": "g-ok", "topics": [
        {"name": name, "partitions": [{"partition": 0, "offset": 11}]} for name in ("acl-rw", "acl-wo")]})
    assert {topic["name"]: [part["error_code"] for part in topic["partitions"]] for topic in committed["topics"]} \
        == {"acl-rw": [0], "acl-wo": [29]}
    fetched = http(coordinator, "POST", "/v1/groups/offset_fetch", {"group_id": "g-ok", "topics": [
        {"name": "acl-rw", "partitions": [0]}, {"name": "secret", "partitions": [0]}]})
    by_topic = {topic["name"]: topic["partitions"][0] for topic in fetched["topics"]}
    assert by_topic["acl-rw"]["offset"] == 11 and by_topic["secret"]["error_code"] == 29
    # every committed offset (admin commits one of secret's): only the topics one may Describe
    coordinator_id = next(broker_id for broker_id, broker in cluster.brokers.items() if broker.address == coordinator)
    admin = _basic("admin", PASSWORDS["admin"])
    http(sasl_address(cluster, coordinator_id), "POST", "/v1/groups/offset_commit", {"group_id": "g-ok", "topics": [
        {"name": "secret", "partitions": [{"partition": 0, "offset": 5}]}]}, headers=admin)
    listed_all = http(coordinator, "POST", "/v1/groups/offset_fetch", {"group_id": "g-ok"})
    assert {topic["name"] for topic in listed_all["topics"]} == {"acl-rw"}
    as_admin = http(sasl_address(cluster, coordinator_id), "POST", "/v1/groups/offset_fetch", {"group_id": "g-ok"},
                    headers=admin)
    assert {topic["name"] for topic in as_admin["topics"]} == {"acl-rw", "secret"}

    added = http(address, "POST", "/v1/txn/add_partitions", {
        "transactional_id": "tx-ok", "producer_id": 1, "producer_epoch": 0,
        "topics": [{"name": "acl-rw", "partitions": [0]}, {"name": "acl-ro", "partitions": [0]}]})
    assert {topic["name"]: topic["partitions"][0]["error_code"] for topic in added["topics"]} == {
        "acl-rw": 55, "acl-ro": 29}
