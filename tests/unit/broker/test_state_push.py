"""Partition states sent from the broker that wrote them (kafkalite.broker.state_push) and taken
by the others' metadata caches ahead of their watches."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kafkalite.broker.metadata import LiveBroker, MetadataCache, PartitionInfo, PublishedState
from kafkalite.broker.state_push import decode_states, encode_states
from kafkalite.coord import znodes
from kafkalite.coord.coordinator import ZNodeStat
from kafkalite.errors import InvalidRequestError
from tests.unit.broker.harness import BrokerCluster

Run = Callable[[Callable[[BrokerCluster], Awaitable[None]]], object]


class Told:
    """A metadata listener that records the partition changes it is told of."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, int, int]] = []

    def on_partition_changed(self, info: PartitionInfo) -> None:
        self.changes.append((info.topic, info.partition, info.state_version))

    def on_topic_removed(self, topic: str, partitions: list[int]) -> None: ...

    def on_brokers_changed(self, live: dict[int, LiveBroker]) -> None: ...

    def on_controller_changed(self, controller_id: int) -> None: ...

    def on_topic_config_changed(self, topic: str, configs: dict[str, str]) -> None: ...


async def listening(cluster: BrokerCluster,
                    metadata: MetadataCache) -> tuple[Told, tuple[znodes.PartitionState, ZNodeStat]]:
    """Once ``metadata`` knows events-0's state: a listener added to it, and the state and stat
    ZooKeeper holds."""
    await cluster.wait_until(lambda: (info := metadata.partition("events", 0)) is not None
                             and info.state is not None, "the cache knows the state")
    told = Told()
    metadata.add_listener(told)
    found = cluster.state("events", 0)
    assert found is not None
    return told, found


def test_the_controller_publishes_every_state_it_writes_with_the_version_zookeeper_gave_it(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        published: list[PublishedState] = []
        node = await cluster.add_broker(1)
        node.controller.publish_states = published.extend
        await cluster.add_broker(2, candidate=False)
        await cluster.create_topic("events", {number: [1, 2] for number in range(150)})
        await cluster.wait_until(lambda: all(cluster.state("events", number) is not None for number in range(150)),
                                 "every partition is elected")
        newest = {(topic, number): (state, version) for topic, number, state, version in published}
        assert sorted(newest) == [("events", number) for number in range(150)]
        for (topic, number), (state, version) in newest.items():
            found = cluster.state(topic, number)
            assert found is not None and (found[0], found[1].version) == (state, version)

    run(scenario)


def test_a_sent_state_is_taken_before_the_watch_brings_it_and_told_once(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        await cluster.add_broker(1)
        other = await cluster.add_broker(2, candidate=False)
        await cluster.create_topic("events", {0: [1, 2]})
        told, (state, stat) = await listening(cluster, other.metadata)
        shrunk = znodes.PartitionState(state.leader, state.leader_epoch, [state.leader], state.controller_epoch)
        before = other.metadata.generation

        assert other.metadata.adopt_states([("events", 0, shrunk, stat.version + 1)]) == 1
        info = other.metadata.partition("events", 0)
        assert info is not None and info.state == shrunk and info.state_version == stat.version + 1
        assert told.changes == [("events", 0, stat.version + 1)] and other.metadata.generation != before

        written = await cluster.write_state("events", 0, shrunk)  # the write it was sent ahead of
        assert written.version == stat.version + 1
        await cluster.ensemble.settle()
        assert told.changes == [("events", 0, stat.version + 1)]  # the watch's delivery is not told again

        # an older state, a partition the cache does not know: left to the watches
        assert other.metadata.adopt_states([("events", 0, state, stat.version),
                                          ("events", 7, state, 3), ("unknown", 0, state, 3)]) == 0
        assert other.metadata.partition("events", 0) is info and info.state == shrunk

        grown = znodes.PartitionState(state.leader, state.leader_epoch, [state.leader, 2], state.controller_epoch)
        await cluster.write_state("events", 0, grown)  # a later write nobody sent: the watch tells it
        await cluster.wait_until(lambda: told.changes[-1] == ("events", 0, stat.version + 2), "the watch tells")
        assert info.state == grown

    run(scenario)


def test_the_writer_tells_its_own_listeners_once_without_waiting_for_its_watch(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        node = await cluster.add_broker(1)
        await cluster.create_topic("events", {0: [1]})
        told, (state, stat) = await listening(cluster, node.metadata)
        bumped = znodes.PartitionState(1, state.leader_epoch + 1, [1], state.controller_epoch)
        info = node.metadata.partition("events", 0)
        assert info is not None and info.adopt_state(bumped, stat.version + 1)  # as the controller's write does
        assert told.changes == []
        assert node.metadata.adopt_states([("events", 0, bumped, stat.version + 1)]) == 1
        assert node.metadata.adopt_states([("events", 0, bumped, stat.version + 1)]) == 0
        assert told.changes == [("events", 0, stat.version + 1)]
        await cluster.write_state("events", 0, bumped)
        await cluster.ensemble.settle()
        assert told.changes == [("events", 0, stat.version + 1)]

    run(scenario)


def test_states_survive_the_wire() -> None:
    states: list[PublishedState] = [("events", 3, znodes.PartitionState(2, 5, [2, 1], 4), 17),
                                    ("orders", 0, znodes.PartitionState(-1, 0, [], 1), 0)]
    assert decode_states(encode_states(states)) == states


@pytest.mark.parametrize("body", [
    None, [], "states", {}, {"states": {}}, {"states": [1]},
    {"states": [{"partition": 0, "version": 1, "leader": 1, "leader_epoch": 0, "isr": [1], "controller_epoch": 1}]},
    {"states": [{"topic": "", "partition": 0, "version": 1, "leader": 1, "leader_epoch": 0, "isr": [1],
                 "controller_epoch": 1}]},
    {"states": [{"topic": "t", "partition": -1, "version": 1, "leader": 1, "leader_epoch": 0, "isr": [1],
                 "controller_epoch": 1}]},
    {"states": [{"topic": "t", "partition": True, "version": 1, "leader": 1, "leader_epoch": 0, "isr": [1],
                 "controller_epoch": 1}]},
    {"states": [{"topic": "t", "partition": 0, "version": -1, "leader": 1, "leader_epoch": 0, "isr": [1],
                 "controller_epoch": 1}]},
    {"states": [{"topic": "t", "partition": 0, "version": 1, "leader": -2, "leader_epoch": 0, "isr": [1],
                 "controller_epoch": 1}]},
    {"states": [{"topic": "t", "partition": 0, "version": 1, "leader": 1, "leader_epoch": 0, "isr": [1, 1],
                 "controller_epoch": 1}]},
    {"states": [{"topic": "t", "partition": 0, "version": 1, "leader": 1, "leader_epoch": 0, "isr": ["1"],
                 "controller_epoch": 1}]},
    {"states": [{"topic": "t", "partition": 0, "version": 1, "leader": 1, "leader_epoch": 0, "isr": [1]}]},
    {"states": [{"topic": "t", "partition": 2 ** 31, "version": 1, "leader": 1, "leader_epoch": 0, "isr": [1],
                 "controller_epoch": 1}]},
    {"states": [{"topic": "t", "partition": 0, "version": 1, "leader": 1, "leader_epoch": 0, "isr": [2 ** 40],
                 "controller_epoch": 1}]},
])
def test_a_malformed_body_is_an_invalid_request(body: Any) -> None:
    with pytest.raises(InvalidRequestError):
        decode_states(body)
