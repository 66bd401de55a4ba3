"""The broker's metadata cache on the twin: what readers on the loop see while a topic loads."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from kafkalite.coord import znodes
from kafkalite.coord.coordinator import ZNodeStat
from tests.unit.broker.harness import BrokerCluster

Run = Callable[[Callable[[BrokerCluster], Awaitable[None]]], object]


def test_readers_never_see_part_of_a_new_topics_partitions(run: Run) -> None:
    """The group coordinator places a group by the offsets topic's partition count: a cache that
    showed the first partitions of a topic while it set up the watches of the others made a
    broker name the wrong coordinator (librdkafka's consumer then never fetched)."""
    async def scenario(cluster: BrokerCluster) -> None:
        node = await cluster.add_broker(1, candidate=False)
        counts: set[int] = set()
        loaded = asyncio.Event()

        async def sample() -> None:
            while not loaded.is_set():
                info = node.metadata.topics.get("offsets")
                if info is not None and info.partitions:
                    counts.add(len(info.partitions))
                await asyncio.sleep(0)

        sampler = asyncio.create_task(sample())
        await cluster.create_topic("offsets", {number: [1] for number in range(6)})
        def loaded_whole() -> bool:
            info = node.metadata.topics.get("offsets")
            return info is not None and len(info.partitions) == 6

        await cluster.wait_until(loaded_whole, "the cache loads the topic")
        await cluster.ensemble.settle()
        loaded.set()
        await sampler
        assert counts == {6}

    run(scenario)


def test_a_stale_read_of_a_partition_state_does_not_replace_a_newer_one(run: Run) -> None:
    """A re-read of a state znode (after a lost conditional write) and the znode's watch reach the
    loop from different ZooKeeper client threads: a read answered before the last write may be
    delivered after the watch brought that write. The cache keeps the newer version."""
    async def scenario(cluster: BrokerCluster) -> None:
        node = await cluster.add_broker(1, candidate=False)
        await cluster.create_topic("states", {0: [1, 2]})
        await cluster.write_state("states", 0, znodes.PartitionState(1, 0, [1, 2], controller_epoch=1))
        found = cluster.state("states", 0)
        assert found is not None
        old_state, old_stat = found
        await cluster.write_state("states", 0, znodes.PartitionState(1, 0, [1], controller_epoch=1))

        def newest() -> bool:
            entry = node.metadata.partition("states", 0)
            return entry is not None and entry.state_version == old_stat.version + 1

        await cluster.wait_until(newest, "the watch delivers the second write")
        path = znodes.partition_state_path("states", 0)
        read = node.metadata.zookeeper.get

        async def answered_before_the_write(where: str) -> tuple[bytes, ZNodeStat]:
            if where == path:
                return old_state.to_bytes(), old_stat
            return await read(where)
        node.metadata.zookeeper.get = answered_before_the_write  # type: ignore[method-assign]

        await node.metadata.reload_partition_state("states", 0)
        entry = node.metadata.partition("states", 0)
        assert entry is not None and entry.state is not None
        assert (entry.state.isr, entry.state_version) == ([1], old_stat.version + 1)

    run(scenario)
