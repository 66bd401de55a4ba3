"""Transactions (KIP-98) end to end on three real brokers: the transaction coordinator on the
leader of a ``__transaction_state`` partition, markers written by partition leaders, pending
transactional offset commits, read_committed consumers.

- confluent-kafka's (librdkafka's) transactional producer over the Kafka listener: a committed
  transaction with offsets sent to it, and an aborted one; a read_committed confluent-kafka
  consumer sees exactly the committed records, and the group's offsets are those committed in
  the transaction;
- kafkalite's transactional producer (HTTP front end) the same way, read back by confluent-kafka;
- zombie fencing: a second producer with the same transactional.id fences the first, whose
  commit then fails with PRODUCER_FENCED, and whose open transaction is aborted;
- the coordinator aborts a transaction open past its transaction.timeout.ms;
- kafkajs's transactional producer (seed 003's ``transactionalId``) commits a transaction.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalite import protocol
from kafkalite.client import AIOKafkaProducer, KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafkalite.errors import IllegalStateError, KafkaliteError, ProducerFencedError
from kafkalite.record.batch import build_batch
from kafkalite.transport import AsyncTransport
from tests.support.cluster import ROOT, BrokerCluster, running_cluster

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")

JS_DIR = ROOT / "tests" / "js"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory, zookeeper, "transactions", extra_properties={
            "transaction.max.timeout.ms": "60000",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}) as brokers:
        yield brokers


def _topic(cluster: BrokerCluster, prefix: str, partitions: int = 3) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(name, partitions=partitions, replication_factor=3, configs={"min.insync.replicas": "2"})
    cluster.wait_for(lambda: all(item["leader"] > 0 for item in cluster.partitions(name)), 30, f"leaders of {name}")
    cluster.wait_for(lambda: all(len(cluster.partitions(name, broker_id)) == partitions
                                 for broker_id in cluster.brokers), 30, f"every broker's metadata of {name}")
    return name


def _read_committed(cluster: BrokerCluster, topic: str, expected: int, isolation: str = "read_committed",
                    settle_s: float = 3.0) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record a confluent-kafka consumer with ``isolation`` reads from the start of
    ``topic``: polls until ``expected`` records arrived and nothing more came for ``settle_s``."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": isolation})
    try:
        consumer.subscribe([topic])
        records: list[tuple[int, int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 60
        quiet_until = None
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                if len(records) >= expected:
                    quiet_until = quiet_until or time.monotonic() + settle_s
                    if time.monotonic() >= quiet_until:
                        break
                continue
            if message.error():
                assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, message.error()
                continue
            quiet_until = None
            records.append((message.partition(), message.offset(), message.key(), message.value()))
        return records
    finally:
        consumer.close()


def _confluent_producer(cluster: BrokerCluster, transactional_id: str, **extra: Any) -> Any:
    return confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id,
                                     "linger.ms": 5, **extra})


def _committed_offsets(cluster: BrokerCluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        answers = consumer.committed([confluent_kafka.TopicPartition(topic, number) for number in range(partitions)],
                                     timeout=30)
        return {item.partition: item.offset for item in answers}
    finally:
        consumer.close()


def test_confluent_transactional_producer_commit_and_abort(cluster: BrokerCluster) -> None:
    output = _topic(cluster, "out")
    group = f"copier-{uuid.uuid4().hex[:6]}"
    producer = _confluent_producer(cluster, f"tx-{uuid.uuid4().hex[:6]}")
    producer.init_transactions(30)

    producer.begin_transaction()
    for index in range(30):
        producer.produce(output, key=f"k{index}".encode(), value=f"committed-{index}".encode())
    producer.send_offsets_to_transaction(
        [confluent_kafka.TopicPartition("input", 0, 30)],
        confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
        .consumer_group_metadata(), 30)
    producer.commit_transaction(30)

    producer.begin_transaction()
    for index in range(20):
        producer.produce(output, key=f"k{index}".encode(), value=f"aborted-{index}".encode())
    producer.flush(30)
    producer.abort_transaction(30)

    producer.begin_transaction()
    producer.produce(output, key=b"last", value=b"committed-last")
    producer.commit_transaction(30)

    committed = _read_committed(cluster, output, 31)
    assert sorted(value for _, _, _, value in committed) == sorted(
        [f"committed-{index}".encode() for index in range(30)] + [b"committed-last"])
    everything = _read_committed(cluster, output, 51, isolation="read_uncommitted")
    assert sorted(value for _, _, _, value in everything if value.startswith(b"aborted")) == sorted(
        f"aborted-{index}".encode() for index in range(20))
    assert _committed_offsets(cluster, group, "input", 1) == {0: 30}


def test_kafkalite_transactional_producer(cluster: BrokerCluster) -> None:
    output = _topic(cluster, "kl-out")
    group = f"kl-copier-{uuid.uuid4().hex[:6]}"
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=f"kl-{uuid.uuid4().hex[:6]}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for index in range(25):
            producer.send(output, key=f"k{index}".encode(), value=f"committed-{index}".encode())
        producer.send_offsets_to_transaction({TopicPartition("input", 1): OffsetAndMetadata(25)}, group)
        coordinator = cluster.call("POST", "/v1/groups/find_coordinator", {"key": group})["node_id"]
        pending = cluster.call("POST", "/v1/groups/offset_fetch", {
            "group_id": group, "topics": [{"name": "input", "partitions": [1]}], "require_stable": True},
            broker_id=coordinator)
        assert pending["topics"][0]["partitions"][0]["error"] == "UNSTABLE_OFFSET_COMMIT"
        producer.commit_transaction()

        producer.begin_transaction()
        for index in range(10):
            producer.send(output, key=f"k{index}".encode(), value=f"aborted-{index}".encode())
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close()
    committed = _read_committed(cluster, output, 25)
    assert sorted(value for _, _, _, value in committed) == sorted(f"committed-{index}".encode()
                                                                   for index in range(25))
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group, isolation_level="read_committed")
    try:
        assert consumer.committed(TopicPartition("input", 1)) == 25
    finally:
        consumer.close()


def test_the_asyncio_producer_commits_and_aborts(cluster: BrokerCluster) -> None:
    output = _topic(cluster, "aio-out", partitions=1)

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:6]}")
        await producer.start()
        try:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send_and_wait(output, b"one")
            await producer.send(output, b"two")
            await producer.commit_transaction()
            producer.begin_transaction()
            await producer.send(output, b"gone")
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(produce())
    assert [value for _, _, _, value in sorted(_read_committed(cluster, output, 2))] == [b"one", b"two"]


def test_a_second_producer_fences_the_first(cluster: BrokerCluster) -> None:
    output = _topic(cluster, "fenced", partitions=1)
    transactional_id = f"zombie-{uuid.uuid4().hex[:6]}"
    first = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=transactional_id)
    try:
        first.init_transactions()
        first.begin_transaction()
        first.send(output, value=b"from-the-zombie").get(30)
        second = _confluent_producer(cluster, transactional_id)
        second.init_transactions(30)  # fences the first and aborts its open transaction
        second.begin_transaction()
        second.produce(output, value=b"from-the-successor")
        second.commit_transaction(30)
        with pytest.raises(ProducerFencedError):
            first.commit_transaction()
    finally:
        first.close()
    values = [value for _, _, _, value in _read_committed(cluster, output, 1)]
    assert values == [b"from-the-successor"]


def test_the_coordinator_aborts_a_transaction_open_past_its_timeout(cluster: BrokerCluster) -> None:
    output = _topic(cluster, "timeout", partitions=1)
    producer = _confluent_producer(cluster, f"slow-{uuid.uuid4().hex[:6]}", **{"transaction.timeout.ms": 8000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(output, value=b"never-committed")
    producer.flush(30)

    assert _stable_offset(cluster, output) == 0  # the open transaction holds read_committed readers
    # the LSO passes the transaction once the coordinator's abort marker (offset 1) is written
    cluster.wait_for(lambda: _stable_offset(cluster, output) == 2, 40,
                     "the coordinator's abort of the timed-out transaction")
    assert _read_committed(cluster, output, 0, settle_s=1.0) == []
    with pytest.raises(confluent_kafka.KafkaException):
        producer.commit_transaction(10)


def test_kafkajs_transactional_producer(cluster: BrokerCluster, tmp_path: Path) -> None:
    assert shutil.which("node") is not None, "node is missing: Node 20 is a prerequisite (README)"
    assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "kafkajs is missing: scripts/install.sh installs it"
    output = _topic(cluster, "js-orders")
    script = tmp_path / "transactional.js"
    script.write_text(f"""
const {{ Kafka }} = require('kafkajs');
const kafka = new Kafka({{ clientId: 'order-service', brokers: ['{cluster.bootstrap.split(",")[0]}'] }});
const producer = kafka.producer({{ idempotent: true, transactionalId: 'order-producer-1', maxInFlightRequests: 1 }});
async function main() {{
  await producer.connect();
  const committed = await producer.transaction();
  await committed.send({{ topic: '{output}', messages: [
    {{ key: 'CUST-42', value: 'ORD-001' }}, {{ key: 'CUST-1', value: 'ORD-002' }} ] }});
  await committed.sendOffsets({{ consumerGroupId: 'order-processing',
    topics: [{{ topic: 'input', partitions: [{{ partition: 0, offset: '2' }}] }}] }});
  await committed.commit();
  const aborted = await producer.transaction();
  await aborted.send({{ topic: '{output}', messages: [{{ key: 'CUST-2', value: 'ORD-003' }}] }});
  await aborted.abort();
  await producer.disconnect();
  console.log('done');
}}
main().catch((error) => {{ console.error(error); process.exit(1); }});
""")
    env = {**os.environ, "NODE_PATH": str(JS_DIR / "node_modules"), "KAFKAJS_NO_PARTITIONER_WARNING": "1"}
    result = subprocess.run(["node", str(script)], capture_output=True, timeout=120, env=env)
    assert result.returncode == 0 and result.stdout.decode().strip() == "done", result.stderr.decode()
    values = sorted(value for _, _, _, value in _read_committed(cluster, output, 2))
    assert values == [b"ORD-001", b"ORD-002"]
    assert _committed_offsets(cluster, "order-processing", "input", 1) == {0: 2}


def _transactions_tool(cluster: BrokerCluster, *arguments: str) -> tuple[int, list[list[str]], str]:
    """Run scripts/kafkalite-transactions.sh: exit code, output rows split on whitespace, stderr."""
    result = subprocess.run([str(ROOT / "scripts" / "kafkalite-transactions.sh"), "--bootstrap-server",
                             cluster.bootstrap, *arguments], capture_output=True, text=True, timeout=120)
    return result.returncode, [line.split() for line in result.stdout.splitlines()], result.stderr


def _produce_orphan(cluster: BrokerCluster, topic: str, producer_id: int) -> None:
    """A transactional batch no coordinator knows of (its producer never registered): the
    partition's transaction stays open, a hanging transaction."""
    leader = next(item["leader"] for item in cluster.partitions(topic) if item["partition"] == 0)
    batch = build_batch([b"orphan"], producer_id=producer_id, producer_epoch=0, base_sequence=0, transactional=True)
    request = protocol.ProduceRequest(-1, 30_000, [protocol.ProducePartition(topic, 0, batch)])

    async def send() -> list[protocol.ProduceResult]:
        transport = AsyncTransport(request_timeout_ms=30_000)
        try:
            payload = await transport.request(cluster.brokers[leader].address, "POST", protocol.PRODUCE,
                                              body=protocol.encode_produce_request(request))
            return protocol.decode_produce_response(payload)
        finally:
            await transport.close()

    assert [result.error_code for result in asyncio.run(send())] == [0]


def _stable_offset(cluster: BrokerCluster, topic: str) -> int:
    """ListOffsets(latest) under read_committed: the partition's last stable offset."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "lso-probe",
                                         "isolation.level": "read_committed"})
    try:
        return int(consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def test_the_transactions_tool_lists_describes_finds_and_aborts_hanging_transactions(cluster: BrokerCluster) -> None:
    ongoing, hanging = _topic(cluster, "tool-ongoing", partitions=1), _topic(cluster, "tool-hanging", partitions=1)
    transactional_id = f"tool-{uuid.uuid4().hex[:6]}"
    producer = _confluent_producer(cluster, transactional_id)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(ongoing, value=b"open")
    producer.flush(30)

    code, rows, _ = _transactions_tool(cluster, "list")
    assert code == 0 and rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    [listed] = [row for row in rows if row[0] == transactional_id]
    assert listed[3] == "Ongoing"
    producer_id = listed[2]
    code, rows, _ = _transactions_tool(cluster, "describe", "--transactional-id", transactional_id)
    assert code == 0 and rows[1][1:5] == [transactional_id, producer_id, "0", "Ongoing"]
    assert rows[1][-1] == f"{ongoing}-0"
    code, rows, _ = _transactions_tool(cluster, "describe-producers", "--topic", ongoing, "--partition", "0")
    assert code == 0 and [row[0] for row in rows[1:]] == [producer_id] and rows[1][-1] == "0"

    orphan = 987_654_321
    _produce_orphan(cluster, hanging, orphan)
    assert _stable_offset(cluster, hanging) == 0
    leaders = {item["leader"] for topic in (ongoing, hanging) for item in cluster.partitions(topic)}
    found = []
    for broker_id in sorted(leaders):
        code, rows, _ = _transactions_tool(cluster, "find-hanging", "--broker-id", str(broker_id),
                                           "--max-transaction-timeout", "0")
        assert code == 0
        found += rows[1:]
    # the orphan hangs; the ongoing transaction its coordinator knows does not
    assert [(row[0], row[2], row[5]) for row in found] == [(hanging, str(orphan), "0")]
    code, rows, _ = _transactions_tool(cluster, "abort", "--topic", hanging, "--partition", "0", "--start-offset", "0")
    assert code == 0, rows
    cluster.wait_for(lambda: _stable_offset(cluster, hanging) == 2, 30, "the abort marker")
    code, rows, error = _transactions_tool(cluster, "abort", "--topic", hanging, "--partition", "0",
                                           "--start-offset", "0")
    assert code == 1 and "no open transaction" in error

    producer.commit_transaction(30)
    code, rows, error = _transactions_tool(cluster, "describe", "--transactional-id", "no-such-id")
    assert code == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in error


# -- the transactional copier under kill -9 --------------------------------------------------------
RECORDS_PER_PARTITION = 500
COPIER_ID = "copier-1"


class Copier(threading.Thread):
    """Kafka's TransactionalMessageCopier: read the input partitions (read_committed), write
    each record to the same partition of the output topic and commit the input offsets in the
    same transaction; an abortable error aborts and rewinds to the committed offsets, a
    retriable one retries the commit. ``client`` is "confluent" (confluent-kafka for both) or
    "kafkalite" (kafkalite's KafkaConsumer and transactional KafkaProducer)."""

    def __init__(self, cluster: BrokerCluster, source: str, target: str, partitions: int, client: str) -> None:
        super().__init__(name="copier", daemon=True)
        self.cluster, self.source, self.target, self.partitions = cluster, source, target, partitions
        self.client = client
        self.transactional_id = f"{COPIER_ID}-{client}"
        self.commits = 0
        self.aborts = 0
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.stop = threading.Event()
        #: Transactions the copier may commit so far: the test moves it on, so that faults come
        #: while records are still being copied.
        self.budget = 0
        self._paced = threading.Condition()

    def allow(self, more: int) -> None:
        with self._paced:
            self.budget += more
            self._paced.notify_all()

    def finish(self) -> None:
        with self._paced:
            self.stop.set()
            self._paced.notify_all()

    def _wait_for_budget(self) -> None:
        with self._paced:
            self._paced.wait_for(lambda: self.commits < self.budget or self.stop.is_set())

    def run(self) -> None:
        try:
            self._copy_confluent() if self.client == "confluent" else self._copy_kafkalite()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.done.set()

    def _copy_confluent(self) -> None:
        debug = {"debug": os.environ["COPIER_RDKAFKA_DEBUG"]} if os.environ.get("COPIER_RDKAFKA_DEBUG") else {}
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": self.cluster.bootstrap, "group.id": "copier-group", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": "read_committed", **debug})
        # librdkafka (up to 2.16 at least) drops a broker that left the cluster's metadata but keeps
        # it as the group's cached coordinator: a send_offsets_to_transaction begun after the group
        # coordinator's broker was killed then waits, past its own timeout, until some connection
        # of the producer goes up or down (librdkafka issues 5511 and 5456). Closing idle
        # connections after 3 s makes that happen during such a wait (the producer is idle then).
        producer = _confluent_producer(self.cluster, self.transactional_id, **{
            "transaction.timeout.ms": 30000, "connections.max.idle.ms": 3000, **debug})
        inputs = [confluent_kafka.TopicPartition(self.source, number) for number in range(self.partitions)]
        try:
            producer.init_transactions(120)
            consumer.assign(inputs)
            while not self.stop.is_set():
                self._wait_for_budget()
                positions = {item.partition: item.offset for item in consumer.position(inputs)}
                if all(positions.get(number, -1) >= RECORDS_PER_PARTITION for number in range(self.partitions)):
                    return
                messages = [message for message in consumer.consume(20, 1.0) if not message.error()]
                if not messages:
                    continue
                producer.begin_transaction()
                for message in messages:
                    producer.produce(self.target, key=message.key(), value=message.value(),
                                     partition=message.partition())
                try:
                    producer.send_offsets_to_transaction(consumer.position(inputs),
                                                         consumer.consumer_group_metadata(), 120)
                    self._commit(producer)
                    self.commits += 1
                except confluent_kafka.KafkaException as exc:
                    if not exc.args[0].txn_requires_abort():
                        raise
                    producer.abort_transaction(120)
                    self.aborts += 1
                    for item in consumer.committed(inputs, timeout=60):
                        consumer.seek(confluent_kafka.TopicPartition(
                            item.topic, item.partition, item.offset if item.offset >= 0 else 0))
        finally:
            consumer.close()

    @staticmethod
    def _commit(producer: Any) -> None:
        while True:
            try:
                producer.commit_transaction(120)
                return
            except confluent_kafka.KafkaException as exc:
                if not exc.args[0].retriable():
                    raise

    def _copy_kafkalite(self) -> None:
        consumer = KafkaConsumer(bootstrap_servers=self.cluster.bootstrap, group_id="copier-group-kafkalite",
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 isolation_level="read_committed")
        producer = KafkaProducer(bootstrap_servers=self.cluster.bootstrap, transactional_id=self.transactional_id,
                                 transaction_timeout_ms=30000)
        inputs = [TopicPartition(self.source, number) for number in range(self.partitions)]
        try:
            producer.init_transactions()
            consumer.assign(inputs)
            while not self.stop.is_set():
                self._wait_for_budget()
                if all(consumer.position(tp) >= RECORDS_PER_PARTITION for tp in inputs):
                    return
                batches = consumer.poll(timeout_ms=1000, max_records=20)
                if not batches:
                    continue
                producer.begin_transaction()
                for tp, records in batches.items():
                    for record in records:
                        producer.send(self.target, key=record.key, value=record.value, partition=tp.partition)
                try:
                    producer.send_offsets_to_transaction(
                        {tp: OffsetAndMetadata(consumer.position(tp)) for tp in inputs}, consumer.group_metadata())
                    producer.commit_transaction()
                    self.commits += 1
                except KafkaliteError as exc:
                    if isinstance(exc, IllegalStateError):  # fatal: fenced, or the producer is unusable
                        raise
                    producer.abort_transaction()
                    self.aborts += 1
                    for tp in inputs:
                        consumer.seek(tp, consumer.committed(tp) or 0)
        finally:
            producer.close()
            consumer.close()

    def wait_commits(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.commits < count and not self.done.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.error is not None:
            raise AssertionError(f"the copier failed: {self.error!r}") from self.error
        assert self.commits >= count or self.done.is_set(), \
            f"only {self.commits} transactions in {timeout} s; the copier is at:\n{self.stack()}"

    def stack(self) -> str:
        """Where the copier thread is now (the call it is blocked in, when it stalls)."""
        frame = sys._current_frames().get(self.ident or 0)
        return "".join(traceback.format_stack(frame)) if frame is not None else "(not running)"


def _transaction_coordinator(cluster: BrokerCluster, transactional_id: str) -> int:
    return int(cluster.call("POST", "/v1/groups/find_coordinator",
                            {"key": transactional_id, "key_type": 1})["node_id"])


def _restart(cluster: BrokerCluster, broker_id: int) -> None:
    broker = cluster.brokers[broker_id]
    broker.start()
    broker.wait_ready()
    cluster.wait_for(lambda: all(len(cluster.describe(other)["brokers"]) == cluster.size
                                 for other in cluster.brokers), 60, f"broker {broker_id} registered again")


@pytest.mark.parametrize("client", ["confluent", "kafkalite"])
def test_transactional_copier_survives_kill_9_of_the_coordinator_and_an_output_leader(
        tmp_path_factory: pytest.TempPathFactory, zookeeper: Any, client: str) -> None:
    with running_cluster(tmp_path_factory, zookeeper, "txn-copier", extra_properties={
            "unclean.leader.election.enable": "false"}) as cluster:
        source, target = _topic(cluster, "copy-in", partitions=2), _topic(cluster, "copy-out", partitions=2)
        loader = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
        for number in range(2):
            for index in range(RECORDS_PER_PARTITION):
                loader.produce(source, key=f"{number}-{index}".encode(), value=f"{number}:{index}".encode(),
                               partition=number)
        assert loader.flush(60) == 0

        copier = Copier(cluster, source, target, 2, client)
        copier.start()
        try:
            copier.allow(4)
            copier.wait_commits(3, 120)
            coordinator = _transaction_coordinator(cluster, copier.transactional_id)
            assert not copier.done.is_set(), f"the copier stopped before the first fault: {copier.error!r}"
            cluster.brokers[coordinator].kill()  # the fourth transaction is being copied meanwhile
            copier.allow(4)  # the fifth to eighth can only start after the kill
            copier.wait_commits(8, 120)
            # another broker took over
            cluster.wait_for(lambda: _transaction_coordinator(cluster, copier.transactional_id) != coordinator,
                             30, f"a transaction coordinator other than broker {coordinator}")
            copier.allow(8)
            _restart(cluster, coordinator)
            cluster.wait_in_sync(target, 60)
            copier.wait_commits(16, 120)
            leader = next(item["leader"] for item in cluster.partitions(target) if item["partition"] == 0)
            assert not copier.done.is_set(), f"the copier stopped before the second fault: {copier.error!r}"
            copier.allow(8)
            copier.wait_commits(18, 120)
            cluster.brokers[leader].kill()
            copier.wait_commits(24, 120)
            copier.allow(1_000_000)
            _restart(cluster, leader)
            assert copier.done.wait(180), f"the copier did not finish ({copier.commits} transactions)"
            if copier.error is not None:
                raise AssertionError(f"the copier failed: {copier.error!r}") from copier.error
        finally:
            copier.finish()
            copier.join(60)
        print(f"copier: {copier.commits} transactions committed, {copier.aborts} aborted")
        copied = _read_committed(cluster, target, 2 * RECORDS_PER_PARTITION)
        for number in range(2):
            values = [value for partition, _, _, value in sorted(copied) if partition == number]
            assert values == [f"{number}:{index}".encode() for index in range(RECORDS_PER_PARTITION)], \
                f"partition {number}: {len(values)} records, {copier.aborts} aborts"
