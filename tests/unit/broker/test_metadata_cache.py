"""The broker's metadata cache on the twin: what readers on the loop see while a topic loads."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

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
