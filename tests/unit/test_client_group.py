"""Consumer-group membership without brokers: assignor resolution, settings, the metadata
encoding, and :class:`GroupMembership` driven against a scripted in-memory coordinator (join with
MEMBER_ID_REQUIRED, leader assignment, heartbeat-triggered rebalances, fenced commits, the poll
timeout); plus the consumer-groups tool's pure helpers."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from kafkalite import protocol
from kafkalite.client.assignors import COOPERATIVE, EAGER, Assignment, Subscription
from kafkalite.client.consumer import ConsumerSettings
from kafkalite.client.group import (
    ConsumerRebalanceListener,
    GroupMembership,
    decode_assignment,
    decode_json,
    decode_subscription,
    encode_assignment,
    encode_json,
    encode_subscription,
    rebalance_protocol,
    resolve_assignors,
)
from kafkalite.client.metadata import ClusterView
from kafkalite.client.types import OffsetAndMetadata, TopicPartition
from kafkalite.errors import CommitFailedError, ConfigError, FencedInstanceIdError
from kafkalite.tools.common import UsageError
from kafkalite.tools.consumer_groups import (
    format_table,
    parse_datetime_ms,
    parse_topic_argument,
    reset_offsets,
)

# --- assignors, protocol, settings ----------------------------------------------------------------


def test_assignors_resolve_from_classes_instances_names_and_java_names() -> None:
    from kafkalite.client import CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor, StickyAssignor

    assert [item.name for item in resolve_assignors(None)] == ["range", "cooperative-sticky"]
    assert [item.name for item in resolve_assignors([RoundRobinAssignor, StickyAssignor()])] == ["roundrobin", "sticky"]
    assert [item.name for item in resolve_assignors("range, cooperative-sticky")] == ["range", "cooperative-sticky"]
    java = ["org.apache.kafka.clients.consumer.CooperativeStickyAssignor", "range", RangeAssignor]
    assert [item.name for item in resolve_assignors(java)] == ["cooperative-sticky", "range"]
    assert [item.name for item in resolve_assignors(CooperativeStickyAssignor)] == ["cooperative-sticky"]
    with pytest.raises(ConfigError, match="unknown partition assignment strategy"):
        resolve_assignors(["fair"])
    with pytest.raises(ConfigError):
        resolve_assignors([])
    with pytest.raises(ConfigError):
        resolve_assignors([42])


def test_rebalance_protocol_is_cooperative_only_when_every_assignor_is() -> None:
    assert rebalance_protocol(resolve_assignors(None)) == EAGER  # Kafka 3.x default: range first
    assert rebalance_protocol(resolve_assignors(["cooperative-sticky"])) == COOPERATIVE
    assert rebalance_protocol(resolve_assignors(["sticky"])) == EAGER


def test_consumer_settings_group_defaults_and_checks() -> None:
    settings = ConsumerSettings.from_options({"group_id": "g"})
    assert (settings.session_timeout_ms, settings.heartbeat_interval_ms, settings.max_poll_interval_ms,
            settings.rebalance_timeout_ms, settings.auto_commit_interval_ms, settings.enable_auto_commit) == \
        (45_000, 3000, 300_000, 300_000, 5000, True)
    assert settings.group_instance_id is None
    assert ConsumerSettings.from_options({"max_poll_interval_ms": 9000}).rebalance_timeout_ms == 9000
    assert ConsumerSettings.from_options({"rebalance_timeout_ms": 7000}).rebalance_timeout_ms == 7000
    with pytest.raises(ConfigError, match="heartbeat_interval_ms"):
        ConsumerSettings.from_options({"session_timeout_ms": 3000, "heartbeat_interval_ms": 3000})
    with pytest.raises(ConfigError, match="group_id"):
        ConsumerSettings.from_options({"group_id": ""})
    with pytest.raises(ConfigError):
        ConsumerSettings.from_options({"partition_assignment_strategy": ["nope"]})


def test_metadata_encoding_is_deterministic_and_tolerant() -> None:
    subscription = Subscription(["b", "a"], [("a", 1)], 4, "static-1")
    encoded = encode_json(subscription.to_json())
    assert encoded == encode_json(Subscription(["b", "a"], [("a", 1)], 4, "static-1").to_json())
    assert json.loads(base64.b64decode(encoded)) == subscription.to_json()
    assert decode_subscription(encoded) == subscription
    assignment = Assignment([("t", 0), ("t", 2)])
    assert decode_assignment(encode_json(assignment.to_json())) == assignment
    assert decode_json("") is None and decode_json("%%%") is None and decode_subscription("e30=") is None


def test_listener_lost_defaults_to_revoked() -> None:
    heard: list[set[TopicPartition]] = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            heard.append(revoked)

    Listener().on_partitions_lost({TopicPartition("t", 0)})
    assert heard == [{TopicPartition("t", 0)}]
    assert ConsumerRebalanceListener().on_partitions_assigned(set()) is None


# --- membership against a scripted coordinator ----------------------------------------------------


class FakeCoordinator:
    """Answers group requests like a coordinator with one member (this one) would."""

    def __init__(self) -> None:
        self.generation = 0
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.heartbeat_errors: list[str] = []
        self.commit_errors: list[str] = []
        self.assignment = ""
        self.committed: dict[tuple[str, int], int] = {}

    @staticmethod
    def error(name: str, **fields: Any) -> dict[str, Any]:
        cls = __import__("kafkalite.errors", fromlist=["for_name"]).for_name(name)
        return {"error_code": cls.errno, "error": name, "message": name, **fields}

    async def request_json(self, address: str, method: str, path: str, body: Any = None,
                           timeout_ms: int | None = None, **_: Any) -> Any:
        self.requests.append((path, body))
        if path == protocol.FIND_COORDINATOR:
            return {"error_code": 0, "node_id": 1, "host": "coordinator", "port": 1}
        if path == protocol.JOIN_GROUP:
            if not body["member_id"]:
                return self.error("MEMBER_ID_REQUIRED", member_id="member-1")
            self.generation += 1
            return {"error_code": 0, "generation_id": self.generation, "member_id": body["member_id"],
                    "leader": body["member_id"], "protocol_name": body["protocols"][0]["name"],
                    "members": [{"member_id": body["member_id"], "metadata": body["protocols"][0]["metadata"]}]}
        if path == protocol.SYNC_GROUP:
            mine = [item["assignment"] for item in body["assignments"] if item["member_id"] == body["member_id"]]
            self.assignment = mine[0] if mine else self.assignment
            return {"error_code": 0, "assignment": self.assignment}
        if path == protocol.HEARTBEAT:
            if self.heartbeat_errors:
                return self.error(self.heartbeat_errors.pop(0))
            return {"error_code": 0}
        if path == protocol.OFFSET_COMMIT:
            code = self.error(self.commit_errors.pop(0)) if self.commit_errors else {"error_code": 0}
            for topic in body["topics"]:
                for entry in topic["partitions"]:
                    if not code["error_code"]:
                        self.committed[(topic["name"], entry["partition"])] = entry["offset"]
            return {"error_code": 0, "topics": [
                {"name": topic["name"], "partitions": [{"partition": entry["partition"], **code}
                                                       for entry in topic["partitions"]]}
                for topic in body["topics"]]}
        if path == protocol.LEAVE_GROUP:
            return {"error_code": 0, "members": []}
        raise AssertionError(f"unexpected request {path}")

    def sent(self, path: str) -> list[dict[str, Any]]:
        return [body for sent_path, body in self.requests if sent_path == path]


class FakeMetadata:
    def __init__(self, partitions: int) -> None:
        topic = protocol.TopicMetadata("t", [protocol.PartitionMetadata(number, 1, 0, [1], [1])
                                             for number in range(partitions)])
        self.view = ClusterView.build("c", 1, [protocol.BrokerEndpoint(1, "coordinator", 1)], [topic], time.monotonic())

    def _candidates(self) -> list[str]:
        return ["coordinator:1"]

    async def refresh(self, *args: Any, **kwargs: Any) -> ClusterView:
        return self.view

    def add_topics(self, topics: Any) -> bool:
        return False

    def request_update(self) -> None:
        pass


class FakeCore:
    """What GroupMembership needs of a consumer core: partitions, subscription, listener hooks."""

    def __init__(self, coordinator: FakeCoordinator, partitions: int = 3) -> None:
        self.metadata = FakeMetadata(partitions)
        self.transport = coordinator
        self.partitions: dict[TopicPartition, Any] = {}
        self.subscribed_topics = {"t"}
        self.subscribed_pattern: re.Pattern[str] | None = None
        self.settings = SimpleNamespace(exclude_internal_topics=True, isolation_level=0)
        self.fetcher = None
        self.events: list[tuple[str, set[TopicPartition]]] = []

    async def revoke_partitions(self, partitions: set[TopicPartition], lost: bool) -> None:
        self.events.append(("lost" if lost else "revoked", set(partitions)))
        for tp in partitions:
            self.partitions.pop(tp, None)

    async def assign_partitions(self, partitions: set[TopicPartition]) -> None:
        self.events.append(("assigned", set(partitions)))
        for tp in partitions:
            self.partitions[tp] = SimpleNamespace(position=10 + tp.partition, leader_epoch=-1)

    def positions(self, partitions: Any) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(self.partitions[tp].position) for tp in partitions if tp in self.partitions}


def membership(core: FakeCore, strategy: Any = None, **overrides: Any) -> GroupMembership:
    options: dict[str, Any] = dict(
        group_id="g", assignors=resolve_assignors(strategy), session_timeout_ms=3000, heartbeat_interval_ms=50,
        max_poll_interval_ms=60_000, rebalance_timeout_ms=60_000, group_instance_id=None, enable_auto_commit=True,
        auto_commit_interval_ms=60_000, request_timeout_ms=2000, retry_backoff_ms=10, client_id="unit")
    options.update(overrides)
    return GroupMembership(core, **options)  # type: ignore[arg-type]


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 20))


def test_join_assigns_everything_and_a_heartbeat_rebalance_revokes_eagerly() -> None:
    async def scenario() -> None:
        coordinator = FakeCoordinator()
        core = FakeCore(coordinator)
        group = membership(core)
        group.start()
        await group.poll(time.monotonic() + 5)
        everything = {TopicPartition("t", number) for number in range(3)}
        assert core.events == [("assigned", everything)] and set(core.partitions) == everything
        joins = coordinator.sent(protocol.JOIN_GROUP)
        assert [body["member_id"] for body in joins] == ["", "member-1"]
        assert [item["name"] for item in joins[-1]["protocols"]] == ["range", "cooperative-sticky"]
        first = decode_subscription(joins[-1]["protocols"][0]["metadata"])
        assert first == Subscription(["t"], [], -1, None)
        # The coordinator starts a rebalance: the heartbeat hears it, the next poll rejoins.
        coordinator.heartbeat_errors.append("REBALANCE_IN_PROGRESS")
        deadline = time.monotonic() + 5
        while not group.rejoin_needed and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert group.rejoin_needed
        await group.poll(time.monotonic() + 5)
        assert core.events[1:] == [("revoked", everything), ("assigned", everything)]
        # Eager: what it owned was committed before it was revoked; the subscription stays the same
        # (range needs no owned partitions), so a restarted static member would send the same bytes.
        assert coordinator.committed == {("t", 0): 10, ("t", 1): 11, ("t", 2): 12}
        assert coordinator.sent(protocol.JOIN_GROUP)[-1]["protocols"] == joins[-1]["protocols"]
        assert group.generation == 2
        await group.close(autocommit=False)
        assert coordinator.sent(protocol.LEAVE_GROUP)[-1]["members"][0]["member_id"] == "member-1"

    run(scenario())


async def cooperative_member_rejoining() -> tuple[FakeCoordinator, FakeCore, GroupMembership]:
    """A cooperative-sticky member in generation 1 owning its partitions, asked to rejoin: its
    join runs in the background."""
    coordinator = FakeCoordinator()
    core = FakeCore(coordinator)
    group = membership(core, ["cooperative-sticky"])
    group.start()
    await group.poll(time.monotonic() + 5)
    group.request_rejoin("test")
    await group.poll(time.monotonic() + 5)  # owns partitions: the join runs in the background
    return coordinator, core, group


async def poll_until_events(group: GroupMembership, core: FakeCore, count: int) -> None:
    """Poll until the core has seen ``count`` rebalance events (at most 5 s)."""
    deadline = time.monotonic() + 5
    while len(core.events) < count and time.monotonic() < deadline:
        await group.poll(time.monotonic() + 0.05)
        await asyncio.sleep(0.01)


def test_cooperative_members_report_owned_partitions_and_keep_them() -> None:
    async def scenario() -> None:
        coordinator, core, group = await cooperative_member_rejoining()
        assert len(core.events) == 1 and group.joining
        await poll_until_events(group, core, 2)
        subscription = decode_subscription(coordinator.sent(protocol.JOIN_GROUP)[-1]["protocols"][0]["metadata"])
        assert subscription is not None
        assert subscription.owned_partitions == [("t", 0), ("t", 1), ("t", 2)] and subscription.generation == 1
        assert [kind for kind, _ in core.events] == ["assigned", "assigned"]  # nothing revoked
        assert core.events[1][1] == set()
        await group.close(autocommit=False)

    run(scenario())


def test_a_fenced_commit_fails_and_the_next_poll_hands_the_partitions_over_as_lost() -> None:
    async def scenario() -> None:
        coordinator = FakeCoordinator()
        core = FakeCore(coordinator)
        group = membership(core)
        group.start()
        await group.poll(time.monotonic() + 5)
        coordinator.commit_errors.append("ILLEGAL_GENERATION")
        with pytest.raises(CommitFailedError, match="rebalanced"):
            await group.commit({TopicPartition("t", 0): OffsetAndMetadata(5)}, 2000)
        assert group.generation == -1 and group.member_id == "member-1" and group.rejoin_needed
        with pytest.raises(CommitFailedError, match="not part of an active group generation"):
            await group.commit({TopicPartition("t", 0): OffsetAndMetadata(5)}, 2000)
        await group.poll(time.monotonic() + 5)
        assert [kind for kind, _ in core.events] == ["assigned", "lost", "assigned"]
        assert group.generation == 2
        coordinator.heartbeat_errors.append("FENCED_INSTANCE_ID")
        deadline = time.monotonic() + 5
        while group.fatal_error is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        with pytest.raises(FencedInstanceIdError):
            await group.poll(time.monotonic())
        await group.close(autocommit=False)

    run(scenario())


def test_a_commit_refused_for_its_generation_during_a_rebalance_loses_nothing() -> None:
    """A commit sent in generation 1 comes back ILLEGAL_GENERATION while the member's join is under
    way (the group moved on meanwhile): the join settles the generation, the partitions the member
    keeps are not handed over as lost, and no further rebalance follows."""
    async def scenario() -> None:
        coordinator, core, group = await cooperative_member_rejoining()
        assert group.joining and group.generation == 1
        coordinator.commit_errors.append("ILLEGAL_GENERATION")
        with pytest.raises(CommitFailedError, match="undergoing a rebalance"):
            await group.commit({TopicPartition("t", 0): OffsetAndMetadata(5)}, 2000)
        assert group.generation == 1 and not group.rejoin_needed
        await poll_until_events(group, core, 2)
        assert [kind for kind, _ in core.events] == ["assigned", "assigned"]  # nothing lost, nothing revoked
        assert group.generation == 2 and not group.rejoin_needed
        joins = len(coordinator.sent(protocol.JOIN_GROUP))
        await group.poll(time.monotonic() + 0.2)
        assert len(coordinator.sent(protocol.JOIN_GROUP)) == joins
        await group.close(autocommit=False)

    run(scenario())


def test_a_member_that_does_not_poll_leaves_the_group() -> None:
    async def scenario() -> None:
        coordinator = FakeCoordinator()
        core = FakeCore(coordinator)
        group = membership(core, max_poll_interval_ms=200)
        group.start()
        group.poll_started()
        await group.poll(time.monotonic() + 5)
        group.poll_finished()
        stopped_polling = time.monotonic()
        # No poll for max.poll.interval.ms (200 ms): the member leaves the group on its own.
        deadline = stopped_polling + 5
        assert not group.rejoin_needed
        while not group.rejoin_needed and time.monotonic() < deadline:  # set once it has left
            await asyncio.sleep(0.01)
        assert time.monotonic() - stopped_polling >= 0.2, "left before max.poll.interval.ms passed"
        leaves = coordinator.sent(protocol.LEAVE_GROUP)
        assert leaves and leaves[0]["members"][0]["member_id"] == "member-1"
        assert group.generation == -1 and group.member_id == ""
        with pytest.raises(CommitFailedError):
            await group.commit({TopicPartition("t", 0): OffsetAndMetadata(1)}, 1000)
        group.poll_started()
        await group.poll(time.monotonic() + 5)
        group.poll_finished()
        assert [kind for kind, _ in core.events] == ["assigned", "lost", "assigned"]
        await group.close(autocommit=False)

    run(scenario())


def test_a_static_member_does_not_leave_on_close() -> None:
    async def scenario() -> None:
        coordinator = FakeCoordinator()
        core = FakeCore(coordinator)
        group = membership(core, group_instance_id="worker-1")
        group.start()
        await group.poll(time.monotonic() + 5)
        assert coordinator.sent(protocol.JOIN_GROUP)[-1]["group_instance_id"] == "worker-1"
        await group.close(autocommit=True)
        assert coordinator.sent(protocol.LEAVE_GROUP) == []
        assert coordinator.committed == {("t", 0): 10, ("t", 1): 11, ("t", 2): 12}  # commit on close
        assert core.events[-1] == ("revoked", {TopicPartition("t", number) for number in range(3)})

    run(scenario())


# --- the tool's pure parts --------------------------------------------------------------------------


def test_topic_arguments_and_datetimes() -> None:
    assert parse_topic_argument("orders").partitions is None
    assert parse_topic_argument("orders:2,0,2").partitions == (0, 2)
    for bad in ("orders:x", ":1", "orders:", "orders:-1"):
        with pytest.raises(UsageError):
            parse_topic_argument(bad)
    utc = int(datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC).timestamp() * 1000)
    assert parse_datetime_ms("2024-05-06T07:08:09.123Z") == utc
    assert parse_datetime_ms("2024-05-06T09:08:09.123+02:00") == utc
    assert parse_datetime_ms("2024-05-06T09:08:09.123+0200") == utc
    local = int(datetime(2024, 5, 6, 7, 8, 9).astimezone().timestamp() * 1000)
    assert parse_datetime_ms("2024-05-06T07:08:09") == local
    for bad in ("2024-05-06", "yesterday", "2024-13-01T00:00:00"):
        with pytest.raises(UsageError):
            parse_datetime_ms(bad)


def test_reset_offsets_scenarios_stay_within_the_log() -> None:
    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    earliest = {tps[0]: 5, tps[1]: 0}
    latest = {tps[0]: 50, tps[1]: 10}
    committed = {tps[0]: 20}

    def reset(scenario: str, value: Any = None, by_time: Any = None, partitions: Any = tps) -> list[int]:
        result = reset_offsets(scenario, value, partitions, committed, earliest, latest, by_time)
        return [result[tp] for tp in partitions]

    assert reset("to_earliest") == [5, 0]
    assert reset("to_latest") == [50, 10]
    assert reset("to_current") == [20, 10]
    assert reset("to_offset", 7) == [7, 7]
    assert reset("to_offset", 999) == [50, 10]
    assert reset("to_offset", 0) == [5, 0]
    assert reset("shift_by", -100, partitions=tps[:1]) == [5]
    assert reset("shift_by", 3, partitions=tps[:1]) == [23]
    with pytest.raises(UsageError, match="no current committed offset"):
        reset("shift_by", 1)
    assert reset("to_datetime", by_time={tps[0]: 30, tps[1]: -1}) == [30, 10]


def test_tables_are_aligned_with_dashes_for_missing_cells() -> None:
    text = format_table(("GROUP", "LAG", "CONSUMER-ID"), [("g", 5, None), ("longer-group", None, "c-1")])
    assert text.splitlines() == ["GROUP        LAG CONSUMER-ID", "g            5   -", "longer-group -   c-1"]


def test_metadata_uses_kafkas_consumer_protocol_encoding() -> None:
    """Members of one group may use Kafka's clients: kafkalite writes Kafka's ConsumerProtocol
    (checked with kafka-python's own decoder) and reads what kafka-python writes."""
    from kafka.coordinator.assignors.abstract import ConsumerProtocolAssignment, ConsumerProtocolSubscription

    subscription = Subscription(["b", "a"], [("a", 0), ("a", 1)], 4, None, b"user")
    encoded = encode_subscription(subscription)
    assert encoded == encode_subscription(Subscription(["b", "a"], [("a", 0), ("a", 1)], 4, None, b"user"))
    theirs = ConsumerProtocolSubscription.decode(base64.b64decode(encoded))
    assert (theirs.version, theirs.topics, theirs.user_data, theirs.generation_id) == (3, ["b", "a"], b"user", 4)
    assert [(item.topic, sorted(item.partitions)) for item in theirs.owned_partitions] == [("a", [0, 1])]
    assert decode_subscription(encoded) == subscription
    assignment = Assignment([("t", 0), ("t", 2), ("u", 1)])
    decoded = ConsumerProtocolAssignment.decode(base64.b64decode(encode_assignment(assignment)))
    assert [(item.topic, item.partitions) for item in decoded.assigned_partitions] == [("t", [0, 2]), ("u", [1])]
    assert decode_assignment(encode_assignment(assignment)) == assignment

    from_kafka_python = ConsumerProtocolSubscription(0, ["clicks"], b"").encode()
    assert decode_subscription(base64.b64encode(from_kafka_python).decode()) == Subscription(["clicks"])
    kafka_assignment = ConsumerProtocolAssignment(0, [("clicks", [0, 1])], b"").encode()
    assert decode_assignment(base64.b64encode(kafka_assignment).decode()) == Assignment([("clicks", 0),
                                                                                         ("clicks", 1)])
    assert decode_subscription(base64.b64encode(b"\x00\x00\x00\x00\x00\x05ab").decode()) is None
