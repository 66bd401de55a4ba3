"""Consumer groups end to end: real brokers, real consumers (both flavours), a member in a
process of its own killed with SIGKILL, the coordinator's broker killed mid-stream, the
consumer-groups tool.

Members poll in threads of their own (:class:`Member`): the sync flavour drives a
KafkaConsumer, the async one an AIOKafkaConsumer on a private event loop. Every member
records what it received and every listener call, with times, so tests can measure who read
what and when. Timeouts are short (sessions of 3 s, heartbeats every 300 ms) to keep the
suite bounded.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalite import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition, errors
from kafkalite.client import AIOKafkaConsumer, ConsumerRebalanceListener, OffsetAndMetadata
from kafkalite.tools import consumer_groups
from kafkalite.tools.common import run_cli
from tests.support.cluster import ROOT, BrokerCluster

pytestmark = pytest.mark.integration

SESSION_MS = 3000
HEARTBEAT_MS = 300
FAST = {"session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": HEARTBEAT_MS, "auto_offset_reset": "earliest",
        "auto_commit_interval_ms": 200, "fetch_max_wait_ms": 100}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    brokers = BrokerCluster(tmp_path_factory.mktemp("consumer-groups"),
                            f"{zookeeper.connect_string}/consumer-groups-{uuid.uuid4().hex[:8]}", size=3).start()
    try:
        yield brokers
    finally:
        brokers.stop()


@pytest.fixture
def admin(cluster: BrokerCluster) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        yield client
    finally:
        client.close()


def new_topic(cluster: BrokerCluster, prefix: str, partitions: int, replication_factor: int = 3) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions, replication_factor)
    cluster.wait_in_sync(name)
    return name


def new_group(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def produce(cluster: BrokerCluster, topic: str, values: range, partitions: int, pause: float = 0.0) -> None:
    """Value ``i`` goes to partition ``i % partitions``; ``pause`` seconds between records."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=0)
    try:
        for value in values:
            producer.send(topic, str(value).encode(), partition=value % partitions)
            if pause:
                time.sleep(pause)  # pacing, not synchronisation: records spread over time
        producer.flush(60)
    finally:
        producer.close()


class Member(ConsumerRebalanceListener):
    """A group member polling in a thread of its own (see the module docstring)."""

    def __init__(self, flavour: str, bootstrap: str, topics: list[str], group_id: str, **options: Any) -> None:
        self.flavour = flavour
        self.options = {"bootstrap_servers": bootstrap, "group_id": group_id, "client_id": f"member-{flavour}",
                        **FAST, **options}
        self.topics = topics
        self.records: list[tuple[float, int, int, bytes]] = []  # (time, partition, offset, value)
        self.events: list[tuple[float, str, frozenset[TopicPartition]]] = []
        self.assignment: set[TopicPartition] = set()
        self.error: BaseException | None = None
        self.consumer: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._resume = threading.Event()
        self._resume.set()
        self._closed = threading.Event()
        self.thread = threading.Thread(target=self._main, name=f"member-{flavour}", daemon=True)

    # listener
    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append((time.monotonic(), "revoked", frozenset(revoked)))
        self.assignment -= revoked

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append((time.monotonic(), "assigned", frozenset(assigned)))
        self.assignment |= assigned

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.events.append((time.monotonic(), "lost", frozenset(lost)))
        self.assignment -= lost

    def revoked(self, kind: str = "revoked") -> list[frozenset[TopicPartition]]:
        return [partitions for _, name, partitions in self.events if name == kind]

    # the poll loop
    def start(self) -> Member:
        self.thread.start()
        return self

    def _keep(self, batch: dict[TopicPartition, list[Any]]) -> None:
        now = time.monotonic()
        for records in batch.values():
            for record in records:
                self.records.append((now, record.partition, record.offset, record.value))

    def _main(self) -> None:
        try:
            if self.flavour == "sync":
                self.consumer = KafkaConsumer(**self.options)
                self.consumer.subscribe(self.topics, listener=self)
                while not self._stop.is_set():
                    self._resume.wait()
                    self._keep(self.consumer.poll(timeout_ms=100))
            else:
                self.loop = asyncio.new_event_loop()
                self.loop.run_until_complete(self._main_async())
        except BaseException as exc:  # reported by the test through .error
            self.error = exc
        finally:
            self._closed.set()

    async def _main_async(self) -> None:
        self.consumer = AIOKafkaConsumer(**self.options)
        await self.consumer.start()
        self.consumer.subscribe(self.topics, listener=self)
        try:
            while not self._stop.is_set():
                while not self._resume.is_set():
                    await asyncio.sleep(0.05)
                self._keep(await self.consumer.getmany(timeout_ms=100))
        finally:
            await self.consumer.stop()

    def pause_polling(self) -> None:
        self._resume.clear()

    def resume_polling(self) -> None:
        self._resume.set()

    def stop(self) -> None:
        self._stop.set()
        self._resume.set()
        self.thread.join(30)
        if self.flavour == "sync" and self.consumer is not None:
            self.consumer.close()
        if self.loop is not None:
            self.loop.close()

    def values(self) -> list[int]:
        return [int(value) for _, _, _, value in self.records]


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    try:
        yield started
    finally:
        for member in reversed(started):
            member.stop()


def spawn(members: list[Member], *args: Any, **options: Any) -> Member:
    member = Member(*args, **options)
    members.append(member)
    return member.start()


def settled(members: list[Member], partitions: int, each: int | None = None) -> bool:
    """Every partition owned by exactly one member (``each`` per member when given)."""
    owned = [tp for member in members for tp in member.assignment]
    if len(owned) != partitions or len(set(owned)) != partitions:
        return False
    return each is None or all(len(member.assignment) == each for member in members)


# --- tests ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_three_members_share_six_partitions_and_a_fourth_rebalances(
        flavour: str, cluster: BrokerCluster, admin: KafkaAdminClient, members: list[Member]) -> None:
    topic = new_topic(cluster, "split", 6)
    group = new_group("split")
    first = [spawn(members, flavour, cluster.bootstrap, [topic], group) for _ in range(3)]
    wait_until(lambda: settled(first, 6, each=2), 30, "3 members with 2 partitions each")
    assert all(not member.revoked("lost") for member in first)
    produce(cluster, topic, range(60), 6)
    wait_until(lambda: sum(len(member.records) for member in first) >= 60, 30, "60 records read")
    for member in first:
        assert {partition for _, partition, _, _ in member.records} == {tp.partition for tp in member.assignment}
    generation = admin.describe_consumer_groups([group])[0].generation_id
    # A fourth member: a rebalance. The default strategies ([range, cooperative-sticky]) rebalance
    # eagerly, so every member revokes all it owns before rejoining.
    revoked_before = [len(member.revoked()) for member in first]
    fourth = spawn(members, flavour, cluster.bootstrap, [topic], group)
    everyone = [*first, fourth]
    wait_until(lambda: settled(everyone, 6) and all(len(member.assignment) in (1, 2) for member in everyone)
               and all(len(member.revoked()) > count for member, count in zip(first, revoked_before)),
               30, "4 members sharing 6 partitions")
    assert sorted(len(member.assignment) for member in everyone) == [1, 1, 2, 2]
    for member, count in zip(first, revoked_before):
        assert len(member.revoked()[count]) == 2  # eager: everything it owned
    description = admin.describe_consumer_groups([group])[0]
    assert description.state == "Stable" and description.generation_id > generation
    assert len(description.members) == 4
    assert description.protocol == "range"


def test_cooperative_sticky_keeps_unmoved_partitions_flowing(cluster: BrokerCluster, admin: KafkaAdminClient,
                                                              members: list[Member]) -> None:
    topic = new_topic(cluster, "coop", 6)
    group = new_group("coop")
    options = {"partition_assignment_strategy": ["cooperative-sticky"], "heartbeat_interval_ms": 1000}
    first = [spawn(members, "sync", cluster.bootstrap, [topic], group, **options) for _ in range(2)]
    wait_until(lambda: settled(first, 6, each=3), 30, "2 members with 3 partitions each")
    before = {id(member): set(member.assignment) for member in first}
    events_before = {id(member): len(member.events) for member in first}
    stop = threading.Event()

    def keep_producing() -> None:
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=0)
        value = 0
        try:
            while not stop.is_set():
                producer.send(topic, str(value).encode(), partition=value % 6)
                value += 1
                time.sleep(0.005)  # pacing, not synchronisation: a steady stream of records
            producer.flush(30)
        finally:
            producer.close()

    def flowing_since(moment: float) -> bool:
        """Every partition the first members own delivered a record after ``moment``."""
        received = {(id(member), partition) for member in first
                    for at, partition, _, _ in list(member.records) if at > moment}
        return all((id(member), tp.partition) in received for member in first for tp in member.assignment)

    writer_started = time.monotonic()
    writer = threading.Thread(target=keep_producing, daemon=True)
    writer.start()
    try:
        wait_until(lambda: flowing_since(writer_started), 20, "records flowing on every partition")
        window_start = time.monotonic()
        third = spawn(members, "sync", cluster.bootstrap, [topic], group, **options)
        everyone = [*first, third]
        wait_until(lambda: settled(everyone, 6, each=2), 30, "3 members with 2 partitions each")
        window_end = next(moment for moment, kind, partitions in third.events if kind == "assigned" and partitions)
        wait_until(lambda: flowing_since(window_end), 20, "records flowing on every kept partition after the rebalance")
    finally:
        stop.set()
        writer.join(30)
    moved = set(third.assignment)
    revoked = [partitions for member in first for _, kind, partitions in member.events[events_before[id(member)]:]
               if kind in ("revoked", "lost")]
    # Only the two partitions that moved to the new member were revoked, one from each member.
    assert sorted(len(partitions) for partitions in revoked) == [1, 1], [
        (round(moment - window_start, 3), kind, sorted(tp.partition for tp in partitions))
        for member in everyone for moment, kind, partitions in member.events]
    assert set().union(*revoked) == moved
    for member in first:
        kept = before[id(member)] - moved
        assert member.assignment == kept and len(kept) == 2
        # The kept partitions never stopped: records of each arrived while the rebalance ran.
        for tp in kept:
            during = [moment for moment, partition, _, _ in member.records
                      if partition == tp.partition and window_start < moment < window_end]
            assert during, f"no record of kept partition {tp.partition} during the rebalance " \
                           f"({window_end - window_start:.2f} s)"
    assert admin.describe_consumer_groups([group])[0].protocol == "cooperative-sticky"


MEMBER_SCRIPT = r'''
import sys
from kafkalite import KafkaConsumer
from kafkalite.client import ConsumerRebalanceListener
bootstrap, topic, group, path = sys.argv[1:5]
out = open(path, "a", buffering=1)
class Listener(ConsumerRebalanceListener):
    def on_partitions_assigned(self, assigned):
        out.write("assigned " + " ".join(str(tp.partition) for tp in sorted(assigned)) + "\n")
    def on_partitions_revoked(self, revoked):
        out.write("revoked " + " ".join(str(tp.partition) for tp in sorted(revoked)) + "\n")
consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id="doomed", session_timeout_ms=3000,
                         heartbeat_interval_ms=300, auto_offset_reset="earliest", auto_commit_interval_ms=200,
                         fetch_max_wait_ms=100)
consumer.subscribe([topic], listener=Listener())
while True:
    for records in consumer.poll(timeout_ms=100).values():
        for record in records:
            out.write(f"record {record.partition} {record.offset} {record.value.decode()}\n")
'''


class ProcessMember:
    """A group member in a process of its own, reporting through a file (line per event)."""

    def __init__(self, directory: Path, bootstrap: str, topic: str, group: str) -> None:
        self.path = directory / f"member-{uuid.uuid4().hex[:6]}.log"
        self.path.touch()
        self.stderr_path = self.path.with_suffix(".stderr")
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-c", MEMBER_SCRIPT, bootstrap, topic, group, str(self.path)],
                cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.DEVNULL, stderr=stderr)

    def lines(self) -> list[list[str]]:
        text = self.path.read_text()
        complete = text[:text.rfind("\n") + 1]  # a SIGKILL may cut the last line short
        return [line.split() for line in complete.splitlines() if line]

    def assignment(self) -> set[int]:
        owned: set[int] = set()
        for parts in self.lines():
            if parts[0] == "assigned":
                owned |= {int(item) for item in parts[1:]}
            elif parts[0] == "revoked":
                owned -= {int(item) for item in parts[1:]}
        return owned

    def records(self) -> list[tuple[int, int]]:
        """(partition, value) of every complete record line."""
        found = []
        for parts in self.lines():
            if parts[0] == "record" and len(parts) == 4:
                found.append((int(parts[1]), int(parts[3])))
        return found

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


def test_a_member_killed_with_sigkill_loses_its_partitions_after_the_session_timeout(
        cluster: BrokerCluster, members: list[Member], tmp_path: Path) -> None:
    topic = new_topic(cluster, "sigkill", 6)
    group = new_group("sigkill")
    survivors = [spawn(members, "sync", cluster.bootstrap, [topic], group) for _ in range(2)]
    doomed = ProcessMember(tmp_path, cluster.bootstrap, topic, group)
    try:
        wait_until(lambda: settled(survivors, 4, each=2) and len(doomed.assignment()) == 2
                   and not (doomed.assignment() & {tp.partition for member in survivors for tp in member.assignment}),
                   40, "3 members with 2 partitions each")
        doomed_partitions = doomed.assignment()
        total = 900
        writer = threading.Thread(target=produce, args=(cluster, topic, range(total), 6, 0.004), daemon=True)
        writer.start()
        wait_until(lambda: len(doomed.records()) >= 30, 30, "the doomed member to read some records")
        killed_at = time.monotonic()
        doomed.kill()
        writer.join(60)

        def everything_read() -> bool:
            seen = {value for member in survivors for value in member.values()}
            seen |= {value for _, value in doomed.records()}
            return seen >= set(range(total))
        wait_until(everything_read, 40, "every produced record read by the group")
        wait_until(lambda: settled(survivors, 6, each=3), 20, "the survivors to own all 6 partitions")
    finally:
        doomed.kill()
    # The dead member's partitions moved only once its session had expired.
    taken = [moment for member in survivors for moment, kind, partitions in member.events
             if kind == "assigned" and {tp.partition for tp in partitions} & doomed_partitions and moment > killed_at]
    assert taken and min(taken) - killed_at >= (SESSION_MS - HEARTBEAT_MS - 300) / 1000
    # At least once: nothing skipped; duplicates only where the dead member had been reading.
    counts: dict[int, int] = {}
    for member in survivors:
        for value in member.values():
            counts[value] = counts.get(value, 0) + 1
    for _, value in doomed.records():
        counts[value] = counts.get(value, 0) + 1
    assert set(counts) >= set(range(total))
    duplicated = {value for value, count in counts.items() if count > 1}
    assert all(value % 6 in doomed_partitions for value in duplicated), sorted(duplicated)[:20]


def test_a_member_that_stops_polling_leaves_and_rejoins(cluster: BrokerCluster, admin: KafkaAdminClient,
                                                        members: list[Member]) -> None:
    topic = new_topic(cluster, "maxpoll", 4)
    group = new_group("maxpoll")
    slow = spawn(members, "sync", cluster.bootstrap, [topic], group, max_poll_interval_ms=2000,
                 enable_auto_commit=False)
    steady = spawn(members, "async", cluster.bootstrap, [topic], group)
    wait_until(lambda: settled([slow, steady], 4, each=2), 30, "2 members with 2 partitions each")
    slow.pause_polling()
    paused_at = time.monotonic()
    wait_until(lambda: len(steady.assignment) == 4, 20, "the steady member to take every partition")
    assert time.monotonic() - paused_at >= 2.0
    description = admin.describe_consumer_groups([group])[0]
    assert [member.client_id for member in description.members] == ["member-async"]
    with pytest.raises(errors.CommitFailedError):
        slow.consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(1)})
    slow.resume_polling()
    wait_until(lambda: settled([slow, steady], 4, each=2), 30, "the slow member back in the group")
    assert slow.revoked("lost"), "the slow member's partitions were lost, not revoked"


def test_static_member_restart_does_not_rebalance(cluster: BrokerCluster, admin: KafkaAdminClient,
                                                  members: list[Member]) -> None:
    topic = new_topic(cluster, "static", 6)
    group = new_group("static")
    options = {"session_timeout_ms": 6000}
    first = spawn(members, "sync", cluster.bootstrap, [topic], group, group_instance_id="worker-a", **options)
    second = spawn(members, "async", cluster.bootstrap, [topic], group, group_instance_id="worker-b", **options)
    wait_until(lambda: settled([first, second], 6, each=3), 30, "2 static members with 3 partitions each")

    def stable_with_both() -> bool:
        description = admin.describe_consumer_groups([group])[0]
        return description.state == "Stable" and \
            sorted(member.group_instance_id for member in description.members) == ["worker-a", "worker-b"]

    wait_until(stable_with_both, 20, "the group Stable with both static members (no rebalance pending)")
    generation = admin.describe_consumer_groups([group])[0].generation_id
    owned = set(first.assignment)
    second_events = len(second.events)
    first.stop()  # a static member sends no LeaveGroup: the group keeps its place
    members.remove(first)
    restarted = spawn(members, "sync", cluster.bootstrap, [topic], group, group_instance_id="worker-a", **options)
    wait_until(lambda: restarted.assignment == owned, 20, "the restarted member to get its partitions back")
    # Had the rejoin started a rebalance, the restarted member would only get its partitions once
    # that rebalance completed (every member rejoined, a new generation): the group is checked now.
    description = admin.describe_consumer_groups([group])[0]
    assert description.generation_id == generation and description.state == "Stable"
    assert sorted(member.group_instance_id for member in description.members) == ["worker-a", "worker-b"]
    assert len(second.events) == second_events, second.events[second_events:]


def test_two_groups_on_one_topic_each_read_every_record(cluster: BrokerCluster, members: list[Member]) -> None:
    topic = new_topic(cluster, "twogroups", 3)
    one, two = new_group("one"), new_group("two")
    alone = spawn(members, "sync", cluster.bootstrap, [topic], one)
    pair = [spawn(members, "async", cluster.bootstrap, [topic], two) for _ in range(2)]
    wait_until(lambda: settled([alone], 3) and settled(pair, 3), 30, "both groups assigned")
    produce(cluster, topic, range(150), 3)
    wait_until(lambda: set(alone.values()) >= set(range(150)), 30, "group one to read everything")
    wait_until(lambda: {value for member in pair for value in member.values()} >= set(range(150)), 30,
               "group two to read everything")
    assert sorted(alone.values()) == list(range(150))
    assert sorted(value for member in pair for value in member.values()) == list(range(150))


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_commit_committed_and_resume_from_committed(flavour: str, cluster: BrokerCluster) -> None:
    topic = new_topic(cluster, "commit", 2)
    group = new_group("commit")
    produce(cluster, topic, range(40), 2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    runner = _Flavour(flavour)
    try:
        options = {"bootstrap_servers": cluster.bootstrap, "group_id": group, "enable_auto_commit": False, **FAST}
        consumer = runner.consumer(**options)
        consumer.subscribe([topic])
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 40 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
        assert len(got) == 40
        assert consumer.committed(tp0) is None
        consumer.commit()
        assert consumer.committed(tp0) == consumer.position(tp0) == 20
        consumer.commit({tp0: OffsetAndMetadata(5, "checkpoint"), tp1: 7})
        assert consumer.committed(tp0, metadata=True) == OffsetAndMetadata(5, "checkpoint", -1)
        heard: list[Any] = []
        consumer.commit_async({tp1: OffsetAndMetadata(8)}, lambda offsets, error: heard.append((offsets, error)))
        wait_until(lambda: (consumer.poll(timeout_ms=50) is not None and heard), 10, "the commit callback")
        assert heard == [({tp1: OffsetAndMetadata(8, "", -1)}, None)]
        consumer.close()
        # A new member of the group resumes from the committed offsets.
        again = runner.consumer(**options)
        again.subscribe([topic])
        resumed: list[Any] = []
        deadline = time.monotonic() + 30
        while len(resumed) < 15 + 12 and time.monotonic() < deadline:
            for records in again.poll(timeout_ms=200).values():
                resumed.extend(records)
        assert sorted((record.partition, record.offset) for record in resumed) == \
            [(0, offset) for offset in range(5, 20)] + [(1, offset) for offset in range(8, 20)]
        again.close()
        # Manual assignment with a group id: positions from the committed offsets, standalone commits.
        manual = runner.consumer(**options)
        manual.assign([tp0])
        assert manual.position(tp0) == 5
        manual.commit({tp0: OffsetAndMetadata(9)})
        assert manual.committed(tp0) == 9
        manual.close()
        standalone = runner.consumer(bootstrap_servers=cluster.bootstrap)
        with pytest.raises(errors.GroupCoordinatorUnsupportedError):
            standalone.commit()
    finally:
        runner.close()


class _Flavour:
    """Blocking access to consumers of either flavour (the async ones on a private loop)."""

    def __init__(self, flavour: str) -> None:
        self.flavour = flavour
        self.opened: list[Any] = []
        self.loop = asyncio.new_event_loop() if flavour == "async" else None
        self.thread = None
        if self.loop is not None:
            self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
            self.thread.start()

    def run(self, coroutine: Any) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(60)

    def consumer(self, **options: Any) -> Any:
        if self.flavour == "sync":
            client: Any = KafkaConsumer(**options)
            self.opened.append(client)
            return client

        async def create() -> Any:
            consumer = AIOKafkaConsumer(**options)
            await consumer.start()
            return consumer
        proxy = _AsyncProxy(self, self.run(create()))
        self.opened.append(proxy)
        return proxy

    def close(self) -> None:
        for client in reversed(self.opened):
            try:
                client.close()
            except errors.KafkaliteError:
                pass
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            assert self.thread is not None
            self.thread.join(10)
            self.loop.close()


class _AsyncProxy:
    def __init__(self, owner: _Flavour, target: Any) -> None:
        self._owner = owner
        self._target = target
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._owner.run(self._target.stop())

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            async def invoke() -> Any:
                result = attribute(*args, **kwargs)
                if asyncio.iscoroutine(result):
                    result = await result
                return result
            return self._owner.run(invoke())
        return call


def test_the_group_survives_its_coordinator_broker_being_killed(cluster: BrokerCluster, admin: KafkaAdminClient,
                                                                members: list[Member]) -> None:
    topic = new_topic(cluster, "failover", 3)
    group = new_group("failover")
    pair = [spawn(members, "sync", cluster.bootstrap, [topic], group) for _ in range(2)]
    wait_until(lambda: settled(pair, 3), 30, "2 members sharing 3 partitions")
    total = 600
    writer = threading.Thread(target=produce, args=(cluster, topic, range(total), 3, 0.01), daemon=True)
    writer.start()
    wait_until(lambda: sum(len(member.records) for member in pair) >= 150, 30, "a quarter of the records read")
    coordinator = admin.describe_consumer_groups([group])[0].coordinator
    assert coordinator is not None
    before = admin.list_consumer_group_offsets(group)
    assert before and all(value.offset > 0 for value in before.values())
    victim = cluster.brokers[coordinator.broker_id]
    victim.kill()
    try:
        writer.join(90)
        survivor = KafkaAdminClient(bootstrap_servers=",".join(broker.address for broker in cluster.brokers.values()
                                                               if broker.alive))
        try:
            after = wait_until(lambda: survivor.list_consumer_group_offsets(group), 60, "the new coordinator's offsets")
            # Nothing committed before the kill is lost.
            assert all(after[tp].offset >= value.offset for tp, value in before.items()), (before, after)
            wait_until(lambda: {value for member in pair for value in member.values()} >= set(range(total)), 60,
                       "every record read across the failover")
            ends = survivor.end_offsets([TopicPartition(topic, number) for number in range(3)])
            wait_until(lambda: all(survivor.list_consumer_group_offsets(group)[tp].offset == end
                                   for tp, end in ends.items()), 30, "the group to commit up to the end")
            moved = survivor.describe_consumer_groups([group])[0]
            assert moved.coordinator is not None and moved.coordinator.broker_id != coordinator.broker_id
            assert moved.state == "Stable" and len(moved.members) == 2
        finally:
            survivor.close()
    finally:
        victim.start()
        victim.wait_ready()
        cluster.wait_for(lambda: len(cluster.describe()["brokers"]) == 3, 60, "the broker back in the cluster")


# --- the consumer-groups tool -----------------------------------------------------------------------


def tool(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = run_cli(consumer_groups.main, list(args))
    except SystemExit as exit:  # argparse's own usage errors
        code = int(exit.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def table(text: str) -> list[dict[str, str]]:
    """The rows of the table in ``text`` (the block starting at its GROUP header)."""
    lines = [line for line in text.splitlines() if line.strip()]
    start = next(index for index, line in enumerate(lines) if line.startswith("GROUP"))
    header = lines[start].split()
    return [dict(zip(header, line.split())) for line in lines[start + 1:]]


def test_consumer_groups_tool_describe_lag_reset_delete(cluster: BrokerCluster, admin: KafkaAdminClient,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    topic = new_topic(cluster, "tool", 3)
    group = new_group("tool")
    produce(cluster, topic, range(30), 3)
    server = ["--bootstrap-server", cluster.bootstrap]
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group, client_id="lagging",
                             enable_auto_commit=False, **{**FAST, "auto_offset_reset": "earliest"})
    try:
        consumer.subscribe([topic])
        wait_until(lambda: consumer.poll(timeout_ms=100) is not None and len(consumer.assignment()) == 3, 30,
                   "the consumer to own every partition")
        tps = [TopicPartition(topic, number) for number in range(3)]
        consumer.commit({tps[0]: 4, tps[1]: 10, tps[2]: 0})
        code, out, _ = tool(capsys, *server, "--describe", "--group", group)
        assert code == 0
        rows = {int(row["PARTITION"]): row for row in table(out)}
        ends = admin.end_offsets(tps)
        committed = admin.list_consumer_group_offsets(group)
        for tp in tps:
            row = rows[tp.partition]
            assert row["TOPIC"] == topic and row["CLIENT-ID"] == "lagging" and row["HOST"] == "/127.0.0.1"
            assert int(row["LOG-END-OFFSET"]) == ends[tp] == 10
            assert int(row["CURRENT-OFFSET"]) == committed[tp].offset
            assert int(row["LAG"]) == ends[tp] - committed[tp].offset  # lag = high watermark - committed
        assert [int(rows[number]["LAG"]) for number in range(3)] == [6, 0, 10]
        code, out, _ = tool(capsys, *server, "--describe", "--group", group, "--members", "--verbose")
        (member_row,) = table(out)
        assert code == 0 and member_row["#PARTITIONS"] == "3" and member_row["ASSIGNMENT"] == f"{topic}(0,1,2)"
        code, out, _ = tool(capsys, *server, "--describe", "--group", group, "--state")
        (state_row,) = table(out)
        assert state_row["STATE"] == "Stable" and state_row["#MEMBERS"] == "1"
        code, out, err = tool(capsys, *server, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                              "--execute")
        assert code == 1 and err.strip() == (f"Error: Assignments can only be reset if the group '{group}' is "
                                             "inactive, but the current state is Stable.")
        code, out, err = tool(capsys, *server, "--delete", "--group", group)
        assert code == 1 and f"* Group '{group}' could not be deleted due to: NON_EMPTY_GROUP" in err
    finally:
        consumer.close()
    code, out, _ = tool(capsys, *server, "--list")
    assert code == 0 and group in out.split()
    code, out, _ = tool(capsys, *server, "--describe", "--group", group)
    assert code == 0 and f"Consumer group '{group}' has no active members." in out
    assert [(row["PARTITION"], row["CURRENT-OFFSET"], row["LAG"], row["CONSUMER-ID"]) for row in table(out)] == \
        [("0", "4", "6", "-"), ("1", "10", "0", "-"), ("2", "0", "10", "-")]
    # Resets: a dry run by default, committed with --execute, kept within [log start, log end].
    code, out, err = tool(capsys, *server, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest")
    assert code == 0 and "--execute option is missing" in err
    assert [row["NEW-OFFSET"] for row in table(out)] == ["0", "0", "0"]
    assert admin.list_consumer_group_offsets(group)[TopicPartition(topic, 0)].offset == 4
    code, out, _ = tool(capsys, *server, "--reset-offsets", "--group", group, "--topic", f"{topic}:0,1",
                        "--to-offset", "7", "--execute")
    assert code == 0 and [(row["PARTITION"], row["NEW-OFFSET"]) for row in table(out)] == [("0", "7"), ("1", "7")]
    offsets = admin.list_consumer_group_offsets(group)
    assert [offsets[TopicPartition(topic, number)].offset for number in range(3)] == [7, 7, 0]
    code, out, _ = tool(capsys, *server, "--reset-offsets", "--group", group, "--all-topics", "--shift-by", "-5",
                        "--execute")
    assert code == 0 and [row["NEW-OFFSET"] for row in table(out)] == ["2", "2", "0"]
    code, out, _ = tool(capsys, *server, "--reset-offsets", "--group", group, "--all-topics", "--to-offset", "99",
                        "--dry-run")
    assert [row["NEW-OFFSET"] for row in table(out)] == ["10", "10", "10"]
    code, out, _ = tool(capsys, *server, "--reset-offsets", "--group", group, "--all-topics", "--to-datetime",
                        "2001-01-01T00:00:00.000", "--execute")
    assert [row["NEW-OFFSET"] for row in table(out)] == ["0", "0", "0"]
    code, out, _ = tool(capsys, *server, "--reset-offsets", "--group", group, "--all-topics", "--to-datetime",
                        "2999-01-01T00:00:00Z", "--dry-run")
    assert [row["NEW-OFFSET"] for row in table(out)] == ["10", "10", "10"]
    # A consumer of the group now starts where the reset put it.
    code, out, _ = tool(capsys, *server, "--reset-offsets", "--group", group, "--all-topics", "--to-latest",
                        "--execute")
    code, out, _ = tool(capsys, *server, "--describe", "--group", group)
    assert [row["LAG"] for row in table(out)] == ["0", "0", "0"]
    # Deletion.
    code, out, _ = tool(capsys, *server, "--delete", "--group", group)
    assert code == 0 and out.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    code, out, err = tool(capsys, *server, "--delete", "--group", group)
    assert code == 1 and f"* Group '{group}' could not be deleted due to: GROUP_ID_NOT_FOUND" in err
    code, out, err = tool(capsys, *server, "--describe", "--group", group)
    assert code == 1 and err.strip() == f"Error: Consumer group '{group}' does not exist."
    assert group not in [listed for listed, _ in admin.list_consumer_groups()]


def test_consumer_groups_tool_usage_errors_and_script(cluster: BrokerCluster, capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    server = ["--bootstrap-server", cluster.bootstrap]
    for args in ([*server], [*server, "--describe"], [*server, "--list", "--describe"],
                 [*server, "--reset-offsets", "--group", "g", "--all-topics"],
                 [*server, "--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"],
                 [*server, "--reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest"],
                 [*server, "--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "yesterday"],
                 ["--describe", "--group", "g"]):
        code, _, err = tool(capsys, *args)
        assert code == 2 and err.startswith(("Error: ", "usage: ")) and "Traceback" not in err, (args, err)
    script = ROOT / "scripts" / "kafkalite-consumer-groups.sh"
    missing = subprocess.run([str(script), *server, "--describe", "--group", "no-such-group"], capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode == 1 and missing.stderr.strip() == "Error: Consumer group 'no-such-group' does not exist."
    unreachable = subprocess.run([str(script), "--bootstrap-server", "127.0.0.1:1", "--list"], capture_output=True,
                                 text=True, timeout=60)
    assert unreachable.returncode == 1 and unreachable.stderr.startswith("Error: ")
    assert "Traceback" not in unreachable.stderr
