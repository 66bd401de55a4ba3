"""Producer partitioners: Kafka's murmur2, key placement, sticky and round-robin keyless placement.

kafka-python serves as an independent oracle for the hash and for key → partition placement.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import given, settings, strategies as st
from kafka.partitioner.default import (
    DefaultPartitioner as KafkaPythonDefaultPartitioner,
    murmur2 as kafka_python_murmur2,
)

from kafkalite.client.partitioner import DefaultPartitioner, RoundRobinPartitioner
from kafkalite.errors import ConfigError, UnknownTopicOrPartitionError
from kafkalite.topics import murmur2, partition_for_key, to_positive

# Test vectors of Kafka's own murmur2 tests (section 7.1 of the design reference).
MURMUR2_VECTORS = [
    ("21", -973932308),
    ("foobar", -790332482),
    ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107),
]

PARTITION_COUNTS = [1, 2, 3, 7, 12, 16, 50, 100, 1000]


def _key_corpus(size: int = 3000) -> list[bytes]:
    generator = random.Random(20240607)
    keys = [b"", b"\x00", b"\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00\x01"]
    while len(keys) < size:
        length = generator.choice([1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 64, generator.randrange(0, 300)])
        keys.append(bytes(generator.getrandbits(8) for _ in range(length)))
    keys.extend(f"user-{index}".encode() for index in range(500))
    return keys


KEY_CORPUS = _key_corpus()


class _FakeClusterMetadata:
    """Just enough of kafka-python's ClusterMetadata for its DefaultPartitioner."""

    def __init__(self, topic: str, partition_count: int, available: set[int]) -> None:
        self._topic = topic
        self._partitions = set(range(partition_count))
        self._available = available

    def topics(self) -> set[str]:
        return {self._topic}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(self._partitions)

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return set(self._available)


ALL_6 = list(range(6))


# --- murmur2 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), MURMUR2_VECTORS)
def test_murmur2_matches_kafka_test_vectors(text: str, expected: int) -> None:
    assert murmur2(text.encode("utf-8")) == expected


def test_murmur2_accepts_bytearray_and_memoryview() -> None:
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482


def test_murmur2_matches_kafka_python_over_key_corpus() -> None:
    assert len(KEY_CORPUS) >= 2000
    for key in KEY_CORPUS:
        ours = murmur2(key)
        assert -(1 << 31) <= ours < (1 << 31)
        # kafka-python returns the same 32 bits read as unsigned.
        assert ours & 0xFFFFFFFF == kafka_python_murmur2(key), key


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_murmur2_matches_kafka_python_on_arbitrary_bytes(key: bytes) -> None:
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)


def test_partition_for_key_is_to_positive_murmur2_modulo_the_count() -> None:
    for key in (b"", b"foobar", b"abc", bytes(range(256))):
        assert partition_for_key(key, 7) == to_positive(murmur2(key)) % 7
        assert partition_for_key(key, 7) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 7


def test_to_positive_clears_the_sign_bit_rather_than_taking_abs() -> None:
    assert to_positive(5) == 5
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(1 << 31)) == 0
    assert to_positive(-973932308) == (-973932308) & 0x7FFFFFFF != abs(-973932308)


# --- keyed records -----------------------------------------------------------------------------


@pytest.mark.parametrize("partition_count", PARTITION_COUNTS)
def test_key_placement_matches_kafka_python(partition_count: int) -> None:
    ours = DefaultPartitioner(rng=random.Random(1))
    theirs = KafkaPythonDefaultPartitioner()
    cluster = _FakeClusterMetadata("orders", partition_count, set(range(partition_count)))
    partitions = list(range(partition_count))
    for key in KEY_CORPUS:
        expected = theirs.partition("orders", key, key, None, None, cluster)
        assert ours.partition("orders", key, partitions, partitions, 100) == expected


def test_key_placement_worked_examples() -> None:
    partitioner = DefaultPartitioner()
    assert partitioner.partition("t", b"foobar", ALL_6, ALL_6, 10) == (-790332482 & 0x7FFFFFFF) % 6
    assert partitioner.partition("t", b"abc", ALL_6, ALL_6, 10) == 479470107 % 6


def test_key_placement_ignores_availability() -> None:
    partitioner = DefaultPartitioner()
    for key in KEY_CORPUS[:300]:
        expected = to_positive(murmur2(key)) % 6
        assert partitioner.partition("t", key, ALL_6, [0], 10) == expected
        assert partitioner.partition("t", key, ALL_6, [], 10) == expected


def test_empty_key_is_a_key() -> None:
    partitioner = DefaultPartitioner(rng=random.Random(3))
    expected = to_positive(murmur2(b"")) % 6
    assert all(partitioner.partition("t", b"", ALL_6, ALL_6, 10) == expected for _ in range(50))


def test_ignore_keys_places_keyed_records_like_keyless_ones() -> None:
    partitioner = DefaultPartitioner(batch_size=100, ignore_keys=True, rng=random.Random(5))
    chosen = [partitioner.partition("t", b"same-key", ALL_6, ALL_6, 10) for _ in range(100)]
    assert len(set(chosen)) > 1
    assert all(chosen[index] == chosen[index - index % 10] for index in range(100))


# --- explicit partitions and bad input ---------------------------------------------------------


def test_explicit_partition_wins_over_key_and_stickiness() -> None:
    partitioner = DefaultPartitioner(rng=random.Random(1))
    assert partitioner.partition("t", b"foobar", ALL_6, ALL_6, 10, explicit_partition=4) == 4
    assert partitioner.partition("t", None, ALL_6, [0], 10, explicit_partition=5) == 5
    assert RoundRobinPartitioner().partition("t", None, ALL_6, ALL_6, 10, explicit_partition=3) == 3


@pytest.mark.parametrize(
    "partitioner", [DefaultPartitioner(), RoundRobinPartitioner()], ids=["default", "round-robin"]
)
def test_out_of_range_explicit_partition_and_unknown_topic_are_rejected(
    partitioner: DefaultPartitioner | RoundRobinPartitioner,
) -> None:
    with pytest.raises(UnknownTopicOrPartitionError):
        partitioner.partition("t", None, ALL_6, ALL_6, 10, explicit_partition=6)
    with pytest.raises(UnknownTopicOrPartitionError):
        partitioner.partition("t", None, ALL_6, ALL_6, 10, explicit_partition=-1)
    with pytest.raises(UnknownTopicOrPartitionError):
        partitioner.partition("t", b"key", [], [], 10)


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        DefaultPartitioner(batch_size=0)


# --- sticky keyless placement ------------------------------------------------------------------


def _runs(partitions: list[int]) -> list[tuple[int, int]]:
    """Consecutive (partition, length) runs."""
    runs: list[tuple[int, int]] = []
    for partition in partitions:
        if runs and runs[-1][0] == partition:
            runs[-1] = (partition, runs[-1][1] + 1)
        else:
            runs.append((partition, 1))
    return runs


def test_keyless_records_stick_until_batch_size_bytes_then_switch() -> None:
    partitioner = DefaultPartitioner(batch_size=1000, rng=random.Random(7))
    chosen = [partitioner.partition("t", None, ALL_6, ALL_6, 100) for _ in range(1000)]
    runs = _runs(chosen)
    # 10 records of 100 bytes reach batch_size; the next record moves to another partition.
    assert [length for _, length in runs] == [10] * 100
    assert all(first != second for (first, _), (second, _) in pairwise(runs))
    assert set(Counter(partition for partition, _ in runs)) == set(ALL_6)


def test_sticky_run_length_follows_bytes_not_records() -> None:
    partitioner = DefaultPartitioner(batch_size=1000, rng=random.Random(8))
    sizes = [random.Random(9).randrange(1, 400) for _ in range(2000)]
    chosen = [partitioner.partition("t", None, ALL_6, ALL_6, size) for size in sizes]
    position = 0
    for _, length in _runs(chosen)[:-1]:
        run_bytes = sum(sizes[position:position + length])
        # At least batch_size bytes, and the last record is the one that crossed it.
        assert run_bytes >= 1000
        assert run_bytes - sizes[position + length - 1] < 1000
        position += length


def test_only_available_partitions_are_chosen() -> None:
    partitioner = DefaultPartitioner(batch_size=50, rng=random.Random(11))
    available = [1, 3, 4]
    chosen = [partitioner.partition("t", None, ALL_6, available, 10) for _ in range(3000)]
    assert set(chosen) == set(available)
    runs = _runs(chosen)
    assert all(first != second for (first, _), (second, _) in pairwise(runs))


def test_single_available_partition_is_kept_after_the_batch_fills() -> None:
    partitioner = DefaultPartitioner(batch_size=50, rng=random.Random(12))
    assert {partitioner.partition("t", None, ALL_6, [2], 10) for _ in range(100)} == {2}


def test_without_available_partitions_all_partitions_are_candidates() -> None:
    partitioner = DefaultPartitioner(batch_size=10, rng=random.Random(13))
    chosen = {partitioner.partition("t", None, ALL_6, [], 10) for _ in range(500)}
    assert chosen == set(ALL_6)


def test_sticky_partition_that_loses_its_leader_is_left_at_the_next_record() -> None:
    partitioner = DefaultPartitioner(batch_size=10_000, rng=random.Random(14))
    first = partitioner.partition("t", None, ALL_6, ALL_6, 10)
    assert partitioner.partition("t", None, ALL_6, ALL_6, 10) == first
    still_available = [partition for partition in ALL_6 if partition != first]
    moved = partitioner.partition("t", None, ALL_6, still_available, 10)
    assert moved != first and moved in still_available
    assert partitioner.partition("t", None, ALL_6, ALL_6, 10) == moved


def test_on_new_batch_switches_only_away_from_the_current_sticky_partition() -> None:
    partitioner = DefaultPartitioner(batch_size=10_000, rng=random.Random(15))
    first = partitioner.partition("t", None, ALL_6, ALL_6, 10)
    partitioner.on_new_batch("t", (first + 1) % 6)  # stale hint: ignored
    assert partitioner.partition("t", None, ALL_6, ALL_6, 10) == first
    partitioner.on_new_batch("t", first)
    second = partitioner.partition("t", None, ALL_6, ALL_6, 10)
    assert second != first
    assert partitioner.sticky_partition("t") == second
    partitioner.on_new_batch("unknown-topic", 0)  # no state yet: nothing to do


def test_topics_stick_independently() -> None:
    partitioner = DefaultPartitioner(batch_size=100, rng=random.Random(16))
    for _ in range(9):
        partitioner.partition("a", None, ALL_6, ALL_6, 10)
    a_sticky = partitioner.sticky_partition("a")
    for _ in range(30):
        partitioner.partition("b", None, ALL_6, ALL_6, 10)
    assert partitioner.sticky_partition("a") == a_sticky
    assert partitioner.partition("a", None, ALL_6, ALL_6, 10) == a_sticky
    assert partitioner.sticky_partition("unseen") is None


def test_seeded_random_makes_choices_reproducible() -> None:
    def run() -> list[int]:
        partitioner = DefaultPartitioner(batch_size=30, rng=random.Random(99))
        return [partitioner.partition("t", None, ALL_6, [0, 2, 3, 5], 10) for _ in range(300)]

    assert run() == run()


def test_sticky_accounting_is_atomic_across_threads() -> None:
    partitioner = DefaultPartitioner(batch_size=1000, rng=random.Random(17))
    counts: Counter[int] = Counter()
    lock = threading.Lock()

    def produce() -> None:
        local = Counter(partitioner.partition("t", None, ALL_6, ALL_6, 10) for _ in range(1000))
        with lock:
            counts.update(local)

    threads = [threading.Thread(target=produce) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # 8000 records of 10 bytes: exactly 80 stretches of 100 records each.
    assert sum(counts.values()) == 8000
    assert all(count % 100 == 0 for count in counts.values())


# --- round robin -------------------------------------------------------------------------------


def test_round_robin_cycles_over_available_partitions_ignoring_keys() -> None:
    partitioner = RoundRobinPartitioner()
    chosen = [partitioner.partition("t", b"k%d" % index, ALL_6, [4, 1, 3], 10) for index in range(9)]
    assert chosen == [1, 3, 4] * 3


def test_round_robin_uses_all_partitions_when_none_is_available() -> None:
    partitioner = RoundRobinPartitioner()
    assert [partitioner.partition("t", None, ALL_6, [], 10) for _ in range(8)] == [0, 1, 2, 3, 4, 5, 0, 1]


def test_round_robin_counts_per_topic() -> None:
    partitioner = RoundRobinPartitioner()
    assert partitioner.partition("a", None, ALL_6, ALL_6, 10) == 0
    assert partitioner.partition("a", None, ALL_6, ALL_6, 10) == 1
    assert partitioner.partition("b", None, ALL_6, ALL_6, 10) == 0
    partitioner.on_new_batch("a", 1)
    assert partitioner.partition("a", None, ALL_6, ALL_6, 10) == 2
