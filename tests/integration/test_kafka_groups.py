"""Groups, offsets and admin over the Kafka protocol, with real unmodified clients.

kafka-python, aiokafka and confluent-kafka (librdkafka) consumers join groups, commit and rebalance against
real kafkalite brokers (the Kafka protocol on the HTTP port); a kafka-python consumer and a
kafkalite consumer share one group's partitions; offsets committed over one protocol are read
over the other; confluent-kafka's AdminClient creates, describes, alters and deletes topics and
lists, describes and deletes groups.

Each consumer is polled by its own thread (a consumer's calls stay on one thread), and the test
waits for conditions with a deadline: JoinGroup parks until every member rejoins, so two
consumers polled in turn by one thread could hold each other up.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from kafkalite import (
    KafkaConsumer as KafkaliteConsumer,
    KafkaProducer as KafkaliteProducer,
    TopicPartition as KafkaliteTopicPartition,
)
from tests.support.cluster import BrokerCluster, running_cluster

pytestmark = pytest.mark.integration

PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    with running_cluster(tmp_path_factory, zookeeper, "kafka-groups") as brokers:
        yield brokers


def _topic(cluster: BrokerCluster, partitions: int = PARTITIONS) -> str:
    name = f"kg-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(name, partitions=partitions, replication_factor=3)
    # every broker's metadata must know the leaders: a client's first metadata answer (from any
    # broker) decides which partitions its group's leader assigns
    for broker_id in cluster.brokers:
        cluster.wait_for(lambda broker=broker_id: len([item for item in cluster.partitions(name, broker)
                                                       if item["leader"] > 0]) == partitions, 30,
                         f"leaders for {name} in broker {broker_id}'s metadata")
    return name


def _produce(cluster: BrokerCluster, topic: str, per_partition: int, start: int = 0,
             partitions: int = PARTITIONS) -> None:
    """``per_partition`` records to each partition (values ``p<partition>-<index>``), with kafkalite's producer."""
    producer = KafkaliteProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    try:
        for partition in range(partitions):
            for index in range(start, start + per_partition):
                producer.send(topic, value=f"p{partition}-{index}".encode(), partition=partition)
        producer.flush(30)
    finally:
        producer.close()


def _wait(predicate: Callable[[], bool], timeout: float, what: str,
          state: Callable[[], str] | None = None) -> None:
    """Wait for ``predicate``; on timeout fail with ``what`` and what ``state()`` tells of the cluster."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            detail = f"\n{state()}" if state is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(0.05)


def _cluster_state(cluster: BrokerCluster, topic: str, lines: int = 30) -> str:
    """Each broker's metadata of ``topic`` and the tail of its log: what a timed-out wait reports."""
    parts = []
    for broker_id, broker in cluster.brokers.items():
        try:
            metadata: Any = cluster.partitions(topic, broker_id)
        except Exception as exc:  # the report must not hide the timeout it explains
            metadata = repr(exc)
        parts.append(f"broker {broker_id} metadata of {topic}: {metadata}\n{broker.log_tail(lines)}")
    return "\n".join(parts)


class Poller:
    """Polls one consumer on its own thread; records what it got and its current assignment."""

    def __init__(self, make: Callable[[], Any], name: str, poll_timeout_ms: int = 100) -> None:
        self.make, self.name, self.poll_timeout_ms = make, name, poll_timeout_ms
        self.records: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.assignment: set[int] = set()
        self.failure: BaseException | None = None
        self.commands: list[Callable[[Any], None]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        consumer = None
        try:
            consumer = self.make()
            while not self._stop.is_set():
                with self._lock:
                    commands, self.commands = self.commands, []
                for command in commands:
                    command(consumer)
                for batch in consumer.poll(timeout_ms=self.poll_timeout_ms).values():
                    with self._lock:
                        self.records.extend((record.partition, record.offset, record.value) for record in batch)
                self.assignment = {tp.partition for tp in consumer.assignment()}
        except BaseException as exc:  # reported by the test thread
            self.failure = exc
        finally:
            if consumer is not None:
                consumer.close()

    def run(self, command: Callable[[Any], Any], timeout: float = 30) -> Any:
        """Run ``command(consumer)`` on the polling thread; its result."""
        done = threading.Event()
        outcome: list[Any] = []

        def call(consumer: Any) -> None:
            try:
                outcome.append(command(consumer))
            except Exception as exc:
                outcome.append(exc)
            done.set()

        with self._lock:
            self.commands.append(call)
        assert done.wait(timeout), f"{self.name}: command did not run in {timeout} s"
        if isinstance(outcome[0], Exception):
            raise outcome[0]
        return outcome[0]

    def got(self) -> list[tuple[int, int, bytes]]:
        self.check()
        with self._lock:
            return list(self.records)

    def check(self) -> None:
        if self.failure is not None:
            raise AssertionError(f"{self.name} failed: {self.failure!r}") from self.failure

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), f"{self.name} did not close"
        self.check()


#: kafka-python 3.0.12 returns from a poll whose timeout ends mid-rebalance and goes on in the next
#: poll. With 100 ms polls, a member that rejoined right after its first assignment stayed in its
#: rebalance state in about 3 runs of 10 (no heartbeats until the broker ended its session; its
#: commits refused with RebalanceInProgressError). Polls long enough for a join and a sync: 0 of 10.
KAFKA_PYTHON_POLL_MS = 1000


def _kafka_python(cluster: BrokerCluster, topic: str, group: str) -> Callable[[], Any]:
    from kafka import KafkaConsumer

    def make() -> Any:
        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group, auto_offset_reset="earliest",
                                 enable_auto_commit=False, session_timeout_ms=10_000, heartbeat_interval_ms=500,
                                 client_id="kafka-python", metadata_max_age_ms=2000)
        # the topic's partitions known before joining: a leader without them assigns nothing
        # (kafka-python: "No partition metadata for topic") and depends on a later rejoin
        _wait(lambda: len(consumer.partitions_for_topic(topic) or ()) == PARTITIONS, 30,
              f"kafka-python's metadata of {topic}")
        consumer.subscribe([topic])
        return consumer

    return make


def _kafkalite(cluster: BrokerCluster, topic: str, group: str) -> Callable[[], Any]:
    return lambda: KafkaliteConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group,
                                     auto_offset_reset="earliest", enable_auto_commit=False,
                                     session_timeout_ms=10_000, heartbeat_interval_ms=500)


def _split(first: Poller, second: Poller) -> bool:
    return (len(first.assignment) == len(second.assignment) == PARTITIONS // 2
            and not first.assignment & second.assignment)


def test_kafka_python_group_commits_and_a_second_member_splits_the_partitions(cluster: BrokerCluster) -> None:
    from kafka import TopicPartition

    topic, group = _topic(cluster), f"kp-group-{uuid.uuid4().hex[:8]}"
    _produce(cluster, topic, 25)
    first = Poller(_kafka_python(cluster, topic, group), "first", poll_timeout_ms=KAFKA_PYTHON_POLL_MS)
    second = None
    try:
        _wait(lambda: len(first.got()) == 25 * PARTITIONS, 60, "the first member to read every record")
        assert first.assignment == set(range(PARTITIONS))
        first.run(lambda consumer: consumer.commit())
        committed = first.run(lambda consumer: [consumer.committed(TopicPartition(topic, number))
                                                for number in range(PARTITIONS)])
        assert committed == [25] * PARTITIONS

        second = Poller(_kafka_python(cluster, topic, group), "second", poll_timeout_ms=KAFKA_PYTHON_POLL_MS)
        _wait(lambda: _split(first, second), 60, "the two members to split the partitions")
        _produce(cluster, topic, 10, start=25)
        _wait(lambda: len(first.got()) + len(second.got()) == 35 * PARTITIONS, 60, "the new records")
        late = first.got()[25 * PARTITIONS:] + second.got()
        # the second member starts at the committed offsets: nothing before them is read again
        assert sorted((partition, offset) for partition, offset, _ in late) == sorted(
            (partition, offset) for partition in range(PARTITIONS) for offset in range(25, 35))
        assert {partition for partition, _, _ in second.got()} == second.assignment
    finally:
        first.close()
        if second is not None:
            second.close()


def test_aiokafka_group_consumer_commits_and_a_new_member_resumes_there(cluster: BrokerCluster) -> None:
    import aiokafka

    topic, group = _topic(cluster), f"aio-group-{uuid.uuid4().hex[:8]}"
    partitions = [aiokafka.TopicPartition(topic, number) for number in range(PARTITIONS)]

    async def produce(start: int, count: int) -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all",
                                             enable_idempotence=True)
        await producer.start()
        try:
            for index in range(start, start + count):
                for number in range(PARTITIONS):
                    await producer.send(topic, value=f"p{number}-{index}".encode(), partition=number)
            await producer.flush()
        finally:
            await producer.stop()

    async def consume(wanted: int) -> tuple[list[tuple[int, int]], list[int | None], set[int]]:
        """A group member reads ``wanted`` records, commits, and reports what it read, the
        group's committed offsets and its assignment."""
        consumer = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group,
                                             enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        seen: list[tuple[int, int]] = []
        try:
            deadline = time.monotonic() + 60
            while len(seen) < wanted and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                seen.extend((record.partition, record.offset) for records in batches.values() for record in records)
            await consumer.commit()
            committed = [await consumer.committed(tp) for tp in partitions]
            assignment = {tp.partition for tp in consumer.assignment()}
        finally:
            await consumer.stop()
        return seen, committed, assignment

    async def scenario() -> None:
        await produce(0, 20)
        seen, committed, assignment = await consume(20 * PARTITIONS)
        assert assignment == set(range(PARTITIONS))
        assert sorted(seen) == [(number, offset) for number in range(PARTITIONS) for offset in range(20)]
        assert committed == [20] * PARTITIONS
        await produce(20, 5)
        # a new member of the group starts at the committed offsets: nothing is read twice
        seen, committed, _ = await consume(5 * PARTITIONS)
        assert sorted(seen) == [(number, offset) for number in range(PARTITIONS) for offset in range(20, 25)]
        assert committed == [25] * PARTITIONS

    asyncio.run(scenario())


def test_a_kafka_python_and_a_kafkalite_consumer_share_one_group(cluster: BrokerCluster) -> None:
    topic, group = _topic(cluster), f"mixed-{uuid.uuid4().hex[:8]}"
    _produce(cluster, topic, 20)
    kafka_side = Poller(_kafka_python(cluster, topic, group), "kafka-python", poll_timeout_ms=KAFKA_PYTHON_POLL_MS)
    kafkalite_side = None
    try:
        _wait(lambda: kafka_side.assignment == set(range(PARTITIONS)), 60, "kafka-python to own every partition")
        kafkalite_side = Poller(_kafkalite(cluster, topic, group), "kafkalite")
        _wait(lambda: _split(kafka_side, kafkalite_side), 60, "the rebalance to split the partitions")
        mine, theirs = kafka_side.assignment, kafkalite_side.assignment
        _produce(cluster, topic, 5, start=20)
        _wait(lambda: {(p, o) for p, o, _ in kafkalite_side.got()} >= {(p, o) for p in theirs for o in range(25)},
              60, "the kafkalite member to read its partitions")
        _wait(lambda: {(p, o) for p, o, _ in kafka_side.got()} >= {(p, o) for p in mine for o in range(20, 25)},
              60, "the kafka-python member to read the new records of its partitions")
        assert {partition for partition, _, _ in kafkalite_side.got()} == theirs
        assert {partition for partition, offset, _ in kafka_side.got() if offset >= 20} == mine
        assert all(value == f"p{partition}-{offset}".encode() for partition, offset, value in kafkalite_side.got())
    finally:
        kafka_side.close()
        if kafkalite_side is not None:
            kafkalite_side.close()


def test_offsets_committed_over_one_protocol_are_read_over_the_other(cluster: BrokerCluster) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    topic, group = _topic(cluster, partitions=2), f"offsets-{uuid.uuid4().hex[:8]}"
    kafka_consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False)
    kafkalite_consumer = KafkaliteConsumer(bootstrap_servers=cluster.bootstrap, group_id=group,
                                           enable_auto_commit=False)
    try:
        kafka_consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(17, "over kafka", -1)})
        committed = kafkalite_consumer.committed(KafkaliteTopicPartition(topic, 0), metadata=True)
        assert (committed.offset, committed.metadata) == (17, "over kafka")

        from kafkalite.client.types import OffsetAndMetadata as KafkaliteOffset
        kafkalite_consumer.commit({KafkaliteTopicPartition(topic, 1): KafkaliteOffset(23, "over http", -1)})
        assert kafka_consumer.committed(TopicPartition(topic, 1)) == 23
        assert kafka_consumer.committed(TopicPartition(topic, 1), metadata=True).metadata == "over http"
    finally:
        kafka_consumer.close()
        kafkalite_consumer.close()


_NO_TOPIC = SimpleNamespace(partitions={})


def _partition_count(cluster: BrokerCluster, topic: str) -> int:
    """The partitions of ``topic`` in the cluster's metadata (0: no such topic)."""
    topics = cluster.metadata([topic])["topics"]
    return len(topics[0]["partitions"]) if topics and topics[0].get("error_code", 0) == 0 else 0


def test_confluent_kafka_group_consumer_and_admin_client(cluster: BrokerCluster) -> None:
    from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic, group = f"cf-{uuid.uuid4().hex[:10]}", f"cf-group-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 3, 3, config={"retention.ms": "3600000"})])[topic].result(30)
    _wait(lambda: len(admin.list_topics(timeout=10).topics.get(topic, _NO_TOPIC).partitions) == 3, 30,
          "the new topic in librdkafka's all-topics metadata")
    _wait(lambda: _partition_count(cluster, topic) == 3, 30, "the new topic in metadata")

    def config(name: str) -> str:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        return str(admin.describe_configs([resource])[resource].result(30)[name].value)

    assert config("retention.ms") == "3600000"
    incremental = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([incremental])[incremental].result(30)
    _wait(lambda: config("retention.ms") == "7200000", 30, "the altered config")

    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    _wait(lambda: _partition_count(cluster, topic) == 4, 30, "4 partitions")
    cluster.wait_for(lambda: all(item["leader"] > 0 for item in cluster.partitions(topic)), 30, "leaders")
    _produce(cluster, topic, 5)

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 10_000})
    try:
        consumer.subscribe([topic])
        seen: list[tuple[int, int]] = []
        deadline = time.monotonic() + 60
        while len(seen) < 5 * PARTITIONS:
            assert time.monotonic() < deadline, f"read {len(seen)} records"
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.append((message.partition(), message.offset()))
        assert sorted(seen) == [(partition, offset) for partition in range(PARTITIONS) for offset in range(5)]
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, number) for number in range(PARTITIONS)], timeout=30)
        assert [item.offset for item in committed] == [5] * PARTITIONS

        listed = admin.list_consumer_groups().result(30)
        assert group in {item.group_id for item in listed.valid}
        description = admin.describe_consumer_groups([group])[group].result(30)
        assert description.state == ConsumerGroupState.STABLE
        assert len(description.members) == 1
        assert {tp.partition for tp in description.members[0].assignment.topic_partitions} == set(range(PARTITIONS))
    finally:
        consumer.close()

    admin.delete_consumer_groups([group])[group].result(30)
    assert group not in {item.group_id for item in admin.list_consumer_groups().result(30).valid}
    admin.delete_topics([topic])[topic].result(30)
    _wait(lambda: _partition_count(cluster, topic) == 0, 30, "the topic to go")


def test_kafka_python_leader_that_joined_before_the_partitions_existed_keeps_its_member_id(
        cluster: BrokerCluster) -> None:
    """A kafka-python leader joins while its topic has one partition (auto-created by its own
    Metadata request), the topic grows to four, the leader rejoins for the new metadata and a
    second member joins: both keep their member ids through the rebalances (no UNKNOWN_MEMBER_ID
    drops a known member) and split the four partitions."""
    from confluent_kafka.admin import AdminClient, NewPartitions
    from kafka import KafkaConsumer

    topic, group = f"kg-late-{uuid.uuid4().hex[:8]}", f"kp-late-{uuid.uuid4().hex[:8]}"

    def make() -> Any:
        return KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=10_000,
                             heartbeat_interval_ms=500, client_id="kafka-python", metadata_max_age_ms=1000)

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def member_ids() -> dict[str, set[int]]:
        description = admin.describe_consumer_groups([group])[group].result(30)
        return {member.member_id: {tp.partition for tp in member.assignment.topic_partitions}
                for member in description.members}

    # Polls longer than a join round trip on a loaded machine: kafka-python (3.0) leaves a
    # JoinGroup/SyncGroup that a poll's timeout cut off to the next poll, and a leader whose own
    # assignment already matches the metadata does not take that next poll's answer up, so it
    # never applies the new generation and the group expires it.
    def poller(name: str) -> Poller:
        return Poller(make, name, poll_timeout_ms=2000)

    first = poller("first")
    second = None
    try:
        _wait(lambda: first.assignment == {0}, 60, "the first member to own the topic's one partition",
              lambda: f"assignment {first.assignment}, failure {first.failure!r}, "
                      f"group {admin.describe_consumer_groups([group])[group].result(30)}\n"
                      f"{_cluster_state(cluster, topic)}")
        (leader_id,) = member_ids()
        admin.create_partitions([NewPartitions(topic, PARTITIONS)])[topic].result(30)
        _wait(lambda: first.assignment == set(range(PARTITIONS)), 60, "the leader to rejoin for four partitions")
        assert list(member_ids()) == [leader_id]
        second = poller("second")
        _wait(lambda: _split(first, second), 60, "the two members to split the partitions")
        members = member_ids()
        assert leader_id in members and len(members) == 2
        assert sorted(len(partitions) for partitions in members.values()) == [2, 2]
        first.check()
        second.check()
    finally:
        first.close()
        if second is not None:
            second.close()
