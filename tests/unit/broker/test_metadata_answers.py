"""The Kafka front end's Metadata answer for every topic is encoded once and served again until the
metadata cache changes (broker/metadata.py's generation, broker/kafka/data.py), on the twin:
brokers joining and leaving, topics created, leaders moved, and a state adopted outside the
cache each make the next answer a new one.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from kafkalite.broker.kafka import codec, data
from kafkalite.broker.kafka.context import EncodedAnswer, KafkaRequestContext
from kafkalite.broker.metadata import MetadataCache, PartitionInfo
from kafkalite.broker.services import MetadataService
from kafkalite.config import BrokerConfig
from kafkalite.coord import znodes
from tests.support import kafka_wire as wire
from tests.unit.broker.harness import BrokerCluster

Run = Callable[[Callable[[BrokerCluster], Awaitable[None]]], object]


async def create_topic(cluster: BrokerCluster, topic: str, partitions: dict[int, list[int]]) -> None:
    """As the admin service writes it (the twin harness's ids are not UUIDs, Kafka's answer needs one)."""
    assignment = znodes.TopicAssignment(partitions=partitions, topic_id=uuid.uuid4().hex)
    await cluster.admin.create(znodes.topic_path(topic), assignment.to_bytes())


async def create_led_topic(cluster: BrokerCluster, cache: MetadataCache, topic: str, leader: int) -> None:
    """One partition on ``leader``, waited for until ``cache`` sees it led."""
    await create_topic(cluster, topic, {0: [leader]})

    def led() -> bool:
        info = cache.partition(topic, 0)
        return info is not None and info.leader == leader

    await cluster.wait_until(led, f"{topic}-0 is led")


def context_over(cache: MetadataCache, *, authorizer: Any = None, version: int = 12) -> KafkaRequestContext:
    service = MetadataService(BrokerConfig(), cache, None, None, None)  # type: ignore[arg-type]
    services: Any = SimpleNamespace(metadata=service, authorizer=authorizer, quotas=SimpleNamespace(enabled=False))
    return KafkaRequestContext(services, 3, version, 7, "client", "127.0.0.1")


async def ask(context: KafkaRequestContext, topics: list[str] | None = None) -> tuple[Any, Any]:
    """(the handler's answer, the response a client decodes from it)."""
    answer = await data.metadata(context, wire.metadata_request(context.api_version, topics))
    if isinstance(answer, EncodedAnswer):
        frame = codec.frame_response_body(3, context.api_version, 7, answer.body)
    else:
        frame = codec.encode_response(3, context.api_version, 7, codec.build_response(3, context.api_version, answer))
    correlation_id, response = wire.read_response(frame, 3, context.api_version)
    assert correlation_id == 7
    return answer, response


def new_leader_epoch(cache: MetadataCache, topic: str, partition: int) -> PartitionInfo:
    """Give the cached partition a new state (broker 1 leads alone at the next leader epoch), as
    a controller's election does; the partition's cache entry."""
    info = cache.partition(topic, partition)
    assert info is not None and info.state is not None
    assert info.adopt_state(znodes.PartitionState(1, info.state.leader_epoch + 1, [1], controller_epoch=1),
                            info.state_version + 1)
    return info


def seen(response: Any) -> tuple[list[int], dict[str, list[tuple[int, int, int]]]]:
    """Broker ids, and per topic (partition, leader, leader epoch)."""
    return (sorted(broker.node_id for broker in response.brokers),
            {topic.name: sorted((partition.partition_index, partition.leader_id, getattr(partition, "leader_epoch", 0))
                                for partition in topic.partitions) for topic in response.topics})


def test_the_answer_is_kept_until_brokers_topics_or_leaders_change(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        node = await cluster.add_broker(1)
        await create_led_topic(cluster, node.metadata, "clicks", 1)
        context = context_over(node.metadata)
        first, response = await ask(context)
        assert isinstance(first, EncodedAnswer)
        assert seen(response) == ([1], {"clicks": [(0, 1, 0)]})
        again, _ = await ask(context)
        assert again.body is first.body  # served as kept

        await cluster.add_broker(2, candidate=False)  # a broker joins: the broker list changes
        _, response = await ask(context)
        assert seen(response)[0] == [1, 2]

        await create_led_topic(cluster, node.metadata, "views", 2)
        _, response = await ask(context)
        assert seen(response)[1] == {"clicks": [(0, 1, 0)], "views": [(0, 2, 0)]}

        cluster.expire(2)  # a broker leaves: out of the broker list, its partition without a leader
        await cluster.wait_until(lambda: 2 not in node.metadata.brokers, "broker 2 is gone")
        _, response = await ask(context)
        assert seen(response)[0] == [1]
        assert [partition.leader_id for partition in
                next(topic for topic in response.topics if topic.name == "views").partitions] == [-1]

    run(scenario)


def test_a_state_adopted_outside_the_cache_makes_a_new_answer(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        node = await cluster.add_broker(1)
        await create_led_topic(cluster, node.metadata, "clicks", 1)
        context = context_over(node.metadata)
        first, _ = await ask(context)
        info = node.metadata.partition("clicks", 0)
        assert info is not None and info.state is not None
        # As a controller or leader does after its own write, before the watch delivers it.
        moved = znodes.PartitionState(1, info.state.leader_epoch + 1, [1], controller_epoch=1)
        assert info.adopt_state(moved, info.state_version + 1)
        second, response = await ask(context)
        assert second.body != first.body
        assert seen(response)[1] == {"clicks": [(0, 1, 1)]}

    run(scenario)


def test_answers_are_kept_per_version_and_not_with_an_authorizer_or_for_named_topics(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        node = await cluster.add_broker(1)
        await create_led_topic(cluster, node.metadata, "clicks", 1)
        old, old_response = await ask(context_over(node.metadata, version=1))
        new, new_response = await ask(context_over(node.metadata))
        assert isinstance(old, EncodedAnswer) and isinstance(new, EncodedAnswer) and old.body != new.body
        assert seen(old_response) == seen(new_response)
        authorized, _ = await ask(context_over(node.metadata, authorizer=object()))
        assert not isinstance(authorized, EncodedAnswer)  # filtered per principal by the access layer
        named, response = await ask(context_over(node.metadata), ["clicks"])
        assert not isinstance(named, EncodedAnswer)
        assert seen(response)[1] == {"clicks": [(0, 1, 0)]}

    run(scenario)


def test_the_kept_answer_of_every_version_is_byte_for_byte_the_full_encoding(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        node = await cluster.add_broker(1)
        await cluster.add_broker(2, candidate=False)
        await create_led_topic(cluster, node.metadata, "clicks", 1)
        await create_topic(cluster, "views", {0: [1, 2], 1: [2, 1], 2: [1]})
        await cluster.wait_until(lambda: all(
            (info := node.metadata.partition("views", number)) is not None and info.leader >= 0
            for number in range(3)), "views is led")
        for version in range(13):
            kept, response = await ask(context_over(node.metadata, version=version))
            # With an authorizer nothing is kept: the handler answers the whole answer as fields.
            full, _ = await ask(context_over(node.metadata, authorizer=object(), version=version))
            assert isinstance(kept, EncodedAnswer) and not isinstance(full, EncodedAnswer)
            assert kept.body == codec.encode_response_body(3, version, full), f"Metadata v{version}"
            assert sorted(topic.name for topic in response.topics) == ["clicks", "views"]

    run(scenario)


def test_only_a_changed_topic_is_encoded_again(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        node = await cluster.add_broker(1)
        await create_led_topic(cluster, node.metadata, "clicks", 1)
        await create_led_topic(cluster, node.metadata, "views", 1)
        context = context_over(node.metadata)
        await ask(context)
        kept = dict(context.services.metadata.kept_topics[12])
        new_leader_epoch(node.metadata, "clicks", 0)
        _, response = await ask(context)
        again = context.services.metadata.kept_topics[12]
        assert again["views"][1] is kept["views"][1]  # unchanged: served from its kept encoding
        assert again["clicks"][1] != kept["clicks"][1]
        assert seen(response)[1] == {"clicks": [(0, 1, 1)], "views": [(0, 1, 0)]}

        cluster.expire(1)  # the live brokers change: every topic's leaders may, so all are new
        await cluster.wait_until(lambda: 1 not in node.metadata.brokers, "broker 1 is gone")
        _, response = await ask(context)
        assert context.services.metadata.kept_topics[12]["views"][1] is not again["views"][1]
        assert seen(response)[1] == {"clicks": [(0, -1, 1)], "views": [(0, -1, 0)]}

    run(scenario)


def test_a_changed_topic_encodes_again_only_its_changed_partitions(run: Run) -> None:
    """A burst of leader changes touches every topic between two requests but few partitions
    of each: the others answer their previous objects and encodings."""
    async def scenario(cluster: BrokerCluster) -> None:
        node = await cluster.add_broker(1)
        await cluster.add_broker(2, candidate=False)
        await create_topic(cluster, "views", {0: [1, 2], 1: [2, 1], 2: [1]})
        await cluster.wait_until(lambda: all(
            (info := node.metadata.partition("views", number)) is not None and info.leader >= 0
            for number in range(3)), "views is led")
        context = context_over(node.metadata)
        before, _ = await ask(context)
        answered = {item.partition: item for item in node.metadata.topic_metadata("views").partitions}
        encoded = dict(context.services.metadata.kept_partitions[12])
        info = new_leader_epoch(node.metadata, "views", 1)
        after, response = await ask(context)
        again = {item.partition: item for item in node.metadata.topic_metadata("views").partitions}
        assert again[0] is answered[0] and again[2] is answered[2] and again[1] is not answered[1]
        kept = context.services.metadata.kept_partitions[12]
        assert kept[("views", 0)][1] is encoded[("views", 0)][1]
        assert kept[("views", 1)][1] != encoded[("views", 1)][1]
        assert seen(response)[1]["views"][1] == (1, 1, info.state.leader_epoch)
        full, _ = await ask(context_over(node.metadata, authorizer=object()))
        assert after.body == codec.encode_response_body(3, 12, full) != before.body

    run(scenario)
