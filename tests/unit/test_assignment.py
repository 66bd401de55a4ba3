"""Replica placement and leader election rules (pure functions)."""

from __future__ import annotations

import random

import pytest

from kafkalite import assignment
from kafkalite.errors import InvalidPartitionsError, InvalidReplicaAssignmentError, InvalidReplicationFactorError


def test_kafkas_worked_example() -> None:
    placed = assignment.assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, shift=0)
    assert placed[0] == [0, 1, 2] and placed[1] == [1, 2, 3] and placed[4] == [4, 0, 1]
    assert placed[5] == [0, 2, 3]  # the shift moved on after n partitions


def test_leaders_spread_evenly_and_replicas_distinct() -> None:
    placed = assignment.assign_replicas([1, 2, 3], 6, 3, rng=random.Random(3))
    leaders = [replicas[0] for replicas in placed.values()]
    assert sorted(leaders.count(broker) for broker in (1, 2, 3)) == [2, 2, 2]
    assert all(len(set(replicas)) == 3 for replicas in placed.values())


def test_rack_aware_placement_uses_every_rack() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    placed = assignment.assign_replicas(list(racks), 12, 3, racks=racks, rng=random.Random(7))
    for replicas in placed.values():
        assert len({racks[broker] for broker in replicas}) == 3
        assert len(set(replicas)) == 3
    with pytest.raises(InvalidReplicaAssignmentError):
        assignment.assign_replicas([1, 2], 1, 1, racks={1: "a", 2: None})


def test_invalid_requests() -> None:
    with pytest.raises(InvalidReplicationFactorError):
        assignment.assign_replicas([1, 2], 1, 3)
    with pytest.raises(InvalidPartitionsError):
        assignment.assign_replicas([1, 2], 0, 1)
    with pytest.raises(InvalidReplicaAssignmentError):
        assignment.validate_assignment({0: [1, 1]})
    with pytest.raises(InvalidReplicaAssignmentError):
        assignment.validate_assignment({0: [1], 2: [1]})
    with pytest.raises(InvalidReplicaAssignmentError):
        assignment.validate_assignment({0: [1, 2], 1: [1]})
    with pytest.raises(InvalidReplicaAssignmentError):
        assignment.validate_assignment({0: [9]}, live_brokers=[1, 2])


def test_partition_increase_continues_the_pattern() -> None:
    existing = assignment.assign_replicas([1, 2, 3], 3, 2, start_index=0, shift=0)
    added = assignment.assignment_for_increase(existing, [1, 2, 3], 6)
    assert sorted(added) == [3, 4, 5] and all(len(set(replicas)) == 2 for replicas in added.values())
    with pytest.raises(InvalidPartitionsError):
        assignment.assignment_for_increase(existing, [1, 2, 3], 3)


def test_election_rules() -> None:
    assert assignment.elect_new_partition([3, 1, 2], {1, 2}) == assignment.Election(1, [1, 2])
    offline = assignment.elect_offline_partition([3, 1, 2], isr=[3, 2], live={1, 2}, unclean_allowed=False)
    assert offline == assignment.Election(2, [2])  # first live ISR member in assignment order
    stuck = assignment.elect_offline_partition([3, 1, 2], isr=[3], live={1, 2}, unclean_allowed=False)
    assert stuck.leader == assignment.NO_LEADER and stuck.isr == [3]  # the last ISR member stays recorded
    unclean = assignment.elect_offline_partition([3, 1, 2], isr=[3], live={1, 2}, unclean_allowed=True)
    assert unclean == assignment.Election(1, [1])
    moved = assignment.elect_for_controlled_shutdown([1, 2, 3], [1, 2, 3], {1, 2, 3}, shutting_down={1})
    assert moved == assignment.Election(2, [2, 3])
    assert assignment.elect_preferred([1, 2], [2], {1, 2}) is None
    assert assignment.elect_preferred([1, 2], [2, 1], {1, 2}) == assignment.Election(1, [2, 1])
