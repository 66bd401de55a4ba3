"""The Kafka front end's Metadata answer for every topic is encoded once and kept until the
metadata cache changes.

The handler runs over the real :class:`MetadataService`; under it a stand-in cache counts how
often the answer is built and moves its generation as :class:`MetadataCache` does on a change.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kafkalite import protocol
from kafkalite.broker.kafka import codec, data
from kafkalite.broker.kafka.context import EncodedAnswer, KafkaRequestContext
from kafkalite.broker.services import MetadataService
from kafkalite.config import BrokerConfig
from tests.support import kafka_wire as wire


class Cache:
    """The parts of MetadataCache the Metadata service reads; ``topics`` are name → partitions."""

    def __init__(self) -> None:
        self.generation = 0
        self.brokers: dict[int, Any] = {}
        self.topics: dict[str, Any] = {}
        self.topics_being_deleted: set[str] = set()
        self.partitions = {"clicks": 2}
        self.builds = 0

    def cluster_metadata(self, topics: list[str] | None) -> protocol.ClusterMetadata:
        self.builds += 1
        return protocol.ClusterMetadata("cluster", 1, [], [
            protocol.TopicMetadata(name, [protocol.PartitionMetadata(number, 1, 0, [1], [1]) for number in range(count)])
            for name, count in sorted(self.partitions.items())])

    def change(self, name: str, partitions: int) -> None:
        self.partitions[name] = partitions
        self.generation += 1


def _context(cache: Cache, *, authorizer: Any = None, version: int = 12) -> KafkaRequestContext:
    metadata = MetadataService(BrokerConfig(), cache, None, None, None)  # type: ignore[arg-type]
    services: Any = SimpleNamespace(metadata=metadata, authorizer=authorizer,
                                    quotas=SimpleNamespace(enabled=False))
    return KafkaRequestContext(services, 3, version, 7, "client", "127.0.0.1")


def _topics(answer: Any, version: int = 12) -> dict[str, int]:
    assert isinstance(answer, EncodedAnswer)
    frame = codec.frame_encoded_body(3, version, 7, answer.body)
    correlation_id, response = wire.read_response(frame, 3, version)
    assert correlation_id == 7
    return {topic.name: len(topic.partitions) for topic in response.topics}


def test_the_answer_for_every_topic_is_built_once_and_served_until_the_cache_changes() -> None:
    cache = Cache()
    context = _context(cache)
    request = wire.metadata_request(12, None)
    first = asyncio.run(data.metadata(context, request))
    second = asyncio.run(data.metadata(context, request))
    assert _topics(first) == _topics(second) == {"clicks": 2}
    assert cache.builds == 1
    cache.change("views", 3)
    third = asyncio.run(data.metadata(context, request))
    assert _topics(third) == {"clicks": 2, "views": 3}
    assert cache.builds == 2


def test_answers_are_kept_per_version_and_not_with_an_authorizer_or_for_named_topics() -> None:
    cache = Cache()
    assert _topics(asyncio.run(data.metadata(_context(cache, version=1), wire.metadata_request(1, None))), 1) \
        == {"clicks": 2}
    assert _topics(asyncio.run(data.metadata(_context(cache), wire.metadata_request(12, None)))) == {"clicks": 2}
    assert cache.builds == 2  # one per version
    authorized = asyncio.run(data.metadata(_context(cache, authorizer=object()), wire.metadata_request(12, None)))
    assert not isinstance(authorized, EncodedAnswer)  # filtered per principal by the access layer
    named = asyncio.run(data.metadata(_context(cache), wire.metadata_request(12, ["clicks"])))
    assert not isinstance(named, EncodedAnswer)
    assert cache.builds == 4
