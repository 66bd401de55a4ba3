"""Producer partitioners: which partition of a topic a record goes to.

This module owns the two built-in strategies; Kafka's hash (:func:`murmur2`) and
:func:`to_positive` live in :mod:`kafkalite.topics`, shared with the broker, and are re-exported
here:

* :class:`DefaultPartitioner` — Kafka's default rules, in order:

  1. an explicit partition on the record wins;
  2. a key (unless ``ignore_keys``) maps to ``to_positive(murmur2(key)) % len(all_partitions)``,
     over *all* partitions, whether their leader is known or not, so a key always lands on
     the same partition while the partition count is unchanged;
  3. a keyless record uses *sticky partitioning* in the style of KIP-794: every keyless
     record of a topic goes to one partition until about ``batch_size`` bytes were produced
     to it, then the partitioner switches to another partition picked at random among the
     *available* partitions (those with a known leader), different from the previous one
     when there is a choice. When no partition is available the pick is made among all of
     them. A sticky partition that stops being available is left at the next record.

* :class:`RoundRobinPartitioner` — Kafka's ``RoundRobinPartitioner``: keys are ignored and
  consecutive records of a topic cycle over the available partitions (over all partitions
  when none is available).

Both share one calling convention (:class:`Partitioner`)::

    partition(topic, key_bytes, all_partitions, available_partitions, record_size,
              explicit_partition=None) -> int
    on_new_batch(topic, previous_partition) -> None

``all_partitions`` lists every partition id of the topic (Kafka numbers them densely
``0 .. n-1``); ``available_partitions`` lists those whose leader is currently known;
``record_size`` is the record's estimated size in bytes and feeds the sticky byte count.
``on_new_batch`` is an optional hint from the record accumulator that it had to open a new
batch because the batch of ``previous_partition`` was full: the default partitioner then
moves keyless records elsewhere at once (the KIP-480 behaviour) instead of waiting for the
byte count. An accumulator that calls ``partition`` with real record sizes never needs it;
it must not call it merely because a batch was sent (with ``linger.ms`` = 0 that would switch
on every record, the weakness KIP-794 fixed).

Randomness comes from an injected :class:`random.Random`, so tests can seed it.

Concurrency: :func:`murmur2` and :func:`to_positive` are pure. A partitioner keeps small
per-topic state (the sticky partition and its byte count, or the round-robin counter)
behind its own lock, so one instance may be shared by every thread of a producer.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kafkalite.errors import ConfigError, UnknownTopicOrPartitionError
from kafkalite.topics import murmur2, partition_for_key, to_positive

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DefaultPartitioner",
    "Partitioner",
    "RoundRobinPartitioner",
    "murmur2",
    "to_positive",
]

DEFAULT_BATCH_SIZE = 16384  # Kafka's batch.size default


class Partitioner(Protocol):
    """What the producer calls to place a record; see the module docstring for the contract."""

    def partition(
        self,
        topic: str,
        key_bytes: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
        record_size: int,
        *,
        explicit_partition: int | None = None,
    ) -> int: ...

    def on_new_batch(self, topic: str, previous_partition: int) -> None: ...


def _check_topic(topic: str, all_partitions: Sequence[int]) -> None:
    if not all_partitions:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partitions in the metadata")


def _check_explicit(topic: str, partition: int, all_partitions: Sequence[int]) -> int:
    """An explicit partition must exist; stale metadata is the usual cause when it does not."""
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise ConfigError(f"partition must be an integer, got {partition!r}")
    if not 0 <= partition < len(all_partitions):
        raise UnknownTopicOrPartitionError(
            f"partition {partition} of topic {topic!r} is not in [0, {len(all_partitions)})"
        )
    return partition


def _hash_partition(key_bytes: bytes, partition_count: int) -> int:
    return partition_for_key(key_bytes, partition_count)


@dataclass
class _StickyState:
    partition: int
    produced_bytes: int = 0


class DefaultPartitioner:
    """Kafka's default partitioner: explicit partition, else key hash, else sticky (KIP-794).

    ``batch_size`` is the number of bytes after which keyless records leave their sticky
    partition (Kafka uses ``batch.size``). ``ignore_keys`` is ``partitioner.ignore.keys``:
    keyed records are then placed like keyless ones. ``rng`` supplies the random choices.
    """

    def __init__(
        self,
        batch_size: int = DEFAULT_BATCH_SIZE,
        *,
        ignore_keys: bool = False,
        rng: random.Random | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.batch_size = batch_size
        self.ignore_keys = ignore_keys
        self._random = rng if rng is not None else random.Random()
        self._sticky: dict[str, _StickyState] = {}
        self._lock = threading.Lock()

    def partition(
        self,
        topic: str,
        key_bytes: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
        record_size: int,
        *,
        explicit_partition: int | None = None,
    ) -> int:
        """Return the partition for one record and, for a keyless one, count its bytes."""
        _check_topic(topic, all_partitions)
        if explicit_partition is not None:
            return _check_explicit(topic, explicit_partition, all_partitions)
        if key_bytes is not None and not self.ignore_keys:
            return _hash_partition(key_bytes, len(all_partitions))
        with self._lock:
            state = self._sticky.get(topic)
            if (
                state is None
                or state.produced_bytes >= self.batch_size
                or not self._usable(state.partition, all_partitions, available_partitions)
            ):
                previous = state.partition if state is not None else None
                chosen = self._choose(previous, all_partitions, available_partitions)
                state = _StickyState(chosen)
                self._sticky[topic] = state
            state.produced_bytes += max(record_size, 0)
            return state.partition

    def on_new_batch(self, topic: str, previous_partition: int) -> None:
        """The batch of ``previous_partition`` filled up: keyless records of ``topic`` move on.

        A no-op when the sticky partition already changed (another thread got there first).
        """
        with self._lock:
            state = self._sticky.get(topic)
            if state is not None and state.partition == previous_partition:
                state.produced_bytes = max(state.produced_bytes, self.batch_size)

    def sticky_partition(self, topic: str) -> int | None:
        """The current sticky partition of ``topic``, or None before its first keyless record."""
        with self._lock:
            state = self._sticky.get(topic)
            return state.partition if state is not None else None

    @staticmethod
    def _usable(
        partition: int, all_partitions: Sequence[int], available_partitions: Sequence[int]
    ) -> bool:
        if available_partitions:
            return partition in available_partitions
        return 0 <= partition < len(all_partitions)

    def _choose(
        self,
        previous: int | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        candidates = sorted(set(available_partitions if available_partitions else all_partitions))
        if previous is not None and len(candidates) > 1 and previous in candidates:
            candidates.remove(previous)
        return self._random.choice(candidates)


class RoundRobinPartitioner:
    """Kafka's ``RoundRobinPartitioner``: keys ignored, records of a topic cycle over partitions.

    The n-th record of a topic (n counted from 0, per topic) goes to the n-th available
    partition in ascending order, modulo their number; with no available partition it goes to
    partition ``n % len(all_partitions)``. An explicit partition still wins.
    """

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}
        self._lock = threading.Lock()

    def partition(
        self,
        topic: str,
        key_bytes: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
        record_size: int,
        *,
        explicit_partition: int | None = None,
    ) -> int:
        """Return the next partition in the topic's cycle (or the explicit one)."""
        _check_topic(topic, all_partitions)
        if explicit_partition is not None:
            return _check_explicit(topic, explicit_partition, all_partitions)
        with self._lock:
            sequence = self._counters.get(topic, 0)
            self._counters[topic] = to_positive(sequence + 1)
        if available_partitions:
            ordered = sorted(set(available_partitions))
            return ordered[sequence % len(ordered)]
        return sequence % len(all_partitions)

    def on_new_batch(self, topic: str, previous_partition: int) -> None:
        """Nothing to do: the cycle already advances on every record."""
