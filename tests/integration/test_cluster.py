"""A real ZooKeeper and three real broker processes: placement, produce/fetch, failover,
deletion, metadata agreement and bad requests."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkalite import protocol
from kafkalite.record.batch import build_batch, decode_all
from tests.support.cluster import BrokerCluster, HttpError, http

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    import uuid

    connect = f"{zookeeper.connect_string}/cluster-{uuid.uuid4().hex[:8]}"
    brokers = BrokerCluster(tmp_path_factory.mktemp("cluster"), connect, size=3).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def produce(cluster: BrokerCluster, topic: str, partition: int, values: list[bytes], acks: int = -1,
            timestamps: int | list[int] | None = None, leader: int | None = None) -> protocol.ProduceResult:
    """Produce one batch; like a client, retry while the leader has not taken over yet: it
    answers NOT_LEADER_OR_FOLLOWER, or, when the metadata already names it leader but it has
    not created the partition yet, UNKNOWN_TOPIC_OR_PARTITION."""
    request = protocol.ProduceRequest(acks, 10_000, [protocol.ProducePartition(
        topic, partition, build_batch(values, timestamps=timestamps))])
    body = b"".join(bytes(piece) for piece in protocol.encode_produce_request(request))
    retried = {6} if leader is not None else {6, 3}
    deadline = time.monotonic() + 10
    while True:
        target = leader if leader is not None else next(
            item["leader"] for item in cluster.partitions(topic) if item["partition"] == partition)
        answer = http(cluster.brokers[target].address, "POST", protocol.PRODUCE, raw=body,
                      content_type=protocol.BINARY_CONTENT_TYPE)
        result = protocol.decode_produce_response(answer)[0]
        if result.error_code not in retried or time.monotonic() > deadline:
            return result
        time.sleep(0.05)


def fetch(cluster: BrokerCluster, topic: str, partition: int, offset: int, broker_id: int,
          max_wait_ms: int = 0, retry_not_leader: bool = True) -> protocol.FetchResult:
    """A consumer fetch; a broker that has not applied its new leadership yet is asked again."""
    request = protocol.FetchRequest([protocol.FetchPartition(topic, partition, offset)], max_wait_ms=max_wait_ms)
    deadline = time.monotonic() + 10
    while True:
        answer = http(cluster.brokers[broker_id].address, "POST", protocol.FETCH,
                      raw=protocol.encode_fetch_request(request), content_type=protocol.BINARY_CONTENT_TYPE)
        result = protocol.decode_fetch_response(answer)[0]
        if result.error_code != 6 or not retry_not_leader or time.monotonic() > deadline:
            return result
        time.sleep(0.05)


def test_six_partitions_rf3_spread_leaders_over_all_brokers(cluster: BrokerCluster) -> None:
    entry = cluster.create_topic("spread", partitions=6, replication_factor=3)
    assert entry["num_partitions"] == 6 and entry["replication_factor"] == 3
    partitions = cluster.wait_in_sync("spread")
    leaders = [item["leader"] for item in partitions]
    assert sorted(leaders.count(broker) for broker in (1, 2, 3)) == [2, 2, 2]
    for item in partitions:
        assert sorted(item["replicas"]) == [1, 2, 3]
        assert item["leader"] == item["replicas"][0]  # the preferred replica leads a new topic
    assert len({tuple(item["replicas"]) for item in partitions}) >= 3


def test_metadata_from_any_broker_agrees(cluster: BrokerCluster) -> None:
    cluster.create_topic("agree", partitions=4, replication_factor=2)
    # each broker's metadata cache follows ZooKeeper on its own (as Kafka's brokers follow the
    # controller's UpdateMetadata): once every one of them sees the topic fully in sync, they agree
    for broker_id in (1, 2, 3):
        cluster.wait_in_sync("agree", broker_id=broker_id)
    views = [cluster.metadata(["agree"], broker_id) for broker_id in (1, 2, 3)]
    for view in views[1:]:
        assert view["topics"] == views[0]["topics"]
        assert view["brokers"] == views[0]["brokers"]
        assert view["controller_id"] == views[0]["controller_id"]


def test_produce_fetch_round_trip_by_offset_and_timestamp(cluster: BrokerCluster) -> None:
    # the records carry timestamps from 1970: with the default retention.ms the broker's retention
    # pass may delete them whenever it runs, so this topic keeps its records for ever
    cluster.create_topic("roundtrip", partitions=2, replication_factor=3, configs={"retention.ms": "-1"})
    partitions = cluster.wait_in_sync("roundtrip")
    leader = partitions[1]["leader"]
    first = produce(cluster, "roundtrip", 1, [b"a", b"b", b"c"], timestamps=[1000, 2000, 3000])
    second = produce(cluster, "roundtrip", 1, [b"d", b"e"], timestamps=[4000, 5000])
    assert (first.error_code, first.base_offset) == (0, 0)
    assert (second.error_code, second.base_offset) == (0, 3)
    result = fetch(cluster, "roundtrip", 1, 2, leader)
    assert result.error_code == 0 and result.high_watermark == 5
    records = [record for record in decode_all(bytes(result.records)) if record.offset >= 2]
    assert [(record.offset, record.value) for record in records] == [(2, b"c"), (3, b"d"), (4, b"e")]
    offsets = cluster.call("POST", protocol.LIST_OFFSETS, {"partitions": [
        {"topic": "roundtrip", "partition": 1, "timestamp": 3500},
        {"topic": "roundtrip", "partition": 1, "timestamp": -2},
        {"topic": "roundtrip", "partition": 1, "timestamp": -1},
        {"topic": "roundtrip", "partition": 1, "timestamp": 99999}]}, broker_id=leader)["partitions"]
    assert [(item["offset"], item["timestamp"]) for item in offsets] == [(3, 4000), (0, -1), (5, -1), (-1, -1)]
    # Every replica holds the same bytes (acks=all waited for the ISR).
    for broker_id in (1, 2, 3):
        if broker_id == leader:
            continue
        follower = fetch(cluster, "roundtrip", 1, 0, broker_id, retry_not_leader=False)
        assert follower.error_code == protocol.error_for(6).errno  # NOT_LEADER_OR_FOLLOWER for consumers
    json_view = cluster.call("GET", "/v1/topics/roundtrip/partitions/1/records?offset=3")
    assert [record["value"] for record in json_view["records"]] == ["d", "e"]


def test_long_poll_fetch_waits_for_data(cluster: BrokerCluster) -> None:
    import threading

    cluster.create_topic("longpoll", partitions=1, replication_factor=1)
    leader = cluster.wait_in_sync("longpoll")[0]["leader"]
    assert fetch(cluster, "longpoll", 0, 0, leader).error_code == 0  # the leader serves the partition
    timer = threading.Timer(0.5, lambda: produce(cluster, "longpoll", 0, [b"late"], leader=leader))
    started = time.monotonic()
    timer.start()
    result = fetch(cluster, "longpoll", 0, 0, leader, max_wait_ms=5000)
    assert result.error_code == 0
    elapsed = time.monotonic() - started
    timer.join()
    assert [record.value for record in decode_all(bytes(result.records))] == [b"late"]
    assert 0.4 <= elapsed < 4.0
    started = time.monotonic()
    empty = fetch(cluster, "longpoll", 0, 1, leader, max_wait_ms=300)
    assert empty.records == b"" and time.monotonic() - started >= 0.25


def test_bad_requests_get_named_errors_and_leave_the_log_untouched(cluster: BrokerCluster) -> None:
    cluster.create_topic("guarded", partitions=1, replication_factor=1)
    leader = cluster.wait_in_sync("guarded")[0]["leader"]
    assert produce(cluster, "guarded", 0, [b"ok"], leader=leader).base_offset == 0
    # Unknown topic
    unknown = produce(cluster, "no-such-topic", 0, [b"x"], leader=leader)
    assert protocol.error_for(unknown.error_code).message == "UNKNOWN_TOPIC_OR_PARTITION"
    # Invalid topic name
    answer = cluster.call("POST", protocol.CREATE_TOPICS, {"topics": [{"name": "bad name!", "num_partitions": 1}]})
    assert answer["topics"][0]["error"] == "INVALID_TOPIC_EXCEPTION"
    # Existing topic
    answer = cluster.call("POST", protocol.CREATE_TOPICS, {"topics": [{"name": "guarded", "num_partitions": 1}]})
    assert answer["topics"][0]["error"] == "TOPIC_ALREADY_EXISTS"
    # Replication factor beyond the brokers
    answer = cluster.call("POST", protocol.CREATE_TOPICS, {"topics": [{"name": "toomany", "num_partitions": 1,
                                                                       "replication_factor": 4}]})
    assert answer["topics"][0]["error"] == "INVALID_REPLICATION_FACTOR"
    # Wrong CRC
    batch = bytearray(build_batch([b"evil"], timestamps=1))
    batch[-2] ^= 0xFF
    request = protocol.ProduceRequest(1, 1000, [protocol.ProducePartition("guarded", 0, bytes(batch))])
    raw = b"".join(bytes(piece) for piece in protocol.encode_produce_request(request))
    result = protocol.decode_produce_response(http(cluster.brokers[leader].address, "POST", protocol.PRODUCE, raw=raw,
                                                   content_type=protocol.BINARY_CONTENT_TYPE))[0]
    assert protocol.error_for(result.error_code).message == "CORRUPT_MESSAGE"
    # Truncated frame, garbage frame, malformed JSON, wrong JSON types, unknown route, oversize body
    failures = []
    for method, path, payload, kwargs in [
        ("POST", protocol.PRODUCE, raw[:-7], {"content_type": protocol.BINARY_CONTENT_TYPE}),
        ("POST", protocol.FETCH, b"\x00\x01garbage", {"content_type": protocol.BINARY_CONTENT_TYPE}),
        ("POST", protocol.CREATE_TOPICS, b"{not json", {}),
        ("POST", protocol.CREATE_TOPICS, b"[1, 2]", {}),
        ("POST", protocol.LIST_OFFSETS, b'{"partitions": [{"topic": 5}]}', {}),
        ("POST", protocol.METADATA, b'{"topics": "orders"}', {}),
        ("GET", "/v1/no/such/route", None, {}),
        ("POST", protocol.PRODUCE, b"\x00" * (101 * 1024 * 1024), {"content_type": protocol.BINARY_CONTENT_TYPE}),
    ]:
        with pytest.raises(HttpError) as caught:
            http(cluster.brokers[leader].address, method, path, raw=payload, **kwargs)
        failures.append((caught.value.status, caught.value.body.get("error")))
    assert all(status != 500 for status, _ in failures), failures
    names = [name for _, name in failures]
    assert names == ["INVALID_REQUEST"] * 7 + ["MESSAGE_TOO_LARGE"], failures
    # acks out of range
    bad_acks = protocol.ProduceRequest(5, 1000, [protocol.ProducePartition("guarded", 0, build_batch([b"x"]))])
    with pytest.raises(HttpError) as caught:
        http(cluster.brokers[leader].address, "POST", protocol.PRODUCE,
             raw=b"".join(bytes(piece) for piece in protocol.encode_produce_request(bad_acks)),
             content_type=protocol.BINARY_CONTENT_TYPE)
    assert caught.value.body["error"] == "INVALID_REQUIRED_ACKS"
    # The log still holds exactly the one good record.
    result = fetch(cluster, "guarded", 0, 0, leader)
    assert [(record.offset, record.value) for record in decode_all(bytes(result.records))] == [(0, b"ok")]
    assert result.high_watermark == 1


def test_topic_deletion_removes_data_everywhere(cluster: BrokerCluster) -> None:
    cluster.create_topic("doomed", partitions=3, replication_factor=3)
    partitions = cluster.wait_in_sync("doomed")
    for item in partitions:
        produce(cluster, "doomed", item["partition"], [b"gone-%d" % item["partition"]])
    data_dirs = [broker.directory / "data" for broker in cluster.brokers.values()]
    assert all(any(path.name.startswith("doomed-") for path in directory.iterdir()) for directory in data_dirs)
    answer = cluster.call("POST", protocol.DELETE_TOPICS, {"topics": ["doomed"], "timeout_ms": 30000})
    assert answer["topics"][0]["error_code"] == 0
    cluster.wait_for(lambda: not any(path.name.startswith("doomed") for directory in data_dirs
                                     for path in directory.iterdir()), 20, "partition directories removed")
    for broker_id in (1, 2, 3):
        topics = cluster.metadata(["doomed"], broker_id)["topics"]
        assert topics[0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    # Re-created under the same name it starts empty: nothing of the old data resurrects.
    cluster.create_topic("doomed", partitions=1, replication_factor=3)
    leader = cluster.wait_in_sync("doomed")[0]["leader"]
    assert fetch(cluster, "doomed", 0, 0, leader).high_watermark == 0
    answer = cluster.call("POST", protocol.DELETE_TOPICS, {"topics": ["never-existed"]})
    assert answer["topics"][0]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_alter_partitions_and_configs(cluster: BrokerCluster) -> None:
    cluster.create_topic("growing", partitions=2, replication_factor=2, configs={"retention.ms": "60000"})
    answer = cluster.call("POST", protocol.CREATE_PARTITIONS, {"topics": [{"name": "growing", "count": 5}]})
    assert answer["topics"][0]["error_code"] == 0
    partitions = cluster.wait_in_sync("growing")
    assert [item["partition"] for item in partitions] == [0, 1, 2, 3, 4]
    answer = cluster.call("POST", protocol.CREATE_PARTITIONS, {"topics": [{"name": "growing", "count": 3}]})
    assert answer["topics"][0]["error"] == "INVALID_PARTITIONS"
    described = cluster.call("POST", protocol.DESCRIBE_CONFIGS, {"resources": [{"type": "topic", "name": "growing"}]})
    configs = {entry["name"]: entry for entry in described["resources"][0]["configs"]}
    assert configs["retention.ms"]["value"] == "60000" and configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["cleanup.policy"]["source"] == "DEFAULT_CONFIG"
    answer = cluster.call("POST", protocol.ALTER_CONFIGS, {"resources": [
        {"type": "topic", "name": "growing", "set": {"cleanup.policy": "compact"}, "delete": ["retention.ms"]}]})
    assert answer["resources"][0]["error_code"] == 0
    described = cluster.call("POST", protocol.DESCRIBE_CONFIGS, {"resources": [{"type": "topic", "name": "growing"}]})
    configs = {entry["name"]: entry for entry in described["resources"][0]["configs"]}
    assert configs["cleanup.policy"]["value"] == "compact" and configs["retention.ms"]["source"] == "DEFAULT_CONFIG"

    def everywhere() -> bool:
        for broker_id in (1, 2, 3):
            view = cluster.call("POST", protocol.DESCRIBE_CONFIGS,
                                {"resources": [{"type": "topic", "name": "growing"}]}, broker_id=broker_id)
            if {entry["name"]: entry["value"] for entry in view["resources"][0]["configs"]}["cleanup.policy"] != \
                    "compact":
                return False
        return True
    cluster.wait_for(everywhere, 10, "config change seen by every broker")
    answer = cluster.call("POST", protocol.ALTER_CONFIGS, {"resources": [
        {"type": "topic", "name": "growing", "set": {"retention.ms": "soon"}}]})
    assert answer["resources"][0]["error"] == "INVALID_CONFIG"


def test_kill_controller_elects_new_controller_and_moves_leadership(cluster: BrokerCluster) -> None:
    cluster.create_topic("failover", partitions=6, replication_factor=3)
    before = cluster.wait_in_sync("failover")
    for item in before:
        assert produce(cluster, "failover", item["partition"], [b"before"]).error_code == 0
    controller = cluster.controller_id()
    victim = cluster.brokers[controller]
    killed_at = time.monotonic()
    victim.kill()
    survivors = [broker_id for broker_id in cluster.brokers if broker_id != controller]
    new_controller = cluster.wait_for(
        lambda: (lambda found: found if found > 0 and found != controller else None)(
            cluster.controller_id(survivors[0])), 30, "a new controller")
    elapsed = time.monotonic() - killed_at
    assert new_controller in survivors
    assert elapsed <= cluster.session_timeout_ms / 1000 + 3.0, f"controller failover took {elapsed:.1f} s"

    def moved() -> list[dict[str, object]] | None:
        partitions = cluster.partitions("failover", survivors[0])
        if all(item["leader"] in survivors and controller not in item["isr"] for item in partitions):
            return partitions
        return None
    after = cluster.wait_for(moved, 30, "leadership off the killed broker")
    for item in after:
        result = produce(cluster, "failover", item["partition"], [b"after"])
        assert result.error_code == 0 and result.base_offset == 1  # nothing acknowledged was lost
    views = [cluster.metadata(["failover"], broker_id)["topics"] for broker_id in survivors]
    assert views[0] == views[1]
    # The killed broker comes back, catches up and rejoins every ISR.
    victim.start()
    victim.wait_ready()
    cluster.wait_in_sync("failover", timeout=40)
    for item in cluster.partitions("failover"):
        values = [record.value for record in decode_all(bytes(fetch(cluster, "failover", item["partition"], 0,
                                                                        item["leader"]).records))]
        assert values == [b"before", b"after"]


def test_duplicate_broker_id_is_refused(cluster: BrokerCluster, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.support.cluster import ROOT, free_port

    config = tmp_path / "duplicate.properties"
    original = (cluster.brokers[1].config_path.read_text().replace(
        f"listeners=PLAINTEXT://127.0.0.1:{cluster.brokers[1].port}", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}")
        .replace(str(cluster.brokers[1].directory / "data"), str(tmp_path / "data")))
    # the refusal waits out one session timeout (a restarted broker's old session may still hold the
    # znode): the shortest ZooKeeper grants keeps the wait short
    config.write_text(original + "\nzookeeper.session.timeout.ms=1000\n")
    result = subprocess.run([sys.executable, "-m", "kafkalite.broker", str(config)], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert "broker.id 1 is already registered" in result.stderr
    assert cluster.describe()["brokers"][0]["id"] == 1  # the real broker 1 is untouched

    # the same refusal with log.format=json: every line is one JSON object
    result = subprocess.run([sys.executable, "-m", "kafkalite.broker", str(config), "--override", "log.format=json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    assert lines and all({"time", "level", "logger", "message", "broker_id"} <= set(line) for line in lines)
    refusal = [line for line in lines if "broker.id 1 is already registered" in line["message"]]
    assert refusal and refusal[-1]["level"] == "ERROR" and refusal[-1]["broker_id"] == 1, lines
    assert all(line["time"].endswith("Z") for line in lines)
