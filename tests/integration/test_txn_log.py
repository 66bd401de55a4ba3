"""The log side of transactions on 3 real brokers (RF=3, min.insync.replicas=2), without a
transaction coordinator: the test plays it. It takes a producer id from InitProducerId, writes
transactional batches with Kafka's Produce and ends transactions with WriteTxnMarkers (kio-encoded
over the Kafka protocol, and once over the HTTP route), then checks what readers see:

* aborted records are invisible to read_committed (kafkalite's consumer and confluent-kafka's
  with ``isolation.level=read_committed``) and visible to read_uncommitted; control records reach
  no application;
* an open transaction holds read_committed readers (and ListOffsets latest) at the LSO until its
  marker lands;
* after kill -9 of the leader the followers, now leading, agree; the killed broker recovers its
  ``.txnindex`` and producer state from its log, and serves the same answers as leader again.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kafkalite import KafkaAdminClient, KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafkalite.protocol import READ_COMMITTED, READ_UNCOMMITTED
from kafkalite.record.batch import build_batch
from kafkalite.storage import files
from kafkalite.storage.txnindex import AbortedTxn, decode_entries
from tests.support import kafka_wire as wire
from tests.support.cluster import BrokerCluster, running_cluster

pytestmark = pytest.mark.integration

TOPIC_CONFIGS = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
PRODUCE, LIST_OFFSETS, WRITE_TXN_MARKERS = 0, 2, 27
#: Produce errors that say nothing was written (a leader not serving the partition yet, as right
#: after the topic is created): a producer sends again.
NOTHING_WRITTEN = {3, 5, 6}  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    with running_cluster(tmp_path_factory, zookeeper, "txn-log") as brokers:
        yield brokers


def new_topic(cluster: BrokerCluster) -> str:
    name = f"txn-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(name, partitions=1, replication_factor=3, configs=TOPIC_CONFIGS)
    cluster.wait_in_sync(name)
    return name


def leader_of(cluster: BrokerCluster, topic: str) -> int:
    leader = int(cluster.wait_for(lambda: cluster.partitions(topic)[0]["leader"] > 0, 30, "a leader"))
    return int(cluster.partitions(topic)[0]["leader"]) if leader else -1


def kafka_call(address: str, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    """One kio-encoded request over the Kafka protocol, its decoded response."""
    frame = wire.request_frame(api_key, version, 1, wire.request(api_key, version, fields))
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(frame)
        received = b""
        while len(received) < 4 or len(received) < 4 + struct.unpack_from(">i", received)[0]:
            chunk = connection.recv(65536)
            assert chunk, "the broker closed the connection"
            received += chunk
    return wire.read_response(received, api_key, version)[1]


def init_producer_id(cluster: BrokerCluster) -> tuple[int, int]:
    answer = cluster.call("POST", "/v1/init_producer_id", {})
    return int(answer["producer_id"]), int(answer["producer_epoch"])


class Producer:
    """A transactional producer's log-side behaviour: sequenced transactional batches."""

    def __init__(self, cluster: BrokerCluster, topic: str) -> None:
        self.cluster = cluster
        self.topic = topic
        self.producer_id, self.epoch = init_producer_id(cluster)
        self.sequence = 0

    def send(self, values: list[bytes]) -> int:
        """Produce one transactional batch (acks=all) to the leader; returns its base offset."""
        batch = build_batch(values, producer_id=self.producer_id, producer_epoch=self.epoch,
                            base_sequence=self.sequence, transactional=True)

        def attempt() -> Any:  # sent again, as a producer does, while the leader did not take it
            leader = self.cluster.brokers[leader_of(self.cluster, self.topic)]
            response = kafka_call(leader.address, PRODUCE, 8, {
                "transactional_id": "log-side-test", "acks": -1, "timeout": 30_000,
                "topic_data": [{"name": self.topic, "partition_data": [{"index": 0, "records": batch}]}]})
            [answer] = response.responses[0].partition_responses
            return None if answer.error_code in NOTHING_WRITTEN else answer

        partition = self.cluster.wait_for(attempt, 30, f"the leader of {self.topic} taking a transactional batch")
        assert partition.error_code == 0, partition
        self.sequence += len(values)
        return int(partition.base_offset)

    def end(self, committed: bool, over_http: bool = False) -> None:
        """The coordinator's WriteTxnMarkers to the partition's leader."""
        leader = self.cluster.brokers[leader_of(self.cluster, self.topic)]
        if over_http:
            answer = self.cluster.call("POST", "/v1/write_txn_markers", {"timeout_ms": 30_000, "markers": [{
                "producer_id": self.producer_id, "producer_epoch": self.epoch, "committed": committed,
                "coordinator_epoch": 0, "partitions": [{"topic": self.topic, "partition": 0}]}]},
                broker_id=leader.broker_id)
            assert [item["error_code"] for item in answer["markers"][0]["partitions"]] == [0], answer
            return
        response = kafka_call(leader.address, WRITE_TXN_MARKERS, 1, {"markers": [{
            "producer_id": self.producer_id, "producer_epoch": self.epoch, "transaction_result": committed,
            "topics": [{"name": self.topic, "partition_indexes": [0]}], "coordinator_epoch": 0}]})
        [marker] = response.markers
        assert marker.producer_id == self.producer_id
        assert [item.error_code for item in marker.topics[0].partitions] == [0]


def plain(cluster: BrokerCluster, topic: str, values: list[bytes]) -> None:
    """Non-transactional records with acks=all over the JSON route, sent again (as a producer
    would) while the answer says the leader did not take them."""
    def attempt() -> Any:
        answer = cluster.call("POST", f"/v1/topics/{topic}/records", {
            "acks": -1, "records": [{"value": value.decode(), "partition": 0} for value in values]})
        codes = {item["error_code"] for item in answer["offsets"]}
        return None if codes & NOTHING_WRITTEN else answer

    answer = cluster.wait_for(attempt, 30, f"the leader of {topic} taking records")
    assert [item["error_code"] for item in answer["offsets"]] == [0] * len(values), answer


def read_values(cluster: BrokerCluster, topic: str, isolation: str, expected: int,
                timeout: float = 15.0) -> list[bytes]:
    """Values of partition 0 read from the beginning with kafkalite's consumer until ``expected``
    records came or the partition's end (for the isolation level) was reached after a quiet poll."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, isolation_level=isolation,
                             enable_auto_commit=False)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(values) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(record.value for record in records)
        # Nothing more arrives: the consumer's position is the end it may read to.
        values.extend(record.value for records in consumer.poll(timeout_ms=1_000).values() for record in records)
        return values
    finally:
        consumer.close()


# The leader named in ZooKeeper takes office when its LeaderAndIsr arrives; until then it answers
# NOT_LEADER_OR_FOLLOWER or LEADER_NOT_AVAILABLE, which a client retries.
RETRIABLE_LEADERSHIP_ERRORS = (5, 6)


def latest_offset(cluster: BrokerCluster, topic: str, isolation: int) -> int:
    def answer() -> dict[str, Any] | None:
        leader = leader_of(cluster, topic)
        reply = cluster.call("POST", "/v1/list_offsets", {"isolation_level": isolation, "partitions": [
            {"topic": topic, "partition": 0, "timestamp": -1}]}, broker_id=leader)
        [item] = reply["partitions"]
        return None if item["error_code"] in RETRIABLE_LEADERSHIP_ERRORS else dict(item)
    item = cluster.wait_for(answer, 15, f"{topic}'s leader answering ListOffsets")
    assert item["error_code"] == 0, item
    return int(item["offset"])


def kafka_latest_offset(cluster: BrokerCluster, topic: str, isolation: int) -> int:
    def answer() -> Any:
        leader = cluster.brokers[leader_of(cluster, topic)]
        response = kafka_call(leader.address, LIST_OFFSETS, 5, {
            "replica_id": -1, "isolation_level": isolation,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        [partition] = response.topics[0].partitions
        return None if partition.error_code in RETRIABLE_LEADERSHIP_ERRORS else partition
    partition = cluster.wait_for(answer, 15, f"{topic}'s leader answering ListOffsets")
    assert partition.error_code == 0
    return int(partition.offset)


def confluent_values(cluster: BrokerCluster, topic: str, isolation: str, expected: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition as ConfluentPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        consumer.assign([ConfluentPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        at_end = False
        while time.monotonic() < deadline and not (at_end and len(values) >= expected):
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                at_end = message.error().code() == -191  # _PARTITION_EOF
                continue
            values.append(message.value())
        return values
    finally:
        consumer.close()


def txn_index_entries(cluster: BrokerCluster, broker_id: int, topic: str) -> list[AbortedTxn]:
    directory = cluster.brokers[broker_id].directory / "data" / files.partition_dir_name(topic, 0)
    entries: list[AbortedTxn] = []
    for path in sorted(directory.glob(f"*{files.TXN_INDEX_SUFFIX}")):
        entries.extend(decode_entries(path.read_bytes()))
    return entries


def test_aborted_records_are_invisible_to_read_committed_and_visible_to_read_uncommitted(
        cluster: BrokerCluster) -> None:
    topic = new_topic(cluster)
    plain(cluster, topic, [b"before"])  # 0
    aborted = Producer(cluster, topic)
    committed = Producer(cluster, topic)
    assert aborted.send([b"aborted-1", b"aborted-2"]) == 1  # 1..2
    assert committed.send([b"committed-1"]) == 3  # 3
    aborted.send([b"aborted-3"])  # 4
    committed.send([b"committed-2"])  # 5
    aborted.end(committed=False)  # 6
    committed.end(committed=True, over_http=True)  # 7
    plain(cluster, topic, [b"after"])  # 8

    visible = [b"before", b"committed-1", b"committed-2", b"after"]
    everything = [b"before", b"aborted-1", b"aborted-2", b"committed-1", b"aborted-3", b"committed-2", b"after"]
    assert read_values(cluster, topic, "read_committed", len(visible)) == visible
    assert read_values(cluster, topic, "read_uncommitted", len(everything)) == everything  # no control records
    assert confluent_values(cluster, topic, "read_committed", len(visible)) == visible
    assert confluent_values(cluster, topic, "read_uncommitted", len(everything)) == everything
    assert latest_offset(cluster, topic, READ_COMMITTED) == latest_offset(cluster, topic, READ_UNCOMMITTED) == 9
    # The JSON records route shows no control record either, and reads past the markers.
    shown = cluster.call("GET", f"/v1/topics/{topic}/partitions/0/records?offset=5")
    assert [record["offset"] for record in shown["records"]] == [5, 8] and shown["next_offset"] == 9
    # Every replica wrote the same aborted-transaction entry from the replicated marker.
    for broker_id in cluster.brokers:
        cluster.wait_for(lambda broker_id=broker_id: txn_index_entries(cluster, broker_id, topic)
                         == [AbortedTxn(aborted.producer_id, 1, 6, 3)], 15, f"broker {broker_id}'s .txnindex")


def test_an_open_transaction_holds_read_committed_readers_at_the_lso(cluster: BrokerCluster) -> None:
    topic = new_topic(cluster)
    plain(cluster, topic, [b"first"])  # 0
    producer = Producer(cluster, topic)
    producer.send([b"pending-1"])  # 1, opens the transaction
    plain(cluster, topic, [b"behind"])  # 2: committed, but behind the open transaction
    assert latest_offset(cluster, topic, READ_COMMITTED) == 1 == kafka_latest_offset(cluster, topic, READ_COMMITTED)
    assert latest_offset(cluster, topic, READ_UNCOMMITTED) == 3 == kafka_latest_offset(cluster, topic,
                                                                                        READ_UNCOMMITTED)
    assert read_values(cluster, topic, "read_committed", 2, timeout=3) == [b"first"]
    assert read_values(cluster, topic, "read_uncommitted", 3) == [b"first", b"pending-1", b"behind"]

    # Consumer lag: up to the high watermark for read_uncommitted, the LSO for read_committed.
    group = f"lag-{uuid.uuid4().hex[:8]}"
    committer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        committer.commit({TopicPartition(topic, 0): OffsetAndMetadata(0)})
    finally:
        committer.close()
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        lag = admin.consumer_group_lag(group)[TopicPartition(topic, 0)]
        assert (lag.log_end_offset, lag.lag) == (3, 3)
        lag = admin.consumer_group_lag(group, isolation_level="read_committed")[TopicPartition(topic, 0)]
        assert (lag.log_end_offset, lag.lag) == (1, 1)

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        seen = [record.value for records in consumer.poll(timeout_ms=3_000).values() for record in records]
        assert seen == [b"first"] and consumer.position(partition) == 1  # held at the LSO
        producer.send([b"pending-2"])  # 3
        producer.end(committed=True)  # 4
        deadline = time.monotonic() + 15
        while len(seen) < 4 and time.monotonic() < deadline:
            seen.extend(record.value for records in consumer.poll(timeout_ms=500).values() for record in records)
        assert seen == [b"first", b"pending-1", b"behind", b"pending-2"]
        assert consumer.position(partition) == 5  # past the marker
    finally:
        consumer.close()
    assert latest_offset(cluster, topic, READ_COMMITTED) == 5


def test_kill_9_of_the_leader_the_followers_agree_and_recovery_rebuilds_the_txn_state(
        cluster: BrokerCluster) -> None:
    topic = new_topic(cluster)
    aborted = Producer(cluster, topic)
    aborted.send([b"gone-1", b"gone-2"])  # 0..1
    plain(cluster, topic, [b"kept-1"])  # 2
    aborted.end(committed=False)  # 3
    still_open = Producer(cluster, topic)
    still_open.send([b"open-1"])  # 4, left open
    plain(cluster, topic, [b"kept-2"])  # 5
    cluster.wait_in_sync(topic)
    expected_entries = [AbortedTxn(aborted.producer_id, 0, 3, 4)]

    old_leader = leader_of(cluster, topic)
    cluster.brokers[old_leader].kill()
    cluster.wait_for(lambda: cluster.partitions(topic)[0]["leader"] not in (-1, old_leader), 30, "a new leader")
    # The new leader's own producer state and .txnindex (built from replication) answer alike.
    assert latest_offset(cluster, topic, READ_COMMITTED) == 4
    assert read_values(cluster, topic, "read_committed", 1, timeout=3) == [b"kept-1"]

    # A torn .txnindex write: the restarted broker must rebuild the index from its markers.
    directory = cluster.brokers[old_leader].directory / "data" / files.partition_dir_name(topic, 0)
    [index_path] = directory.glob(f"*{files.TXN_INDEX_SUFFIX}")
    index_path.write_bytes(index_path.read_bytes()[:20])
    cluster.brokers[old_leader].start()
    cluster.brokers[old_leader].wait_ready()
    cluster.wait_in_sync(topic)
    for broker_id in cluster.brokers:
        cluster.wait_for(lambda broker_id=broker_id: txn_index_entries(cluster, broker_id, topic)
                         == expected_entries, 15, f"broker {broker_id}'s .txnindex")

    # Back to the recovered broker as leader (preferred election after the others step aside).
    cluster.call("POST", "/v1/admin/elect_leaders", {"election_type": "preferred",
                                                     "partitions": [{"topic": topic, "partition": 0}]})
    cluster.wait_for(lambda: cluster.partitions(topic)[0]["leader"] == old_leader, 30, "the old leader again")
    # Once its high watermark is back (the followers fetched from it), its rebuilt state holds
    # read_committed at the open transaction.
    cluster.wait_for(lambda: latest_offset(cluster, topic, READ_UNCOMMITTED) == 6, 30, "the high watermark")
    assert latest_offset(cluster, topic, READ_COMMITTED) == 4
    still_open.end(committed=True)  # 6: its producer state accepts the marker of that epoch
    assert read_values(cluster, topic, "read_committed", 3) == [b"kept-1", b"open-1", b"kept-2"]
    assert latest_offset(cluster, topic, READ_COMMITTED) == 7
