"""The broker's coordination logic runs on the Coordinator seam: metadata caches and
controllers of two brokers on the in-memory twin elect leaders and fail over when the
controller's session expires, with no ZooKeeper, no sockets and no sleeps."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafkalite.broker.controller import Controller
from kafkalite.broker.metadata import MetadataCache
from kafkalite.config import BrokerConfig
from kafkalite.coord import znodes
from kafkalite.coord.memory import InMemoryCoordinator, InMemoryZooKeeper
from kafkalite.tools.common import registered_brokers


async def no_delay(seconds: float) -> None:
    """The controller's ``sleep``: every delay is over at the next loop iteration."""
    await asyncio.sleep(0)


async def until(predicate: Callable[[], bool], rounds: int = 20_000) -> None:
    """Let the loop run until ``predicate()`` holds (bounded in loop iterations, not time)."""
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


@dataclass
class BrokerParts:
    client: InMemoryCoordinator
    metadata: MetadataCache
    controller: Controller


async def start_broker(ensemble: InMemoryZooKeeper, broker_id: int, clock: Callable[[], int]) -> BrokerParts:
    client = ensemble.client(session_timeout=6.0)
    await client.start()
    await client.ensure_paths(znodes.PERSISTENT_PATHS)
    if await client.exists(znodes.CLUSTER_ID_PATH) is None:
        await client.create(znodes.CLUSTER_ID_PATH, znodes.ClusterId("twin-cluster").to_bytes(), makepath=True)
    metadata = MetadataCache(client, broker_id)
    await metadata.start()
    registration = znodes.BrokerRegistration.for_http("127.0.0.1", 9090 + broker_id)
    await client.create(znodes.broker_path(broker_id), registration.to_bytes(), ephemeral=True)
    controller = Controller(BrokerConfig(broker_id=broker_id, auto_leader_rebalance_enable=False), client,
                            metadata, lambda topic: {}, clock, sleep=no_delay)
    controller.enabled = True
    await controller.try_elect()
    return BrokerParts(client, metadata, controller)


def test_controller_elects_leaders_and_fails_over_on_the_twin() -> None:
    async def scenario() -> None:
        ticks = itertools.count(1_700_000_000_000)
        ensemble = InMemoryZooKeeper(clock=lambda: next(ticks))
        first = await start_broker(ensemble, 1, lambda: next(ticks))
        second = await start_broker(ensemble, 2, lambda: next(ticks))
        assert first.controller.active and not second.controller.active
        assert sorted(await registered_brokers(second.client)) == ["127.0.0.1:9091", "127.0.0.1:9092"]

        assignment = znodes.TopicAssignment(partitions={0: [1, 2], 1: [2, 1]}, topic_id="topic-id")
        await first.client.create(znodes.topic_path("orders"), assignment.to_bytes())

        def leaders(parts: BrokerParts) -> dict[int, tuple[int, int, list[int]]]:
            info = parts.metadata.topics.get("orders")
            return {number: (entry.leader, entry.leader_epoch, entry.isr)
                    for number, entry in (info.partitions.items() if info else ())}

        await until(lambda: leaders(second) == {0: (1, 0, [1, 2]), 1: (2, 0, [2, 1])})

        # The controller's session expires: its registration and /controller go with it.
        first.client.expire_session()
        await until(lambda: second.controller.active)
        await until(lambda: leaders(second) == {0: (2, 1, [2]), 1: (2, 1, [2])})
        await until(lambda: not first.controller.active and first.metadata.controller_id == 2)
        assert second.controller.epoch == first.controller.epoch + 1 == 2
        assert sorted(second.metadata.brokers) == [2]
        data, _ = await second.client.get(znodes.partition_state_path("orders", 0))
        assert znodes.PartitionState.from_bytes(data).controller_epoch == 2

        for parts in (first, second):
            await parts.controller.stop()
            parts.metadata.stop()
            await parts.client.stop()
        await ensemble.settle()

    asyncio.run(asyncio.wait_for(scenario(), 10.0))


class ManualTimer:
    """A ``sleep`` whose delays end only when the test says so (time stands still otherwise)."""

    def __init__(self) -> None:
        self.pending: list[tuple[float, asyncio.Event]] = []

    async def sleep(self, seconds: float) -> None:
        done = asyncio.Event()
        self.pending.append((seconds, done))
        await done.wait()

    def expire_all(self) -> list[float]:
        delays = [seconds for seconds, _ in self.pending]
        for _, done in self.pending:
            done.set()
        self.pending.clear()
        return delays


def test_metadata_wait_for_ends_on_a_change_or_when_the_injected_timer_runs_out() -> None:
    async def scenario() -> None:
        ensemble = InMemoryZooKeeper()
        client = ensemble.client()
        await client.start()
        await client.ensure_paths(znodes.PERSISTENT_PATHS)
        await client.create(znodes.CLUSTER_ID_PATH, znodes.ClusterId("twin-cluster").to_bytes(), makepath=True)
        timer = ManualTimer()
        metadata = MetadataCache(client, 1, sleep=timer.sleep)
        await metadata.start()

        appears = asyncio.ensure_future(metadata.wait_for(lambda: "orders" in metadata.topics, 30.0))
        never = asyncio.ensure_future(metadata.wait_for(lambda: "missing" in metadata.topics, 5.0))
        await until(lambda: len(timer.pending) == 2)
        assignment = znodes.TopicAssignment(partitions={0: [1]}, topic_id="topic-id")
        await client.create(znodes.topic_path("orders"), assignment.to_bytes())
        assert await appears is True  # a change ended the wait; no time passed
        assert not never.done()
        assert sorted(timer.expire_all()) == [5.0, 30.0]
        assert await never is False
        assert await metadata.wait_for(lambda: True, 0.0) is True
        assert await metadata.wait_for(lambda: False, 0.0) is False
        metadata.stop()
        await client.stop()

    asyncio.run(asyncio.wait_for(scenario(), 10.0))


def test_a_new_partitions_leader_is_not_written_under_a_deleted_topic() -> None:
    """A controller that elects the first leader of a partition whose topic was deleted
    meanwhile must not bring the topic's znode back (empty, it would block the name for good)."""
    from kafkalite.broker.metadata import PartitionInfo

    async def scenario() -> None:
        ticks = itertools.count(1_700_000_000_000)
        ensemble = InMemoryZooKeeper(clock=lambda: next(ticks))
        parts = await start_broker(ensemble, 1, lambda: next(ticks))
        assert parts.controller.active
        assignment = znodes.TopicAssignment(partitions={0: [1]}, topic_id="topic-id")
        await parts.client.create(znodes.topic_path("kept"), assignment.to_bytes())
        # "gone" was deleted after the controller saw its partition, before the leader was written
        assert not await parts.controller._write_state(PartitionInfo("gone", 0, [1]), 1, 0, [1])
        assert await parts.client.exists(znodes.topic_path("gone")) is None
        # a topic that exists gets its partition's leader as before
        kept = parts.metadata
        def kept_leader() -> int:
            info = kept.topics.get("kept")
            entry = info.partitions.get(0) if info else None
            return entry.leader if entry is not None else -1

        await until(lambda: kept_leader() == 1)
        data, _ = await parts.client.get(znodes.partition_state_path("kept", 0))
        assert znodes.PartitionState.from_bytes(data).leader == 1
        await parts.controller.stop()
        parts.metadata.stop()
        await parts.client.stop()
        await ensemble.settle()

    asyncio.run(asyncio.wait_for(scenario(), 10.0))


def test_a_starting_broker_reads_the_topics_it_finds_together() -> None:
    """A broker starting among many topics reads them together, not one after another (each of
    which waited for its configs, its assignment and its partitions' states)."""
    async def scenario() -> None:
        ensemble = InMemoryZooKeeper()
        writer = ensemble.client()
        await writer.start()
        await writer.ensure_paths(znodes.PERSISTENT_PATHS)
        await writer.create(znodes.CLUSTER_ID_PATH, znodes.ClusterId("twin-cluster").to_bytes(), makepath=True)
        topics = [f"topic-{number}" for number in range(20)]
        for topic in topics:
            assignment = znodes.TopicAssignment(partitions={0: [1], 1: [1]}, topic_id=f"{topic}-id")
            await writer.create(znodes.topic_path(topic), assignment.to_bytes())
        reader = ensemble.client()
        await reader.start()
        in_flight = peak = 0
        topic_paths = {znodes.topic_path(topic) for topic in topics}
        watch_data = reader.watch_data

        async def counting_watch_data(path: str, callback: Any) -> Any:
            nonlocal in_flight, peak
            if path not in topic_paths:
                return await watch_data(path, callback)
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                await asyncio.sleep(0.01)  # a round trip
                return await watch_data(path, callback)
            finally:
                in_flight -= 1

        reader.watch_data = counting_watch_data  # type: ignore[method-assign]
        metadata = MetadataCache(reader, 1)
        await metadata.start()
        await until(lambda: set(metadata.topics) == set(topics)
                    and all(len(metadata.topics[topic].partitions) == 2 for topic in topics))
        assert peak == len(topics), f"at most {peak} of {len(topics)} topics were read at once"
        metadata.stop()
        await reader.stop()
        await writer.stop()

    asyncio.run(asyncio.wait_for(scenario(), 10.0))
