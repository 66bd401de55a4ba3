"""The classic group protocol over HTTP against real brokers: coordinator lookup, join/sync,
heartbeats, fencing, session expiry, static membership, offsets, admin and coordinator failover."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from kafkalite import protocol
from tests.support.cluster import BrokerCluster, http

pytestmark = pytest.mark.integration

SESSION_MS = 3000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    brokers = BrokerCluster(tmp_path_factory.mktemp("groups"),
                            f"{zookeeper.connect_string}/groups-{uuid.uuid4().hex[:8]}", size=3).start()
    try:
        yield brokers
    finally:
        brokers.stop()


RETRIABLE_COORDINATOR_ERRORS = ("COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR")


def _coordinator_error(answer: Any) -> str | None:
    """The coordinator error a request should be retried on: the answer's own or, for an
    offset commit (whose errors are per partition, as Kafka's), the one every partition shares."""
    if answer.get("error") in RETRIABLE_COORDINATOR_ERRORS:
        return str(answer["error"])
    partitions = [entry for topic in answer.get("topics") or [] for entry in topic.get("partitions") or []]
    errors = {entry.get("error") for entry in partitions}
    if partitions and len(errors) == 1 and next(iter(errors)) in RETRIABLE_COORDINATOR_ERRORS:
        return str(next(iter(errors)))
    return None


class Coordinated:
    """Finds a group's coordinator and sends it group requests."""

    def __init__(self, cluster: BrokerCluster, group_id: str) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.refresh()

    def refresh(self) -> None:
        def found() -> Any:
            answer = self.cluster.call("POST", protocol.FIND_COORDINATOR, {"key": self.group_id})
            return answer if answer["error_code"] == 0 else None
        answer = self.cluster.wait_for(found, 30, "a coordinator")
        self.node_id = answer["node_id"]
        self.address = f"{answer['host']}:{answer['port']}"

    def call(self, path: str, body: dict[str, Any], retry_loading: bool = True) -> Any:
        body = {"group_id": self.group_id, **body}
        deadline = time.monotonic() + 20
        while True:
            answer = http(self.address, "POST", path, body, timeout=60)
            error = _coordinator_error(answer)
            if retry_loading and error is not None and time.monotonic() < deadline:
                time.sleep(0.1)
                if error == "NOT_COORDINATOR":
                    self.refresh()
                continue
            return answer

    def join(self, member_id: str = "", instance: str | None = None, protocols: list[str] | None = None,
             session_ms: int = SESSION_MS, rebalance_ms: int = 10000) -> Any:
        return self.call(protocol.JOIN_GROUP, {
            "member_id": member_id, "group_instance_id": instance, "session_timeout_ms": session_ms,
            "rebalance_timeout_ms": rebalance_ms, "protocol_type": "consumer", "client_id": "tester",
            "protocols": [{"name": name, "metadata": base64.b64encode(name.encode()).decode()}
                          for name in (protocols or ["range"])]})

    def join_fully(self, instance: str | None = None) -> Any:
        first = self.join(instance=instance)
        if first["error"] == "MEMBER_ID_REQUIRED":
            return self.join(first["member_id"], instance=instance)
        return first

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None) -> Any:
        return self.call(protocol.SYNC_GROUP, {
            "member_id": member_id, "generation_id": generation,
            "assignments": [{"member_id": key, "assignment": base64.b64encode(value).decode()}
                            for key, value in (assignments or {}).items()]})

    def heartbeat(self, member_id: str, generation: int) -> Any:
        return self.call(protocol.HEARTBEAT, {"member_id": member_id, "generation_id": generation})

    def describe(self) -> Any:
        return self.call(protocol.DESCRIBE_GROUPS, {"groups": [self.group_id]})["groups"][0]

    def wait_for_state(self, state: str, members: int, timeout: float = 20.0) -> Any:
        """Poll DescribeGroups until the group is in ``state`` with ``members`` members."""
        def reached() -> Any:
            described = self.describe()
            return described if described["state"] == state and len(described["members"]) == members else None
        return self.cluster.wait_for(reached, timeout, f"group {self.group_id} {state} with {members} members")


def test_join_sync_heartbeat_and_rebalance(cluster: BrokerCluster) -> None:
    group = Coordinated(cluster, "g-basic")
    first = group.join()
    assert first["error"] == "MEMBER_ID_REQUIRED" and first["member_id"].startswith("tester-")
    with ThreadPoolExecutor(2) as pool:
        one = pool.submit(group.join_fully)
        # The first member's join is parked (the initial rebalance delay) before the second joins.
        group.wait_for_state("PreparingRebalance", 1)
        two = pool.submit(group.join_fully)
        answers = [one.result(), two.result()]
    assert all(answer["error_code"] == 0 for answer in answers), answers
    generation = answers[0]["generation_id"]
    assert {answer["generation_id"] for answer in answers} == {generation}
    leader = next(answer for answer in answers if answer["members"])
    follower = next(answer for answer in answers if not answer["members"])
    assert leader["leader"] == leader["member_id"] == follower["leader"]
    assert {member["member_id"] for member in leader["members"]} == {answers[0]["member_id"], answers[1]["member_id"]}
    assert leader["protocol_name"] == "range"
    with ThreadPoolExecutor(2) as pool:
        # Whichever SyncGroup arrives first (a follower's waits for the leader's), each member
        # gets the assignment the leader gave it.
        follower_sync = pool.submit(group.sync, follower["member_id"], generation)
        leader_sync = group.sync(leader["member_id"], generation, {
            leader["member_id"]: b"partitions-A", follower["member_id"]: b"partitions-B"})
        assert base64.b64decode(leader_sync["assignment"]) == b"partitions-A"
        assert base64.b64decode(follower_sync.result()["assignment"]) == b"partitions-B"
    assert group.heartbeat(follower["member_id"], generation)["error_code"] == 0
    assert group.heartbeat(follower["member_id"], generation - 1)["error"] == "ILLEGAL_GENERATION"
    assert group.heartbeat("stranger", generation)["error"] == "UNKNOWN_MEMBER_ID"
    described = group.call(protocol.DESCRIBE_GROUPS, {"groups": ["g-basic"]})["groups"][0]
    assert described["state"] == "Stable" and len(described["members"]) == 2
    # A third member triggers a rebalance; the others learn it from their heartbeats.
    with ThreadPoolExecutor(3) as pool:
        third = pool.submit(group.join_fully)
        group.wait_for_state("PreparingRebalance", 3)  # the newcomer is in, the rebalance started
        assert group.heartbeat(follower["member_id"], generation)["error"] == "REBALANCE_IN_PROGRESS"
        rejoin_leader = pool.submit(group.join, leader["member_id"])
        rejoin_follower = pool.submit(group.join, follower["member_id"])
        results = [third.result(), rejoin_leader.result(), rejoin_follower.result()]
    assert {result["generation_id"] for result in results} == {generation + 1}
    assert sum(1 for result in results if result["members"]) == 1
    # Leaving: the remaining members rebalance without the leaver.
    left = group.call(protocol.LEAVE_GROUP, {"members": [{"member_id": results[0]["member_id"]}]})
    assert left["members"][0]["error_code"] == 0


def test_session_timeout_removes_a_silent_member(cluster: BrokerCluster) -> None:
    group = Coordinated(cluster, "g-timeout")
    joined = group.join_fully()
    generation = joined["generation_id"]
    last_contact = time.monotonic()
    group.sync(joined["member_id"], generation, {joined["member_id"]: b"all"})
    # The member stays silent: the coordinator removes it once its session timeout has passed.
    group.wait_for_state("Empty", 0, timeout=SESSION_MS / 1000 + 10)
    assert time.monotonic() - last_contact >= SESSION_MS / 1000, "removed before its session timed out"
    assert group.heartbeat(joined["member_id"], generation)["error"] == "UNKNOWN_MEMBER_ID"


def test_static_member_restart_does_not_rebalance(cluster: BrokerCluster) -> None:
    group = Coordinated(cluster, "g-static")
    joined = group.join_fully(instance="worker-1")
    assert joined["error_code"] == 0
    generation = joined["generation_id"]
    group.sync(joined["member_id"], generation, {joined["member_id"]: b"mine"})
    again = group.join(instance="worker-1")  # a restart: new process, same instance id
    assert again["error_code"] == 0 and again["generation_id"] == generation
    assert again["member_id"] != joined["member_id"]
    assert base64.b64decode(group.sync(again["member_id"], generation)["assignment"]) == b"mine"
    assert group.heartbeat(joined["member_id"], generation)["error"] in ("FENCED_INSTANCE_ID", "UNKNOWN_MEMBER_ID")


def test_inconsistent_protocols_and_bad_session_timeout(cluster: BrokerCluster) -> None:
    group = Coordinated(cluster, "g-protocols")
    joined = group.join_fully()
    assert joined["error_code"] == 0
    other = group.join(protocols=["roundrobin"])
    assert other["error"] == "INCONSISTENT_GROUP_PROTOCOL"
    assert group.join(session_ms=10)["error"] == "INVALID_SESSION_TIMEOUT"


def test_offsets_commit_fetch_fencing_and_coordinator_failover(cluster: BrokerCluster) -> None:
    group = Coordinated(cluster, "g-offsets")
    standalone = group.call(protocol.OFFSET_COMMIT, {"topics": [{"name": "orders", "partitions": [
        {"partition": 0, "offset": 42, "metadata": "checkpoint"}, {"partition": 1, "offset": 7}]}]})
    assert [entry["error_code"] for entry in standalone["topics"][0]["partitions"]] == [0, 0]
    fetched = group.call(protocol.OFFSET_FETCH, {"topics": [{"name": "orders", "partitions": [0, 1, 2]}]})
    assert [(entry["partition"], entry["offset"], entry["metadata"]) for entry in fetched["topics"][0]["partitions"]] \
        == [(0, 42, "checkpoint"), (1, 7, ""), (2, -1, "")]
    too_big = group.call(protocol.OFFSET_COMMIT, {"topics": [{"name": "orders", "partitions": [
        {"partition": 3, "offset": 1, "metadata": "x" * 5000}]}]})
    assert too_big["topics"][0]["partitions"][0]["error"] == "OFFSET_METADATA_TOO_LARGE"
    joined = group.join_fully()
    generation = joined["generation_id"]
    group.sync(joined["member_id"], generation, {joined["member_id"]: b"x"})
    stale = group.call(protocol.OFFSET_COMMIT, {"generation_id": generation - 1, "member_id": joined["member_id"],
                                                "topics": [{"name": "orders", "partitions": [{"partition": 0,
                                                                                              "offset": 1}]}]})
    assert stale["topics"][0]["partitions"][0]["error"] == "ILLEGAL_GENERATION"
    outsider = group.call(protocol.OFFSET_COMMIT, {"topics": [{"name": "orders", "partitions": [
        {"partition": 0, "offset": 1}]}]})
    assert outsider["topics"][0]["partitions"][0]["error"] == "UNKNOWN_MEMBER_ID"
    good = group.call(protocol.OFFSET_COMMIT, {"generation_id": generation, "member_id": joined["member_id"],
                                               "topics": [{"name": "orders", "partitions": [{"partition": 0,
                                                                                             "offset": 100}]}]})
    assert good["topics"][0]["partitions"][0]["error_code"] == 0
    # The coordinator dies: a new leader of the offsets partition loads the same offsets.
    old = group.node_id
    cluster.brokers[old].kill()
    try:
        def moved() -> bool:
            group.refresh()
            return group.node_id != old
        cluster.wait_for(moved, 30, "a new coordinator")
        fetched = group.call(protocol.OFFSET_FETCH, {"topics": [{"name": "orders", "partitions": [0, 1]}]})
        assert [(entry["offset"]) for entry in fetched["topics"][0]["partitions"]] == [100, 7]
        described = group.call(protocol.DESCRIBE_GROUPS, {"groups": ["g-offsets"]})["groups"][0]
        assert described["generation_id"] == generation
    finally:
        cluster.brokers[old].start()
        cluster.brokers[old].wait_ready()


def test_list_describe_and_delete_groups(cluster: BrokerCluster) -> None:
    group = Coordinated(cluster, "g-admin")
    committed = group.call(protocol.OFFSET_COMMIT, {"topics": [{"name": "t", "partitions": [
        {"partition": 0, "offset": 1}]}]})
    assert committed["topics"][0]["partitions"][0]["error_code"] == 0
    listed = []
    for broker_id in cluster.brokers:
        if cluster.brokers[broker_id].alive:
            def listing(broker_id: int = broker_id) -> Any:
                # a broker still loading an offsets partition lists only what it has loaded
                answer = cluster.call("POST", protocol.LIST_GROUPS, {}, broker_id=broker_id)
                return None if answer["loading"] else answer
            listed.extend(item["group_id"] for item in cluster.wait_for(listing, 30, "a loaded listing")["groups"])
    assert "g-admin" in listed
    busy = Coordinated(cluster, "g-busy")
    member = busy.join_fully()
    assert busy.call(protocol.DELETE_GROUPS, {"groups": ["g-busy"]})["groups"][0]["error"] == "NON_EMPTY_GROUP"
    busy.call(protocol.LEAVE_GROUP, {"members": [{"member_id": member["member_id"]}]})
    assert group.call(protocol.DELETE_GROUPS, {"groups": ["g-admin"]})["groups"][0]["error_code"] == 0
    fetched = group.call(protocol.OFFSET_FETCH, {"topics": None})
    assert fetched["topics"] == []
    missing = group.call(protocol.DELETE_GROUPS, {"groups": ["g-admin"]})["groups"][0]
    assert missing["error"] == "GROUP_ID_NOT_FOUND"
