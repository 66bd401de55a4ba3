"""Classic consumer-group partition assignors, run by the group's leader consumer.

This module owns the data a consumer sends when it joins a group (:class:`Subscription`),
what the leader hands back to each member (:class:`Assignment`), their JSON form (they travel
inside JSON bodies over HTTP; bytes are base64), and the four classic Kafka strategies:

``range`` (:class:`RangeAssignor`, EAGER)
    Topic by topic: the topic's partitions in numeric order are cut into contiguous ranges
    over the members subscribed to it, sorted by group.instance.id when set, else by member
    id (static members first, as Kafka does). Each gets ``P // M``; the first ``P % M`` get
    one extra. Co-partitioned topics land together; with many topics the first members are
    overloaded.

``roundrobin`` (:class:`RoundRobinAssignor`, EAGER)
    All subscribed partitions, sorted by topic then partition, dealt one at a time to the
    members in the same sorted order, in a circle, skipping a member that does not subscribe
    to the partition's topic. Counts are within 1 when subscriptions are identical.

``sticky`` (:class:`StickyAssignor`, EAGER)
    Two goals, in order: (1) balance — partition counts differ by at most 1 whenever the
    subscriptions allow it, and otherwise by as little as they allow; (2) stickiness — keep
    as many previous assignments as possible: with identical subscriptions exactly the most a
    balanced plan can keep; otherwise a partition leaves its previous owner only when
    placing the unowned partitions alone cannot reach the balance, and then along the
    shortest chains of hand-overs. Previous ownership comes from each subscription's
    ``owned_partitions`` and ``generation``; an EAGER consumer revokes everything before it
    joins, so it must report its *last assignment* there (what Kafka carries in the sticky
    assignor's user data). When two members claim one partition, the claim from the higher
    generation wins; claims tied at the highest generation cancel (nobody keeps it).

``cooperative-sticky`` (:class:`CooperativeStickyAssignor`, COOPERATIVE, KIP-429)
    The sticky computation, except that a partition that another current member still
    claims in its ``owned_partitions`` is left out of this round: the claimant sees it
    missing from its assignment and revokes it, and because it revoked something it asks for
    a follow-up rebalance, in which the partition is unowned and gets assigned without
    moving anything that was kept. Members keep processing every partition that does not
    move.

Every assignor returns an :class:`Assignment` for every member (possibly empty), lists
partitions sorted, and breaks every tie by a sorted order, so the same input always gives
the same output. Topics absent from ``partitions_per_topic`` (or with no partitions) are
ignored, as are owned partitions that no longer exist or are no longer subscribed.

Concurrency: pure functions over immutable values; assignor instances hold no state and are
safe to share between threads.
"""

from __future__ import annotations

import base64
import binascii
import bisect
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kafkalite.errors import ConfigError, InvalidRequestError

__all__ = [
    "ASSIGNORS",
    "COOPERATIVE",
    "EAGER",
    "Assignment",
    "Assignor",
    "CooperativeStickyAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "TopicPartition",
    "assignor_for",
]

EAGER = "EAGER"
COOPERATIVE = "COOPERATIVE"

TopicPartition = tuple[str, int]


# --- data carried by JoinGroup / SyncGroup -----------------------------------------------------


def _malformed(what: str, value: Any) -> InvalidRequestError:
    return InvalidRequestError(f"malformed {what}: {value!r}")


def _decode_partitions(value: Any, what: str) -> list[TopicPartition]:
    if not isinstance(value, list):
        raise _malformed(what, value)
    partitions: list[TopicPartition] = []
    for entry in value:
        if (
            not isinstance(entry, (list, tuple))
            or len(entry) != 2
            or not isinstance(entry[0], str)
            or isinstance(entry[1], bool)
            or not isinstance(entry[1], int)
            or entry[1] < 0
        ):
            raise _malformed(what, entry)
        partitions.append((entry[0], entry[1]))
    return partitions


def _decode_user_data(value: Any) -> bytes:
    if value is None or value == "":
        return b""
    if not isinstance(value, str):
        raise _malformed("user_data", value)
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise _malformed("user_data", value) from None


def _encode_user_data(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _normalize_partitions(partitions: Any) -> list[TopicPartition]:
    return [(str(topic), int(partition)) for topic, partition in partitions]


@dataclass(frozen=True)
class Subscription:
    """What a member tells the group when it joins.

    ``owned_partitions`` are the partitions the member held in generation ``generation``
    (-1: none known); ``group_instance_id`` is set for static members.
    """

    topics: list[str]
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation: int = -1
    group_instance_id: str | None = None
    user_data: bytes = b""

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", [str(topic) for topic in self.topics])
        object.__setattr__(self, "owned_partitions", _normalize_partitions(self.owned_partitions))
        object.__setattr__(self, "user_data", bytes(self.user_data))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: partitions as ``[topic, partition]`` pairs, user data base64."""
        return {
            "topics": list(self.topics),
            "owned_partitions": [[topic, partition] for topic, partition in self.owned_partitions],
            "generation": self.generation,
            "group_instance_id": self.group_instance_id,
            "user_data": _encode_user_data(self.user_data),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Subscription:
        """Inverse of :meth:`to_json`; raises InvalidRequestError on malformed input."""
        if not isinstance(data, Mapping):
            raise _malformed("subscription", data)
        topics = data.get("topics")
        if not isinstance(topics, list) or not all(isinstance(topic, str) for topic in topics):
            raise _malformed("subscription topics", topics)
        generation = data.get("generation", -1)
        if isinstance(generation, bool) or not isinstance(generation, int):
            raise _malformed("subscription generation", generation)
        instance_id = data.get("group_instance_id")
        if instance_id is not None and not isinstance(instance_id, str):
            raise _malformed("group_instance_id", instance_id)
        return cls(
            topics=list(topics),
            owned_partitions=_decode_partitions(data.get("owned_partitions", []), "owned_partitions"),
            generation=generation,
            group_instance_id=instance_id,
            user_data=_decode_user_data(data.get("user_data")),
        )


@dataclass(frozen=True)
class Assignment:
    """The partitions the leader gives one member, sorted by topic then partition."""

    partitions: list[TopicPartition]
    user_data: bytes = b""

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", _normalize_partitions(self.partitions))
        object.__setattr__(self, "user_data", bytes(self.user_data))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: partitions as ``[topic, partition]`` pairs, user data base64."""
        return {
            "partitions": [[topic, partition] for topic, partition in self.partitions],
            "user_data": _encode_user_data(self.user_data),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Assignment:
        """Inverse of :meth:`to_json`; raises InvalidRequestError on malformed input."""
        if not isinstance(data, Mapping):
            raise _malformed("assignment", data)
        return cls(
            partitions=_decode_partitions(data.get("partitions", []), "assignment partitions"),
            user_data=_decode_user_data(data.get("user_data")),
        )


# --- shared helpers ----------------------------------------------------------------------------


def _member_sort_key(member_id: str, subscription: Subscription) -> tuple[int, str, str]:
    """Static members first, ordered by group.instance.id; then dynamic ones by member id."""
    if subscription.group_instance_id is not None:
        return (0, subscription.group_instance_id, member_id)
    return (1, member_id, "")


def _sorted_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    return sorted(subscriptions, key=lambda member: _member_sort_key(member, subscriptions[member]))


def _existing_topics(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[str, frozenset[str]]:
    """Each member's subscribed topics that exist (have at least one partition)."""
    return {
        member: frozenset(
            topic for topic in subscription.topics if partitions_per_topic.get(topic, 0) > 0
        )
        for member, subscription in subscriptions.items()
    }


def _to_assignments(
    members: Mapping[str, Any], assigned: Mapping[str, Any]
) -> dict[str, Assignment]:
    return {
        member: Assignment(sorted(assigned.get(member, ())))
        for member in sorted(members)
    }


class Assignor(ABC):
    """A partition assignment strategy; ``name`` is what consumers list in JoinGroup."""

    name: ClassVar[str]
    protocol: ClassVar[str] = EAGER

    @abstractmethod
    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """Map every member id of ``subscriptions`` to its assignment.

        ``partitions_per_topic`` gives the partition count of each topic the leader knows.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# --- range -------------------------------------------------------------------------------------


class RangeAssignor(Assignor):
    """Per topic, contiguous ranges over the sorted subscribers; the first ``P % M`` get one more."""

    name = "range"
    protocol = EAGER

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        topics_of = _existing_topics(partitions_per_topic, subscriptions)
        assigned: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        ordered_members = _sorted_members(subscriptions)
        for topic in sorted(set().union(*topics_of.values())):
            subscribers = [member for member in ordered_members if topic in topics_of[member]]
            count = partitions_per_topic[topic]
            quota, extra = divmod(count, len(subscribers))
            start = 0
            for position, member in enumerate(subscribers):
                length = quota + (1 if position < extra else 0)
                assigned[member].extend((topic, partition) for partition in range(start, start + length))
                start += length
        return _to_assignments(subscriptions, assigned)


# --- round robin -------------------------------------------------------------------------------


class RoundRobinAssignor(Assignor):
    """Sorted partitions dealt over sorted members in a circle, skipping non-subscribers."""

    name = "roundrobin"
    protocol = EAGER

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        topics_of = _existing_topics(partitions_per_topic, subscriptions)
        assigned: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        circle = _sorted_members(subscriptions)
        position = 0
        for topic in sorted(set().union(*topics_of.values())):
            for partition in range(partitions_per_topic[topic]):
                # Some member subscribes to the topic, so this finds one within a lap.
                while topic not in topics_of[circle[position]]:
                    position = (position + 1) % len(circle)
                assigned[circle[position]].append((topic, partition))
                position = (position + 1) % len(circle)
        return _to_assignments(subscriptions, assigned)


# --- sticky ------------------------------------------------------------------------------------


def _previous_owners(
    subscriptions: Mapping[str, Subscription],
    topics_of: Mapping[str, frozenset[str]],
    partitions_per_topic: Mapping[str, int],
) -> dict[TopicPartition, str]:
    """The valid previous owner of each partition.

    A claim counts only for an existing partition of a topic the member still subscribes to.
    The claim with the highest generation wins; claims tied at the highest generation cancel.
    """
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for member in sorted(subscriptions):
        subscription = subscriptions[member]
        for topic, partition in set(subscription.owned_partitions):
            if topic in topics_of[member] and 0 <= partition < partitions_per_topic[topic]:
                claims.setdefault((topic, partition), []).append((subscription.generation, member))
    owners: dict[TopicPartition, str] = {}
    for topic_partition, claimants in claims.items():
        best_generation = max(generation for generation, _ in claimants)
        winners = [member for generation, member in claimants if generation == best_generation]
        if len(winners) == 1:
            owners[topic_partition] = winners[0]
    return owners


def _all_partitions(
    topics: frozenset[str] | set[str], partitions_per_topic: Mapping[str, int]
) -> list[TopicPartition]:
    return [
        (topic, partition)
        for topic in sorted(topics)
        for partition in range(partitions_per_topic[topic])
    ]


def _sticky_identical(
    members: list[str],
    partitions: list[TopicPartition],
    owners: Mapping[TopicPartition, str],
) -> dict[str, list[TopicPartition]]:
    """Sticky assignment when every member subscribes to the same topics.

    Quotas: everyone gets ``P // M`` and exactly ``P % M`` members get one more. Each member
    keeps its previous partitions up to its quota (a member that owned more than the minimum
    takes one of the larger quotas while they last); the rest are dealt round robin, in sorted
    order, to the members still below their quota.
    """
    minimum, remainder = divmod(len(partitions), len(members))
    owned: dict[str, list[TopicPartition]] = {member: [] for member in members}
    for topic_partition in partitions:  # sorted, so every owned list is sorted
        owner = owners.get(topic_partition)
        if owner is not None:
            owned[owner].append(topic_partition)

    larger_quotas_left = remainder
    assigned: dict[str, list[TopicPartition]] = {}
    for member in members:
        if len(owned[member]) > minimum and larger_quotas_left > 0:
            larger_quotas_left -= 1
            assigned[member] = owned[member][: minimum + 1]
        else:
            assigned[member] = owned[member][:minimum]

    target: dict[str, int] = {member: max(len(assigned[member]), minimum) for member in members}
    for member in members:
        if larger_quotas_left == 0:
            break
        if target[member] == minimum:
            target[member] += 1
            larger_quotas_left -= 1

    kept = {topic_partition for held in assigned.values() for topic_partition in held}
    receivers = deque(member for member in members if len(assigned[member]) < target[member])
    for topic_partition in partitions:
        if topic_partition in kept:
            continue
        member = receivers.popleft()
        assigned[member].append(topic_partition)
        if len(assigned[member]) < target[member]:
            receivers.append(member)
    return assigned


class _GeneralBalancer:
    """Balances partitions over members whose subscriptions differ, moving as little as possible.

    Each member's partitions are split into *kept* ones (it owned them before this rebalance)
    and *fresh* ones (placed on it during this computation). A *cost-reducing path* is a chain
    of members ``m0 → m1 → … → mk`` in which each member holds a movable partition of a topic
    the next one subscribes to and ``count(m0) >= count(mk) + 2``; shifting one partition along
    every link lowers m0's count by one and raises mk's by one. With no such path over all
    partitions, the counts are as even as the subscriptions allow (the least possible spread,
    so within 1 whenever that is possible at all).

    :meth:`balance` first removes every path that moves only fresh partitions — the most even
    spread reachable without taking anything from its previous owner — and only then allows
    kept partitions to move, so a previous owner loses a partition only when balance needs it.
    """

    def __init__(
        self,
        members: list[str],
        subscribers: Mapping[str, list[str]],
        previous_owner: Mapping[TopicPartition, str],
    ) -> None:
        self.subscribers = subscribers
        self.previous_owner = previous_owner
        self.fresh: dict[str, dict[str, set[int]]] = {member: {} for member in members}
        self.kept: dict[str, dict[str, set[int]]] = {member: {} for member in members}
        self.counts: dict[str, int] = dict.fromkeys(members, 0)
        self._order: list[tuple[int, str]] = [(0, member) for member in sorted(members)]

    # -- state -----------------------------------------------------------------------------

    def _recount(self, member: str, delta: int) -> None:
        del self._order[bisect.bisect_left(self._order, (self.counts[member], member))]
        self.counts[member] += delta
        bisect.insort(self._order, (self.counts[member], member))

    def _place(self, member: str, topic: str, partition: int) -> None:
        buckets = self.kept if self.previous_owner.get((topic, partition)) == member else self.fresh
        buckets[member].setdefault(topic, set()).add(partition)

    def give(self, member: str, topic_partition: TopicPartition) -> None:
        self._place(member, *topic_partition)
        self._recount(member, +1)

    def _movable_topics(self, member: str, fresh_only: bool) -> list[str]:
        if fresh_only:
            return sorted(self.fresh[member])
        return sorted(set(self.fresh[member]) | set(self.kept[member]))

    def _can_move(self, member: str, topic: str, fresh_only: bool) -> bool:
        return topic in self.fresh[member] or (not fresh_only and topic in self.kept[member])

    def move(self, giver: str, taker: str, topic: str) -> None:
        """Move one of ``giver``'s partitions of ``topic`` to ``taker``: fresh ones first."""
        buckets = self.fresh if topic in self.fresh[giver] else self.kept
        partitions = buckets[giver][topic]
        partition = min(partitions)
        partitions.discard(partition)
        if not partitions:
            del buckets[giver][topic]
        self._place(taker, topic, partition)
        self._recount(giver, -1)
        self._recount(taker, +1)

    def least_loaded(self, topic: str) -> str:
        """The subscriber of ``topic`` with the fewest partitions (then the lowest member id)."""
        eligible = self.subscribers[topic]
        if len(eligible) == len(self._order):
            return self._order[0][1]
        allowed = set(eligible)
        return next(member for _, member in self._order if member in allowed)

    def _minimum(self) -> int:
        return self._order[0][0]

    def _most_loaded_first(self) -> list[str]:
        return [member for _, member in sorted(self._order, key=lambda entry: (-entry[0], entry[1]))]

    # -- balancing -------------------------------------------------------------------------

    def _direct_moves(self, fresh_only: bool) -> None:
        """Move single partitions to a subscriber holding two or more fewer, until none can."""
        moved = True
        while moved:
            moved = False
            for giver in self._most_loaded_first():
                if self.counts[giver] < self._minimum() + 2:
                    break
                for topic in self._movable_topics(giver, fresh_only):
                    while self._can_move(giver, topic, fresh_only):
                        taker = self.least_loaded(topic)
                        if self.counts[giver] < self.counts[taker] + 2:
                            break
                        self.move(giver, taker, topic)
                        moved = True

    def _shortest_path(self, source: str, fresh_only: bool) -> list[tuple[str, str, str]]:
        """Links (giver, taker, topic) of a shortest cost-reducing path from ``source``, or []."""
        limit = self.counts[source] - 2
        came_from: dict[str, tuple[str, str]] = {}
        visited_members = {source}
        visited_topics: set[str] = set()
        queue = deque([source])
        while queue:
            member = queue.popleft()
            for topic in self._movable_topics(member, fresh_only):
                if topic in visited_topics:
                    continue
                visited_topics.add(topic)
                for candidate in self.subscribers[topic]:
                    if candidate in visited_members:
                        continue
                    visited_members.add(candidate)
                    came_from[candidate] = (member, topic)
                    if self.counts[candidate] <= limit:
                        links: list[tuple[str, str, str]] = []
                        node = candidate
                        while node != source:
                            giver, via = came_from[node]
                            links.append((giver, node, via))
                            node = giver
                        links.reverse()
                        return links
                    queue.append(candidate)
        return []

    def _path_moves(self, fresh_only: bool) -> None:
        """Shift partitions along shortest cost-reducing paths until none is left."""
        while True:
            for source in self._most_loaded_first():
                if self.counts[source] < self._minimum() + 2:
                    return
                links = self._shortest_path(source, fresh_only)
                if links:
                    for giver, taker, topic in links:
                        self.move(giver, taker, topic)
                    break
            else:
                return

    def balance(self) -> None:
        for fresh_only in (True, False):
            self._direct_moves(fresh_only)
            self._path_moves(fresh_only)

    def result(self) -> dict[str, list[TopicPartition]]:
        return {
            member: sorted(
                (topic, partition)
                for buckets in (self.fresh, self.kept)
                for topic, numbers in buckets[member].items()
                for partition in numbers
            )
            for member in self.counts
        }


def _sticky_general(
    members: list[str],
    topics_of: Mapping[str, frozenset[str]],
    partitions_per_topic: Mapping[str, int],
    owners: Mapping[TopicPartition, str],
) -> dict[str, list[TopicPartition]]:
    """Sticky assignment when subscriptions differ.

    Every valid previous assignment is kept; unowned partitions go one by one (those with the
    fewest possible members first) to the least loaded subscriber; then
    :meth:`_GeneralBalancer.balance` evens the counts out, moving kept partitions only when
    fresh ones cannot do it. Each move lowers the sum of squared counts, so the loops end.
    """
    subscribers = {
        topic: [member for member in members if topic in topics_of[member]]
        for topic in sorted(set().union(*topics_of.values()))
    }
    balancer = _GeneralBalancer(members, subscribers, owners)
    unowned: list[TopicPartition] = []
    for topic_partition in _all_partitions(set(subscribers), partitions_per_topic):
        owner = owners.get(topic_partition)
        if owner is not None:
            balancer.give(owner, topic_partition)
        else:
            unowned.append(topic_partition)
    unowned.sort(key=lambda topic_partition: (len(subscribers[topic_partition[0]]), topic_partition))
    for topic_partition in unowned:
        balancer.give(balancer.least_loaded(topic_partition[0]), topic_partition)
    balancer.balance()
    return balancer.result()


def _sticky_plan(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
) -> dict[str, list[TopicPartition]]:
    members = sorted(subscriptions)
    if not members:
        return {}
    topics_of = _existing_topics(partitions_per_topic, subscriptions)
    owners = _previous_owners(subscriptions, topics_of, partitions_per_topic)
    distinct_subscriptions = set(topics_of.values())
    if len(distinct_subscriptions) == 1:
        (topics,) = distinct_subscriptions
        if not topics:
            return {member: [] for member in members}
        return _sticky_identical(members, _all_partitions(topics, partitions_per_topic), owners)
    return _sticky_general(members, topics_of, partitions_per_topic, owners)


class StickyAssignor(Assignor):
    """Balanced first, then as few moves as possible (eager: members revoke all, then join)."""

    name = "sticky"
    protocol = EAGER

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        return _to_assignments(subscriptions, _sticky_plan(partitions_per_topic, subscriptions))


class CooperativeStickyAssignor(Assignor):
    """The sticky plan minus partitions another member still owns: they move next round."""

    name = "cooperative-sticky"
    protocol = COOPERATIVE

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        plan = _sticky_plan(partitions_per_topic, subscriptions)
        claimants: dict[TopicPartition, set[str]] = {}
        for member, subscription in subscriptions.items():
            for topic_partition in subscription.owned_partitions:
                claimants.setdefault(topic_partition, set()).add(member)
        granted = {
            member: [
                topic_partition
                for topic_partition in partitions
                if claimants.get(topic_partition, {member}) <= {member}
            ]
            for member, partitions in plan.items()
        }
        return _to_assignments(subscriptions, granted)


# --- registry ----------------------------------------------------------------------------------

ASSIGNORS: dict[str, type[Assignor]] = {
    assignor.name: assignor
    for assignor in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}


def assignor_for(name: str) -> Assignor:
    """An instance of the assignor registered as ``name``; ConfigError for an unknown name."""
    try:
        return ASSIGNORS[name]()
    except (KeyError, TypeError):
        known = ", ".join(sorted(ASSIGNORS))
        raise ConfigError(
            f"unknown partition assignment strategy {name!r}; known strategies: {known}"
        ) from None
