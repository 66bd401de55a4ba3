"""Replica placement and leader election rules: pure functions, no I/O, below broker and tools.

Replica assignment follows Kafka's algorithm: leaders round-robin over the brokers sorted by
id from a random start; followers are placed at a shift that changes every ``n`` partitions so
the same replica sets do not repeat. With racks, the broker list is first interleaved rack by
rack and followers prefer racks (then brokers) not yet used by the partition. Partition
increases continue the same pattern from the existing count.

Leader election picks the first replica **in assignment order** that qualifies under the
chosen rule (new partition, offline partition, controlled shutdown, preferred replica), as in
Kafka's controller.

Thread-safety: pure functions; the only state is the ``random.Random`` a caller passes in.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kafkalite.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)

NO_LEADER = -1


def assign_replicas(broker_ids: Sequence[int], partitions: int, replication_factor: int, *,
                    racks: Mapping[int, str | None] | None = None, first_partition: int = 0,
                    start_index: int | None = None, shift: int | None = None,
                    rng: random.Random | None = None) -> dict[int, list[int]]:
    """Assign ``partitions`` partitions (numbered from ``first_partition``) to brokers."""
    if partitions <= 0:
        raise InvalidPartitionsError(f"number of partitions must be larger than 0, got {partitions}")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(f"replication factor must be larger than 0, got {replication_factor}")
    if replication_factor > len(broker_ids):
        raise InvalidReplicationFactorError(
            f"replication factor: {replication_factor} larger than available brokers: {len(broker_ids)}")
    generator = rng or random.Random()
    rack_map = dict(racks or {})
    if rack_map and any(rack_map.get(broker) for broker in broker_ids):
        if any(not rack_map.get(broker) for broker in broker_ids):
            raise InvalidReplicaAssignmentError("some brokers have broker.rack and some do not")
        return _assign_rack_aware(sorted(broker_ids), rack_map, partitions, replication_factor, first_partition,
                                  start_index, shift, generator)
    brokers = sorted(broker_ids)
    count = len(brokers)
    start = generator.randrange(count) if start_index is None else start_index
    next_shift = generator.randrange(count) if shift is None else shift
    result: dict[int, list[int]] = {}
    current = first_partition
    for index in range(partitions):
        if current > 0 and current % count == 0:
            next_shift += 1
        first = (current + start) % count
        replicas = [brokers[first]]
        for follower in range(replication_factor - 1):
            replicas.append(brokers[_follower_index(first, next_shift, follower, count)])
        result[first_partition + index] = replicas
        current += 1
    return result


def _follower_index(first: int, shift: int, follower: int, count: int) -> int:
    step = 1 + (shift + follower) % (count - 1)
    return (first + step) % count


def _rack_alternated(brokers: list[int], racks: Mapping[int, str | None]) -> list[int]:
    by_rack: dict[str, list[int]] = {}
    for broker in brokers:
        by_rack.setdefault(str(racks[broker]), []).append(broker)
    ordered_racks = sorted(by_rack)
    result: list[int] = []
    depth = 0
    while len(result) < len(brokers):
        for rack in ordered_racks:
            members = by_rack[rack]
            if depth < len(members):
                result.append(members[depth])
        depth += 1
    return result


def _assign_rack_aware(brokers: list[int], racks: Mapping[int, str | None], partitions: int, replication_factor: int,
                       first_partition: int, start_index: int | None, shift: int | None,
                       generator: random.Random) -> dict[int, list[int]]:
    arranged = _rack_alternated(brokers, racks)
    count = len(arranged)
    rack_count = len({racks[broker] for broker in arranged})
    start = generator.randrange(count) if start_index is None else start_index
    next_shift = generator.randrange(count) if shift is None else shift
    result: dict[int, list[int]] = {}
    current = first_partition
    for index in range(partitions):
        if current > 0 and current % count == 0:
            next_shift += 1
        first = (current + start) % count
        leader = arranged[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        used_brokers = {leader}
        offset = 0
        while len(replicas) < replication_factor:
            candidate = arranged[_follower_index(first, next_shift, offset, count)]
            offset += 1
            rack = racks[candidate]
            rack_ok = rack not in used_racks or len(used_racks) == rack_count
            if candidate in used_brokers:
                if offset > 4 * count:
                    break
                continue
            if not rack_ok and offset <= count:
                continue
            replicas.append(candidate)
            used_brokers.add(candidate)
            used_racks.add(rack)
            if len(used_racks) == rack_count:
                used_racks = set()
        if len(replicas) < replication_factor:  # fill deterministically when rules ran dry
            for broker in arranged:
                if broker not in used_brokers and len(replicas) < replication_factor:
                    replicas.append(broker)
                    used_brokers.add(broker)
        result[first_partition + index] = replicas
        current += 1
    return result


def assignment_for_increase(existing: Mapping[int, Sequence[int]], broker_ids: Sequence[int], new_total: int,
                            racks: Mapping[int, str | None] | None = None,
                            rng: random.Random | None = None) -> dict[int, list[int]]:
    """Assignments for partitions ``len(existing) .. new_total-1`` (Kafka's increase rule)."""
    current = len(existing)
    if new_total <= current:
        raise InvalidPartitionsError(
            f"topic currently has {current} partitions, {new_total} would not be an increase")
    replication_factor = len(existing[0]) if existing else 1
    brokers = sorted(broker_ids)
    first_replica = existing[0][0] if existing else brokers[0]
    start = next((index for index, broker in enumerate(brokers) if broker >= first_replica), 0)
    return assign_replicas(brokers, new_total - current, replication_factor, racks=racks, first_partition=current,
                           start_index=start, shift=start, rng=rng)


def validate_assignment(assignment: Mapping[int, Sequence[int]], live_brokers: Sequence[int] | None = None,
                        first_partition: int = 0) -> None:
    """Explicit assignments: partition ids contiguous from ``first_partition``, equal replication
    factor, no duplicate broker in a list, only known brokers."""
    if not assignment:
        raise InvalidReplicaAssignmentError("the replica assignment is empty")
    if sorted(assignment) != list(range(first_partition, first_partition + len(assignment))):
        raise InvalidReplicaAssignmentError(
            f"partitions must be numbered {first_partition}..{first_partition + len(assignment) - 1}")
    factors = {len(replicas) for replicas in assignment.values()}
    if len(factors) != 1 or 0 in factors:
        raise InvalidReplicaAssignmentError("every partition needs the same, non-zero number of replicas")
    for partition, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"partition {partition} lists a broker twice: {list(replicas)}")
        if live_brokers is not None:
            unknown = [broker for broker in replicas if broker not in live_brokers]
            if unknown:
                raise InvalidReplicaAssignmentError(f"partition {partition} names unknown brokers {unknown}")


@dataclass(frozen=True)
class Election:
    """The outcome of a leader election: new leader (NO_LEADER when none) and ISR."""

    leader: int
    isr: list[int]


def elect_new_partition(replicas: Sequence[int], live: set[int]) -> Election:
    alive = [broker for broker in replicas if broker in live]
    return Election(alive[0] if alive else NO_LEADER, alive if alive else list(replicas[:1]))


def elect_offline_partition(replicas: Sequence[int], isr: Sequence[int], live: set[int],
                            unclean_allowed: bool) -> Election:
    """Leader died (or never had one): first live ISR member in assignment order; unclean only
    when allowed and no ISR member is alive. With no candidate the last ISR stays recorded."""
    live_isr = [broker for broker in replicas if broker in isr and broker in live]
    if live_isr:
        return Election(live_isr[0], live_isr)
    if unclean_allowed:
        alive = [broker for broker in replicas if broker in live]
        if alive:
            return Election(alive[0], [alive[0]])
    remaining = [broker for broker in isr if broker in replicas] or list(replicas[:1])
    return Election(NO_LEADER, remaining[-1:])


def elect_for_controlled_shutdown(replicas: Sequence[int], isr: Sequence[int], live: set[int],
                                  shutting_down: set[int]) -> Election | None:
    candidates = [broker for broker in replicas if broker in isr and broker in live and broker not in shutting_down]
    if not candidates:
        return None
    return Election(candidates[0], [broker for broker in isr if broker not in shutting_down])


def elect_preferred(replicas: Sequence[int], isr: Sequence[int], live: set[int]) -> Election | None:
    preferred = replicas[0] if replicas else NO_LEADER
    if preferred in live and preferred in isr:
        return Election(preferred, list(isr))
    return None
