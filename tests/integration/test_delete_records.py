"""DeleteRecords against three real brokers (RF=3): the admin client and the tool move a
partition's log start offset on every replica, segments below it are deleted, the move
survives a follower's kill -9 and restart, consumers start at the new low watermark (and
reset to it from below), and offsets beyond the high watermark are OFFSET_OUT_OF_RANGE."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalite.client import (
    AIOKafkaAdminClient,
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
    NewTopic,
    TopicPartition,
)
from kafkalite.client.types import RecordsToDelete
from kafkalite.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from kafkalite.storage import checkpoint, files
from tests.support.cluster import ROOT, BrokerCluster, BrokerProcess, running_cluster

pytestmark = pytest.mark.integration
SCRIPT = ROOT / "scripts" / "kafkalite-delete-records.sh"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    with running_cluster(tmp_path_factory, zookeeper, "delete-records") as brokers:
        yield brokers


def create_topic(cluster: BrokerCluster, name: str, leader: int) -> TopicPartition:
    """One partition on all three brokers, ``leader`` first, in segments of about ten records."""
    replicas = [leader] + [broker for broker in sorted(cluster.brokers) if broker != leader]
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name, replica_assignments={0: replicas},
                                      topic_configs={"segment.bytes": "300"})])
    partitions = cluster.wait_in_sync(name)
    assert partitions[0]["leader"] == leader
    return TopicPartition(name, 0)


def produce(cluster: BrokerCluster, topic: str, count: int) -> None:
    with KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all") as producer:
        for index in range(count):
            producer.send(topic, str(index).encode(), partition=0)
            if index % 5 == 4:
                producer.flush()  # batches of five records, a few to a segment
        producer.flush()


def log_start_checkpoint(broker: BrokerProcess, tp: TopicPartition) -> int:
    return checkpoint.read_offsets(broker.directory / "data" / files.LOG_START_CHECKPOINT).get((tp.topic,
                                                                                               tp.partition), -1)


def segment_bases(broker: BrokerProcess, tp: TopicPartition) -> list[int]:
    directory = broker.directory / "data" / f"{tp.topic}-{tp.partition}"
    return sorted(int(path.name[:20]) for path in directory.iterdir() if path.name.endswith(files.LOG_SUFFIX))


def consume_from(cluster: BrokerCluster, tp: TopicPartition, seek_to: int | None, until: int) -> list[int]:
    """Offsets read by a group-less consumer (auto_offset_reset=earliest) from ``seek_to``
    (None: the beginning) until offset ``until`` - 1."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([tp])
        if seek_to is None:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, seek_to)
        offsets: list[int] = []

        def read_all() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    assert int(record.value) == record.offset
                    offsets.append(record.offset)
            return bool(offsets) and offsets[-1] >= until - 1

        cluster.wait_for(read_all, 30, f"records up to {until - 1}")
        return offsets
    finally:
        consumer.close()


def registration(cluster: BrokerCluster, broker_id: int) -> int | None:
    """The broker's registration epoch; None while it is not registered."""
    try:
        return cluster.broker_epoch(broker_id)
    except AssertionError:  # no /brokers/ids/<id>: between the old session's end and the new registration
        return None


def run_tool(*arguments: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(SCRIPT), *arguments], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def offsets_file(directory: Path, document: object) -> str:
    path = directory / f"offsets-{uuid.uuid4().hex[:8]}.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def test_the_tool_prints_kafkas_lines_and_names_bad_input(cluster: BrokerCluster, tmp_path: Path) -> None:
    tp = create_topic(cluster, "trim-tool", leader=2)
    produce(cluster, tp.topic, 20)
    bootstrap = cluster.brokers[1].address  # not the leader: the client finds it
    good = offsets_file(tmp_path, {"partitions": [{"topic": tp.topic, "partition": 0, "offset": 3}], "version": 1})
    done = run_tool("--bootstrap-server", bootstrap, "--offset-json-file", good)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["Executing records delete operation", "Records delete operation completed:",
                                        f"partition: {tp.topic}-0\tlow_watermark: 3"]
    everything = offsets_file(tmp_path, {"partitions": [{"topic": tp.topic, "partition": 0, "offset": -1}]})
    done = run_tool("--bootstrap-server", bootstrap, "--offset-json-file", everything)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == f"partition: {tp.topic}-0\tlow_watermark: 20"

    beyond = offsets_file(tmp_path, {"partitions": [{"topic": tp.topic, "partition": 0, "offset": 21},
                                                    {"topic": "no-such-topic", "partition": 0, "offset": 1}],
                                     "version": 1})
    failed = run_tool("--bootstrap-server", bootstrap, "--offset-json-file", beyond)
    assert failed.returncode == 1
    lines = failed.stdout.splitlines()
    assert lines[2].startswith("partition: no-such-topic-0\terror: UNKNOWN_TOPIC_OR_PARTITION: ")
    assert lines[3].startswith(f"partition: {tp.topic}-0\terror: OFFSET_OUT_OF_RANGE: ")
    assert "could not be deleted" in failed.stderr

    bad_files = {
        "not json": ("{", "is not valid JSON"),
        "no partitions": ({"version": 1}, 'must list "partitions"'),
        "version 2": ({"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 2},
                      "not supported version"),
        "string offset": ({"partitions": [{"topic": "t", "partition": 0, "offset": "1"}]}, "entry 0 needs"),
        "offset -2": ({"partitions": [{"topic": "t", "partition": 0, "offset": -2}]}, "has offset -2"),
        "duplicate": ({"partitions": [{"topic": "t", "partition": 0, "offset": 1},
                                      {"topic": "t", "partition": 0, "offset": 2}]}, "duplicate topic partitions: t-0"),
        "empty": ({"partitions": []}, "lists no partitions"),
    }
    for case, (document, message) in bad_files.items():
        refused = run_tool("--bootstrap-server", bootstrap, "--offset-json-file", offsets_file(tmp_path, document))
        assert refused.returncode == 2 and message in refused.stderr, (case, refused.stderr)
    missing = run_tool("--bootstrap-server", bootstrap, "--offset-json-file", str(tmp_path / "absent.json"))
    assert missing.returncode == 2 and "cannot read --offset-json-file" in missing.stderr
    no_file = run_tool("--bootstrap-server", bootstrap)
    assert no_file.returncode == 2 and "Missing required option(s): --offset-json-file" in no_file.stderr
    unknown_flag = run_tool("--bootstrap-server", bootstrap, "--offset-json-file", good, "--bogus")
    assert unknown_flag.returncode == 2 and "unrecognized arguments: --bogus" in unknown_flag.stderr


def test_delete_records_moves_the_low_watermark_on_every_replica(cluster: BrokerCluster) -> None:
    tp = create_topic(cluster, "trimmed", leader=1)
    produce(cluster, tp.topic, 100)
    before = {broker_id: segment_bases(broker, tp) for broker_id, broker in cluster.brokers.items()}
    # Whole segments lie below 40 on every replica: those go, the one holding 40 and later ones stay.
    kept = {broker_id: [base for index, base in enumerate(bases) if index + 1 == len(bases) or bases[index + 1] > 40]
            for broker_id, bases in before.items()}
    assert all(len(kept[broker_id]) <= len(bases) - 2 for broker_id, bases in before.items()), before
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        started = time.monotonic()
        result = admin.delete_records({tp: RecordsToDelete(40)}, timeout_ms=30_000)
        print(f"delete_records answered after the ISR followed in {(time.monotonic() - started) * 1000:.0f} ms")
        assert result[tp]["low_watermark"] == 40 and result[tp]["error_code"] == 0
        # The answer waited for the ISR: every replica already starts at 40, checkpointed, and
        # kept no whole segment below it.
        for broker in cluster.brokers.values():
            assert log_start_checkpoint(broker, tp) == 40, broker.broker_id
            assert segment_bases(broker, tp) == kept[broker.broker_id], (broker.broker_id, before)
        assert admin.beginning_offsets([tp]) == {tp: 40}
        assert admin.end_offsets([tp]) == {tp: 100}
        assert admin.delete_records({tp: 10})[tp]["low_watermark"] == 40  # never backwards

        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({tp: 101})
        beyond = admin.delete_records({tp: 101, TopicPartition(tp.topic, 7): 1}, raise_errors=False)
        assert beyond[tp]["error_code"] == OffsetOutOfRangeError.errno and beyond[tp]["low_watermark"] == -1
        assert beyond[TopicPartition(tp.topic, 7)]["error_code"] == UnknownTopicOrPartitionError.errno
        assert admin.beginning_offsets([tp]) == {tp: 40}

    assert consume_from(cluster, tp, None, 100) == list(range(40, 100))
    # Below the log start: OFFSET_OUT_OF_RANGE, and auto_offset_reset=earliest starts at 40.
    assert consume_from(cluster, tp, 10, 100) == list(range(40, 100))

    # A follower killed and restarted keeps its log start (the checkpoint) and, made leader, serves from 40.
    follower = cluster.brokers[2]
    registered = cluster.broker_epoch(2)
    follower.kill()
    follower.start()
    follower.wait_ready()
    # The killed broker's registration lives until its ZooKeeper session expires; the restarted
    # one registers anew only then, and the controller takes it out of the ISR meanwhile. Only
    # once it is registered again and back in the ISR may the other brokers stop.
    cluster.wait_for(lambda: registration(cluster, 2) not in (None, registered), 60, "broker 2 registered anew")
    cluster.wait_for(lambda: all(2 in item["isr"] for broker_id in cluster.brokers
                                 for item in cluster.partitions(tp.topic, broker_id)), 60, "broker 2 back in the ISR")
    assert log_start_checkpoint(follower, tp) == 40
    for broker_id in (1, 3):
        assert cluster.brokers[broker_id].stop() == 0

    def offsets_on_broker_2() -> list[int] | None:  # earliest and latest, once broker 2 leads
        answer = cluster.call("POST", "/v1/list_offsets", {"partitions": [
            {"topic": tp.topic, "partition": 0, "timestamp": timestamp} for timestamp in (-2, -1)]}, broker_id=2)
        items = answer["partitions"]
        return None if any(item["error_code"] for item in items) else [item["offset"] for item in items]

    assert cluster.wait_for(offsets_on_broker_2, 30, "broker 2 leading") == [40, 100]
    assert consume_from(cluster, tp, None, 100) == list(range(40, 100))

    async def delete_with_asyncio_client() -> dict[TopicPartition, dict[str, Any]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            return await admin.delete_records({tp: 50}, timeout_ms=10_000)
        finally:
            await admin.close()

    assert asyncio.run(delete_with_asyncio_client())[tp]["low_watermark"] == 50  # the new leader, alone in the ISR
    assert consume_from(cluster, tp, None, 100) == list(range(50, 100))
    for broker in cluster.brokers.values():
        problems = [line for line in broker.log_path.read_text(errors="replace").splitlines()
                    if "] ERROR " in line or line.startswith("Traceback")]
        assert problems == [], (broker.broker_id, problems)
