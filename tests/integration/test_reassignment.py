"""Partition reassignment against real brokers: replicas move, data follows, the old copies go,
the request disappears when done, and the follower throttle slows the copy down."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from kafkalite import protocol
from kafkalite.record.batch import decode_all
from tests.integration.test_cluster import fetch, produce
from tests.support.cluster import BrokerCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    brokers = BrokerCluster(tmp_path_factory.mktemp("reassign"),
                            f"{zookeeper.connect_string}/ra-{uuid.uuid4().hex[:8]}", size=3).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def reassign(cluster: BrokerCluster, moves: dict[tuple[str, int], list[int]]) -> list[dict[str, object]]:
    answer = cluster.call("POST", protocol.ALTER_PARTITION_REASSIGNMENTS, {"partitions": [
        {"topic": topic, "partition": number, "replicas": replicas} for (topic, number), replicas in moves.items()]})
    return answer["partitions"]  # type: ignore[no-any-return]


def in_progress(cluster: BrokerCluster) -> list[dict[str, object]]:
    return cluster.call("POST", protocol.LIST_PARTITION_REASSIGNMENTS, {})["partitions"]  # type: ignore[no-any-return]


def test_replicas_move_and_data_follows(cluster: BrokerCluster) -> None:
    cluster.call("POST", protocol.CREATE_TOPICS, {"topics": [{"name": "moving", "replica_assignment": {
        "0": [1, 2], "1": [2, 1]}}]})
    cluster.wait_in_sync("moving")
    for number in (0, 1):
        for index in range(20):
            assert produce(cluster, "moving", number, [b"v%d-%d" % (number, index)] * 5).error_code == 0
    answers = reassign(cluster, {("moving", 0): [3, 2], ("moving", 1): [3, 1]})
    assert all(answer["error_code"] == 0 for answer in answers)

    def done() -> bool:
        partitions = cluster.partitions("moving")
        return not in_progress(cluster) and [sorted(item["replicas"]) for item in partitions] == [[2, 3], [1, 3]] \
            and all(sorted(item["isr"]) == sorted(item["replicas"]) for item in partitions)
    cluster.wait_for(done, 60, "reassignment complete")
    partitions = cluster.partitions("moving")
    assert [item["replicas"] for item in partitions] == [[3, 2], [3, 1]]
    for item in partitions:
        values = [record.value for record in decode_all(bytes(fetch(cluster, "moving", item["partition"], 0,
                                                                    item["leader"]).records))]
        assert len(values) == 100
    # The brokers that left the replica sets removed their copies.
    cluster.wait_for(lambda: not (cluster.brokers[1].directory / "data" / "moving-0").exists()
                     and not (cluster.brokers[2].directory / "data" / "moving-1").exists(), 20, "old copies gone")
    assert (cluster.brokers[3].directory / "data" / "moving-0").exists()
    assert produce(cluster, "moving", 0, [b"after"]).error_code == 0


def test_bad_reassignments_are_refused(cluster: BrokerCluster) -> None:
    cluster.create_topic("fixed", partitions=1, replication_factor=1)
    answers = reassign(cluster, {("fixed", 0): [1, 1], ("fixed", 5): [1], ("nope", 0): [1]})
    assert [answer.get("error") for answer in answers] == ["INVALID_REPLICA_ASSIGNMENT",
                                                          "UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_OR_PARTITION"]
    assert reassign(cluster, {("fixed", 0): [9]})[0]["error"] == "INVALID_REPLICA_ASSIGNMENT"


def test_throttle_slows_the_copy(cluster: BrokerCluster) -> None:
    cluster.create_topic("heavy", partitions=1, replication_factor=1)
    leader = cluster.wait_in_sync("heavy")[0]["leader"]
    payload = [b"x" * 1000] * 200
    for _ in range(10):  # about 2 MB
        assert produce(cluster, "heavy", 0, payload, acks=1).error_code == 0
    target = next(broker for broker in (1, 2, 3) if broker != leader)
    applied = "dynamic broker configs: {'follower.replication.throttled.rate': '500000'}"

    def times_applied(broker_id: int) -> int:
        return cluster.brokers[broker_id].log_path.read_text(errors="replace").count(applied)

    before = {broker_id: times_applied(broker_id) for broker_id in (1, 2, 3)}
    answer = cluster.call("POST", protocol.ALTER_CONFIGS, {"resources": [
        {"type": "broker", "name": "", "set": {"follower.replication.throttled.rate": "500000"}}]})
    assert answer["resources"][0]["error_code"] == 0
    # The config change notification reaches every broker, which logs the configs it applies.
    cluster.wait_for(lambda: all(times_applied(broker_id) > count for broker_id, count in before.items()), 20,
                     "the throttle applied on every broker")
    started = time.monotonic()
    reassign(cluster, {("heavy", 0): [leader, target]})
    cluster.wait_for(lambda: not in_progress(cluster), 60, "throttled reassignment complete")
    elapsed = time.monotonic() - started
    assert elapsed >= 2.0, f"2 MB at 500 kB/s finished in {elapsed:.1f} s: the throttle did not apply"
    cluster.call("POST", protocol.ALTER_CONFIGS, {"resources": [
        {"type": "broker", "name": "", "delete": ["follower.replication.throttled.rate"]}]})


def test_reassign_partitions_tool(cluster: BrokerCluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json
    import subprocess

    from tests.support.cluster import ROOT

    script = str(ROOT / "scripts" / "kafkalite-reassign-partitions.sh")
    bootstrap = cluster.bootstrap
    cluster.call("POST", protocol.CREATE_TOPICS, {"topics": [{"name": "tooling", "replica_assignment": {
        "0": [1], "1": [1]}}]})
    cluster.wait_in_sync("tooling")
    for number in (0, 1):
        assert produce(cluster, "tooling", number, [b"keep-me"] * 10).error_code == 0
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": "tooling"}]}))
    generated = subprocess.run([script, "--bootstrap-server", bootstrap, "--generate", "--topics-to-move-json-file",
                                str(topics_file), "--broker-list", "2,3"], capture_output=True, text=True, timeout=60)
    assert generated.returncode == 0, generated.stderr
    lines = generated.stdout.strip().splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert "Proposed partition reassignment configuration" in lines
    proposed = json.loads(lines[-1])
    assert {entry["partition"] for entry in proposed["partitions"]} == {0, 1}
    assert all(entry["replicas"][0] in (2, 3) for entry in proposed["partitions"])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "tooling", "partition": 0, "replicas": [2, 3]},
        {"topic": "tooling", "partition": 1, "replicas": [3, 2]}]}))
    executed = subprocess.run([script, "--bootstrap-server", bootstrap, "--execute", "--reassignment-json-file",
                               str(plan), "--throttle", "10000000", "--wait", "--timeout", "60"],
                              capture_output=True, text=True, timeout=90)
    assert executed.returncode == 0, executed.stderr
    assert "Successfully started partition reassignments for tooling-0,tooling-1" in executed.stdout
    assert "Reassignment progress: 2/2 partitions completed" in executed.stdout
    assert "Throttle was removed." in executed.stdout
    verified = subprocess.run([script, "--bootstrap-server", bootstrap, "--verify", "--reassignment-json-file",
                               str(plan)], capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0
    assert "Reassignment of partition tooling-0 is completed." in verified.stdout
    assert [sorted(item["replicas"]) for item in cluster.partitions("tooling")] == [[2, 3], [2, 3]]
    for item in cluster.partitions("tooling"):
        records = decode_all(bytes(fetch(cluster, "tooling", item["partition"], 0, item["leader"]).records))
        assert [record.value for record in records] == [b"keep-me"] * 10
    bad = subprocess.run([script, "--bootstrap-server", bootstrap, "--execute"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "--reassignment-json-file is required" in bad.stderr
    assert "Traceback" not in bad.stderr
