"""MetadataService.cluster_metadata: auto-creation and a topic another broker just created."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from kafkalite.broker.admin import NewTopic
from kafkalite.broker.metadata import MetadataCache, PartitionInfo, TopicInfo
from kafkalite.broker.services import MetadataService
from kafkalite.config import BrokerConfig
from kafkalite.coord import znodes
from kafkalite.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError


class LaggingCache:
    """A broker whose ZooKeeper watch delivers a topic another broker created ``delay`` s after
    that broker's create: its own create attempt finds the znode there already."""

    def __init__(self, cache: MetadataCache, delay: float) -> None:
        self.cache, self.delay, self.attempts = cache, delay, 0

    async def create_topic(self, topic: NewTopic, wait_ms: int = 0) -> dict[int, list[int]]:
        self.attempts += 1
        if self.delay >= 0:
            asyncio.get_running_loop().call_later(self.delay, self.arrive, topic.name)
        raise TopicAlreadyExistsError(f"topic '{topic.name}' already exists")

    def arrive(self, name: str) -> None:
        state = znodes.PartitionState(leader=2, leader_epoch=0, isr=[2], controller_epoch=1)
        self.cache.topics[name] = TopicInfo(name, "id", {0: PartitionInfo(name, 0, [2], state)})
        self.cache._signal()


def answer(delay: float) -> tuple[Any, int]:
    async def scenario() -> tuple[Any, int]:
        cache = MetadataCache(cast(Any, None), 1)
        admin = LaggingCache(cache, delay)
        service = MetadataService(BrokerConfig(), cache, cast(Any, admin), cast(Any, None), cast(Any, None))
        service.new_topic_wait_seconds = 0.5
        metadata = await service.cluster_metadata(["orders"], allow_auto_create=True)
        return metadata.topics[0], admin.attempts

    return asyncio.run(scenario())


def test_a_topic_another_broker_just_created_is_answered_once_this_broker_loaded_it() -> None:
    topic, attempts = answer(delay=0.05)
    assert attempts == 1
    assert topic.error_code == 0 and [(item.partition, item.replicas) for item in topic.partitions] == [(0, [2])]


def test_a_topic_that_never_arrives_is_answered_unknown_after_the_wait() -> None:
    topic, attempts = answer(delay=-1)
    assert attempts == 1 and topic.error_code == UnknownTopicOrPartitionError.errno
