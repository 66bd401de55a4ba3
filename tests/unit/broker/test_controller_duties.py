"""Controller duties on the twin: leader election on broker loss, unclean election, controlled
shutdown and partition reassignment (broker/controller.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from kafkalite.coord import znodes
from kafkalite.errors import StaleBrokerEpochError
from tests.unit.broker.harness import BrokerCluster

Run = Callable[[Callable[[BrokerCluster], Awaitable[None]]], object]


def leader_isr_epoch(cluster: BrokerCluster, topic: str, partition: int) -> tuple[int, list[int], int]:
    found = cluster.state(topic, partition)
    assert found is not None, f"{topic}-{partition} has no state"
    return found[0].leader, found[0].isr, found[0].leader_epoch


async def three_brokers_with(cluster: BrokerCluster, partitions: dict[int, list[int]]) -> None:
    for broker_id in (1, 2, 3):
        await cluster.add_broker(broker_id)
    await cluster.create_topic("events", partitions)
    await cluster.wait_until(lambda: all(cluster.state("events", p) is not None for p in partitions),
                             "every partition is elected")


def test_new_partitions_are_led_by_the_first_live_replica_with_every_live_replica_in_sync(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        await three_brokers_with(cluster, {0: [2, 3, 1], 1: [3, 1, 2]})
        assert leader_isr_epoch(cluster, "events", 0) == (2, [2, 3, 1], 0)
        assert leader_isr_epoch(cluster, "events", 1) == (3, [3, 1, 2], 0)
        state = cluster.state("events", 0)
        assert state is not None and state[0].controller_epoch == 1
        # Every broker's cache saw the decision through its own watch.
        def every_cache_knows_the_leader() -> bool:
            infos = [cluster.partition_info(broker_id, "events", 0) for broker_id in (1, 2, 3)]
            return all(info is not None and info.leader == 2 and info.isr == [2, 3, 1] for info in infos)

        await cluster.wait_until(every_cache_knows_the_leader, "every cache knows the leader")

    run(scenario)


def test_losing_a_leader_elects_the_next_isr_member_bumps_the_epoch_and_shrinks_the_isr(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        await three_brokers_with(cluster, {0: [2, 3, 1], 1: [3, 2, 1], 2: [1, 3]})
        cluster.expire(2)
        await cluster.wait_until(lambda: leader_isr_epoch(cluster, "events", 0)[0] == 3, "partition 0 moves to 3")
        await cluster.wait_until(lambda: 2 not in leader_isr_epoch(cluster, "events", 1)[1], "2 leaves ISR of 1")
        assert leader_isr_epoch(cluster, "events", 0) == (3, [3, 1], 1)
        assert leader_isr_epoch(cluster, "events", 1) == (3, [3, 1], 1)  # a dead follower leaves the ISR
        assert leader_isr_epoch(cluster, "events", 2) == (1, [1, 3], 0)  # untouched: 2 is not a replica

    run(scenario)


def test_leadership_never_goes_outside_the_isr_unless_unclean_election_is_enabled(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        await three_brokers_with(cluster, {0: [2, 3], 1: [2, 3]})
        # Broker 3 fell behind on both partitions: the ISR is the leader alone.
        for partition in (0, 1):
            info = cluster.partition_info(1, "events", partition)
            assert info is not None and info.state is not None
            shrunk = znodes.PartitionState(2, 0, [2], info.state.controller_epoch)
            await cluster.write_state("events", partition, shrunk)
        cluster.topic_configs["events"] = {}
        await cluster.wait_for_passes(1)
        cluster.expire(2)
        await cluster.wait_until(lambda: leader_isr_epoch(cluster, "events", 0)[0] == -1, "partition 0 offline")
        leader, isr, epoch = leader_isr_epoch(cluster, "events", 0)
        assert (leader, isr, epoch) == (-1, [2], 1)  # offline, the last ISR kept for a clean recovery
        await cluster.wait_for_passes(1)
        assert leader_isr_epoch(cluster, "events", 0) == (-1, [2], 1)  # and it stays so

        cluster.topic_configs["events"] = {"unclean.leader.election.enable": "true"}
        await cluster.wait_for_passes(1)
        assert leader_isr_epoch(cluster, "events", 0) == (3, [3], 2)

    run(scenario)


def test_a_returning_isr_member_leads_an_offline_partition_again(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        await three_brokers_with(cluster, {0: [2, 3]})
        await cluster.write_state("events", 0, znodes.PartitionState(2, 0, [2], 1))
        await cluster.wait_for_passes(1)
        cluster.expire(2)  # the session expires; the twin gives the client a new one at once
        await cluster.wait_until(lambda: leader_isr_epoch(cluster, "events", 0)[0] == -1, "offline")
        await cluster.register(2)  # the broker registers again on its new session
        await cluster.wait_until(lambda: leader_isr_epoch(cluster, "events", 0)[0] == 2, "2 leads again")
        assert leader_isr_epoch(cluster, "events", 0) == (2, [2], 2)

    run(scenario)


def test_controlled_shutdown_moves_leadership_off_the_broker_and_removes_it_from_every_isr(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        await three_brokers_with(cluster, {0: [2, 3, 1], 1: [3, 2, 1], 2: [1, 3], 3: [2]})
        controller = cluster.nodes[1].controller
        epoch_of_2 = cluster.nodes[1].metadata.brokers[2].epoch
        with pytest.raises(StaleBrokerEpochError):
            await controller.controlled_shutdown(2, epoch_of_2 + 1000)
        assert leader_isr_epoch(cluster, "events", 0) == (2, [2, 3, 1], 0)  # a stale request changes nothing

        remaining = await controller.controlled_shutdown(2, epoch_of_2)
        assert remaining == []  # partition 3's only replica cannot move anywhere: not counted, as in Kafka
        assert leader_isr_epoch(cluster, "events", 0) == (3, [3, 1], 1)
        # The ISR places it holds as a follower go in the pass the call wakes.
        await cluster.wait_until(lambda: leader_isr_epoch(cluster, "events", 1) == (3, [3, 1], 1),
                                 "broker 2 leaves partition 1's ISR")
        assert leader_isr_epoch(cluster, "events", 2) == (1, [1, 3], 0)
        assert leader_isr_epoch(cluster, "events", 3) == (2, [2], 0)

        # Broker 2 is still registered, but while it shuts down no election may pick it.
        cluster.expire(3)
        await cluster.wait_until(lambda: leader_isr_epoch(cluster, "events", 0)[0] == 1, "partition 0 moves to 1")
        assert leader_isr_epoch(cluster, "events", 0) == (1, [1], 2)
        assert leader_isr_epoch(cluster, "events", 1) == (1, [1], 2)

    run(scenario)


def test_controlled_shutdown_moves_hundreds_of_leaders_in_one_call_and_keeps_the_unmovable_led(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        replicas = [[2, 1, 3], [1, 2, 3], [3, 2, 1]]
        partitions = {number: replicas[number % 3] for number in range(300)}
        partitions[300] = [2]  # nowhere to go
        await three_brokers_with(cluster, partitions)
        controller = cluster.nodes[1].controller
        remaining = await controller.controlled_shutdown(2, cluster.nodes[1].metadata.brokers[2].epoch)
        assert remaining == []
        states = {number: leader_isr_epoch(cluster, "events", number) for number in range(300)}
        assert all(leader != 2 for leader, _, _ in states.values())
        await cluster.wait_until(lambda: all(2 not in leader_isr_epoch(cluster, "events", number)[1]
                                             for number in range(300)), "broker 2 leaves every ISR")
        states = {number: leader_isr_epoch(cluster, "events", number) for number in range(300)}
        assert sum(1 for number in range(0, 300, 3) if states[number][0] == 1) == 100  # the next in the ISR
        await cluster.wait_for_passes(1)  # later passes leave the unmovable partition with its leader
        assert leader_isr_epoch(cluster, "events", 300) == (2, [2], 0)

    run(scenario)


def test_controlled_shutdown_counts_only_partitions_another_live_replica_could_take(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        await three_brokers_with(cluster, {0: [2, 3], 1: [2, 1]})
        await cluster.write_state("events", 1, znodes.PartitionState(2, 0, [2], 1))  # broker 1 out of the ISR
        cluster.expire(3)  # partition 0's other replica is down
        await cluster.wait_until(lambda: 3 not in cluster.nodes[1].metadata.brokers, "broker 3 is gone")
        controller = cluster.nodes[1].controller
        remaining = await controller.controlled_shutdown(2, cluster.nodes[1].metadata.brokers[2].epoch)
        # partition 0 has nowhere to go, so no retry can help; partition 1's other replica is up
        # and may rejoin the ISR before the next attempt
        assert remaining == [("events", 1)]

    run(scenario)


def test_reassignment_adds_replicas_waits_for_the_isr_moves_leadership_then_removes_old_replicas(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        for broker_id in (1, 2, 3, 4):
            await cluster.add_broker(broker_id)
        await cluster.create_topic("moves", {0: [1, 2, 3], 1: [2, 3, 4]})
        await cluster.wait_until(lambda: cluster.state("moves", 0) is not None and cluster.state("moves", 1)
                                 is not None, "elected")
        request = znodes.ReassignmentRequest([znodes.PartitionReassignment("moves", 0, [2, 3, 4])])
        await cluster.admin.create(znodes.REASSIGN_PARTITIONS_PATH, request.to_bytes())

        # Step 1: replicas = target + old, with the adding and removing sets recorded.
        await cluster.wait_until(lambda: cluster.assignment("moves").partitions[0] == [2, 3, 4, 1],
                                 "the new replica is added")
        assignment = cluster.assignment("moves")
        assert assignment.adding_replicas == {0: [4]} and assignment.removing_replicas == {0: [1]}
        assert assignment.partitions[1] == [2, 3, 4]  # another partition is left alone

        # Step 2: nothing more while broker 4 is not in sync.
        await cluster.wait_for_passes(1, 3)
        assert leader_isr_epoch(cluster, "moves", 0) == (1, [1, 2, 3], 0)
        assert cluster.ensemble.read(znodes.REASSIGN_PARTITIONS_PATH) is not None

        # The leader (broker 1) expands its ISR once 4 caught up: a conditional write, as the
        # replica manager does.
        found = cluster.state("moves", 0)
        assert found is not None
        await cluster.admin.set(znodes.partition_state_path("moves", 0),
                                znodes.PartitionState(1, 0, [1, 2, 3, 4], found[0].controller_epoch).to_bytes(),
                                found[1].version)

        # Steps 3 and 4: a target replica leads, the ISR drops broker 1, the replicas become the
        # target and the request znode goes.
        await cluster.wait_until(lambda: cluster.ensemble.read(znodes.REASSIGN_PARTITIONS_PATH) is None,
                                 "the reassignment completes")
        assert leader_isr_epoch(cluster, "moves", 0) == (2, [2, 3, 4], 1)
        assignment = cluster.assignment("moves")
        assert assignment.partitions == {0: [2, 3, 4], 1: [2, 3, 4]}
        assert assignment.adding_replicas == {} and assignment.removing_replicas == {}

    run(scenario)


def test_a_preferred_election_reads_the_state_again_when_the_cached_isr_lacks_the_preferred_replica(
        run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        await three_brokers_with(cluster, {0: [2, 3, 1]})
        controller_id = cluster.controller_id()
        # Leadership moved to 3 while 2 was away; 2 has rejoined the ISR in ZooKeeper since.
        info = cluster.partition_info(controller_id, "events", 0)
        assert info is not None and info.state is not None
        await cluster.write_state("events", 0, znodes.PartitionState(3, 1, [3, 1, 2], info.state.controller_epoch))
        def cached_isr() -> list[int]:
            cached = cluster.partition_info(controller_id, "events", 0)
            return cached.isr if cached is not None else []

        await cluster.wait_until(lambda: cached_isr() == [3, 1, 2], "the controller's cache has the rejoined ISR")
        # ... but the controller's cache has not seen the rejoin yet (its watch is behind).
        cached = cluster.partition_info(controller_id, "events", 0)
        assert cached is not None and cached.state is not None
        cached.state = znodes.PartitionState(3, 1, [3, 1], cached.state.controller_epoch)
        outcome = await cluster.nodes[controller_id].controller.elect_preferred([("events", 0)])
        assert outcome == {("events", 0): "NONE"}
        assert leader_isr_epoch(cluster, "events", 0) == (2, [3, 1, 2], 2)

    run(scenario)


def test_a_new_partition_whose_znode_exists_already_is_still_elected(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        await three_brokers_with(cluster, {0: [1, 2, 3], 1: [2, 3, 1]})
        # As after an earlier attempt that created partition 2's znode and then failed.
        await cluster.admin.create(znodes.partition_path("events", 2), b"")
        current = cluster.assignment("events")
        grown = znodes.TopicAssignment(partitions={**current.partitions, 2: [3, 1, 2]}, topic_id=current.topic_id)
        await cluster.admin.set(znodes.topic_path("events"), grown.to_bytes())
        await cluster.wait_until(lambda: cluster.state("events", 2) is not None, "partition 2 is elected")
        assert leader_isr_epoch(cluster, "events", 2) == (3, [3, 1, 2], 0)

    run(scenario)


def test_a_pass_looks_at_the_partitions_that_changed_and_at_all_after_a_broker_change(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        partitions = {number: [1 + number % 3, 1 + (number + 1) % 3] for number in range(300)}
        await three_brokers_with(cluster, partitions)
        controller = cluster.nodes[1].controller
        await cluster.wait_until(lambda: not controller._changed and not controller._wake.is_set(), "settled")

        # One ISR change: the passes it causes look at that partition, not at all 300.
        examined = controller.partitions_examined
        passes = controller.passes
        info = cluster.partition_info(1, "events", 0)
        assert info is not None and info.state is not None
        await cluster.write_state("events", 0, znodes.PartitionState(1, 0, [1], info.state.controller_epoch))
        await cluster.wait_until(lambda: controller.passes > passes and not controller._changed, "a pass ran")
        assert 1 <= controller.partitions_examined - examined <= 2 * (controller.passes - passes)

        # A topic config change: that topic's partitions are looked at again.
        examined = controller.partitions_examined
        cluster.topic_configs["events"] = {"unclean.leader.election.enable": "true"}
        controller.on_topic_config_changed("events", cluster.topic_configs["events"])
        await cluster.wait_until(lambda: controller.partitions_examined >= examined + 300, "events looked at")

        # A broker leaves: every partition is looked at, and those it led move.
        examined = controller.partitions_examined
        cluster.expire(2)
        await cluster.wait_until(lambda: all(leader_isr_epoch(cluster, "events", number)[0] not in (2, -1)
                                             for number in partitions), "2's partitions led elsewhere")
        assert controller.partitions_examined - examined >= 300

    run(scenario)
