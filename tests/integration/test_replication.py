"""Replication against real brokers: acks and min.insync.replicas, the high watermark, a
divergent old leader truncating exactly its unreplicated suffix, a diverging follower told its
truncation point without waiting out a long poll, and a frozen broker losing leadership and
rejoining with a consistent log."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from kafkalite import protocol
from kafkalite.record.batch import decode_all, iter_batches
from tests.integration.test_cluster import fetch, produce
from tests.support.cluster import BrokerCluster, http

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    brokers = BrokerCluster(tmp_path, f"{zookeeper.connect_string}/repl-{uuid.uuid4().hex[:8]}", size=3,
                            extra_properties={"unclean.leader.election.enable": "false"}).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def replica_fetch(cluster: BrokerCluster, topic: str, broker_id: int, leader: int) -> bytes:
    """Everything a follower would read from the leader (up to the log end), from offset 0."""
    request = protocol.FetchRequest([protocol.FetchPartition(topic, 0, 0, 1 << 20)],
                                    replica_id=protocol.DEBUGGING_REPLICA_ID, max_wait_ms=0)
    deadline = time.monotonic() + 15
    while True:
        answer = http(cluster.brokers[leader].address, "POST", protocol.FETCH,
                      raw=protocol.encode_fetch_request(request), content_type=protocol.BINARY_CONTENT_TYPE)
        result = protocol.decode_fetch_response(answer)[0]
        # A broker that was stalled (SIGSTOP) re-reads ZooKeeper before it serves again.
        if result.error_code != 6 or time.monotonic() > deadline:
            assert result.error_code == 0, result
            return bytes(result.records)
        time.sleep(0.1)


def under_min_isr_partitions(cluster: BrokerCluster, broker_id: int) -> int:
    """The broker's UnderMinIsrPartitionCount gauge, read off its /metrics."""
    text = http(cluster.brokers[broker_id].address, "GET", "/metrics").decode()
    name = "kafkalite_server_replica_manager_under_min_isr_partition_count "
    return next(int(float(line[len(name):])) for line in text.splitlines() if line.startswith(name))


def test_acks_all_waits_for_isr_and_min_insync_is_enforced(cluster: BrokerCluster) -> None:
    cluster.create_topic("durable", partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
    leader = cluster.wait_in_sync("durable")[0]["leader"]
    result = produce(cluster, "durable", 0, [b"one"], acks=-1)
    assert result.error_code == 0
    # acks=all returned only once every ISR member had it: the high watermark covers it at once.
    assert fetch(cluster, "durable", 0, 0, leader).high_watermark == 1
    followers = [broker_id for broker_id in cluster.brokers if broker_id != leader]
    for broker_id in followers:
        cluster.brokers[broker_id].kill()
    cluster.wait_for(lambda: cluster.partitions("durable", leader)[0]["isr"] == [leader], 30, "ISR shrunk to leader")
    # The metadata cache shows a new state as soon as its watch fires; the leader's partition
    # takes it when it has applied it (a controller's change bumps the leader epoch, which is
    # applied in a task of its own). Wait for the partition itself: its gauge counts it then.
    cluster.wait_for(lambda: under_min_isr_partitions(cluster, leader) == 1, 30, "the leader's partition under min ISR")
    refused = produce(cluster, "durable", 0, [b"two"], acks=-1, leader=leader)
    assert protocol.error_for(refused.error_code).message == "NOT_ENOUGH_REPLICAS"
    accepted = produce(cluster, "durable", 0, [b"three"], acks=1, leader=leader)
    assert accepted.error_code == 0 and accepted.base_offset == 1
    values = [record.value for record in decode_all(bytes(fetch(cluster, "durable", 0, 0, leader).records))]
    assert values == [b"one", b"three"]  # NOT_ENOUGH_REPLICAS appended nothing
    for broker_id in followers:
        cluster.brokers[broker_id].start()
    cluster.wait_in_sync("durable", timeout=40)
    assert produce(cluster, "durable", 0, [b"four"], acks=-1).error_code == 0
    # Restarted followers fetch only once registered: the leader never had to refuse them.
    assert "no broker epoch given" not in cluster.brokers[leader].log_path.read_text()


def test_divergent_old_leader_truncates_exactly_its_unreplicated_suffix(cluster: BrokerCluster) -> None:
    cluster.create_topic("diverge", partitions=1, replication_factor=3)
    old_leader = cluster.wait_in_sync("diverge")[0]["leader"]
    for index in range(3):
        assert produce(cluster, "diverge", 0, [b"committed-%d" % index], acks=-1).error_code == 0
    followers = [broker_id for broker_id in cluster.brokers if broker_id != old_leader]
    for broker_id in followers:
        cluster.brokers[broker_id].freeze()
    try:
        # The first record may still reach a follower: a fetch parked at the leader before the
        # freeze is answered with it. The next two cannot: no follower fetches any more.
        for index in range(3):
            result = produce(cluster, "diverge", 0, [b"acks1-%d" % index], acks=1, leader=old_leader)
            assert result.error_code == 0 and result.base_offset == 3 + index
        cluster.brokers[old_leader].kill()
    finally:
        for broker_id in followers:
            cluster.brokers[broker_id].thaw()
    new_leader = cluster.wait_for(
        lambda: (lambda item: item["leader"] if item["leader"] in followers else None)(
            cluster.partitions("diverge", followers[0])[0]), 30, "a new leader")
    surviving = decode_all(replica_fetch(cluster, "diverge", old_leader, new_leader))
    kept = [record.value for record in surviving]
    assert kept[:3] == [b"committed-0", b"committed-1", b"committed-2"] and len(kept) in (3, 4)
    divergence_point = len(kept)
    for index in range(3):
        result = produce(cluster, "diverge", 0, [b"new-%d" % index], acks=-1, leader=new_leader)
        assert result.error_code == 0 and result.base_offset == divergence_point + index
    cluster.brokers[old_leader].start()
    cluster.brokers[old_leader].wait_ready()
    cluster.wait_in_sync("diverge", timeout=40)
    expected = [*kept, b"new-0", b"new-1", b"new-2"]
    leader_view = replica_fetch(cluster, "diverge", old_leader, new_leader)
    assert [record.value for record in decode_all(leader_view)] == expected
    old_log_dir = cluster.brokers[old_leader].directory / "data" / "diverge-0"
    on_disk = b"".join(path.read_bytes() for path in sorted(old_log_dir.glob("*.log")))
    assert [record.value for record in decode_all(on_disk)] == expected
    assert b"acks1-1" not in on_disk and b"acks1-2" not in on_disk  # the divergent suffix is gone
    assert on_disk == leader_view  # byte for byte the leader's log, epochs included
    epochs = [batch.partition_leader_epoch for batch in iter_batches(on_disk)]
    assert epochs == sorted(epochs) and epochs[-1] > epochs[0]


def test_frozen_broker_loses_leadership_and_rejoins_consistently(cluster: BrokerCluster) -> None:
    cluster.create_topic("frozen", partitions=3, replication_factor=3)
    partitions = cluster.wait_in_sync("frozen")
    victim = partitions[0]["leader"]
    for item in partitions:
        assert produce(cluster, "frozen", item["partition"], [b"before"]).error_code == 0
    cluster.brokers[victim].freeze()
    frozen_at = time.monotonic()
    others = [broker_id for broker_id in cluster.brokers if broker_id != victim]
    try:
        cluster.wait_for(lambda: all(item["leader"] not in (victim, -1)
                                     for item in cluster.partitions("frozen", others[0])),
                         30, "leadership away from the frozen broker")
        unavailable = time.monotonic() - frozen_at
        assert unavailable <= cluster.session_timeout_ms / 1000 + 4
        for item in cluster.partitions("frozen", others[0]):
            assert produce(cluster, "frozen", item["partition"], [b"during"], leader=item["leader"]).error_code == 0
    finally:
        cluster.brokers[victim].thaw()
    # Its session expired: it registers again, catches up and rejoins every ISR. Until it has
    # re-read ZooKeeper it serves nothing (no stale reads from a deposed leader).
    # Partition 0 has a new leader and preferred-leader elections run only every 300 s: the
    # thawed broker is not its leader, so it answers NOT_LEADER_OR_FOLLOWER, never its old data.
    stale = fetch(cluster, "frozen", 0, 0, victim, retry_not_leader=False)
    assert stale.error_code == 6 and not bytes(stale.records), stale
    cluster.wait_in_sync("frozen", timeout=40, broker_id=others[0])
    assert victim in {broker["id"] for broker in cluster.describe(others[0])["brokers"]}
    for item in cluster.partitions("frozen", others[0]):
        values = [record.value for record in decode_all(bytes(fetch(cluster, "frozen", item["partition"], 0,
                                                                        item["leader"]).records))]
        assert values == [b"before", b"during"]
        assert produce(cluster, "frozen", item["partition"], [b"after"]).error_code == 0


def test_diverging_follower_is_told_its_truncation_point_at_once(cluster: BrokerCluster) -> None:
    """A follower whose log diverged from the leader's lineage gets the epoch and end offset
    to truncate to in the answer to its fetch, not after the fetch's long poll ran out."""
    cluster.create_topic("truncate", partitions=1, replication_factor=3)
    leader = cluster.wait_in_sync("truncate")[0]["leader"]
    assert produce(cluster, "truncate", 0, [b"a", b"b", b"c"], acks=-1).error_code == 0
    epoch = cluster.partitions("truncate")[0]["leader_epoch"]
    follower = next(broker_id for broker_id in cluster.brokers if broker_id != leader)
    # A follower that (as an old leader of this epoch would) claims records 3 and 4 of the
    # epoch, which ends at 3 on the leader. The leader answers the divergence before it records
    # anything of the fetch, so the real follower's state stays as it is.
    request = protocol.FetchRequest(
        [protocol.FetchPartition("truncate", 0, 5, 1 << 20, epoch, epoch)],
        replica_id=follower, replica_epoch=cluster.broker_epoch(follower), max_wait_ms=5000, min_bytes=1)
    started = time.monotonic()
    answer = http(cluster.brokers[leader].address, "POST", protocol.FETCH,
                  raw=protocol.encode_fetch_request(request), content_type=protocol.BINARY_CONTENT_TYPE)
    elapsed = time.monotonic() - started
    result = protocol.decode_fetch_response(answer)[0]
    print(f"diverging fetch answered after {elapsed * 1000:.0f} ms (long poll 5000 ms)")
    assert result.error_code == 0, result
    assert (result.diverging_epoch, result.diverging_end_offset) == (epoch, 3)
    assert elapsed < 1.0, f"the truncation point came after {elapsed:.1f} s: the long poll was waited out"
