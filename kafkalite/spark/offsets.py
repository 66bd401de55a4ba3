"""Offset planning on the driver: offsets as Spark checkpoints them, rate limits, the cluster
queries that resolve offset specs, and the split of offset ranges into input partitions.

Concurrency: :class:`ClusterClient` is used by one driver thread at a time (the reader that owns
it); the other functions are pure.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from kafkalite import protocol
from kafkalite.client.types import TopicPartition
from kafkalite.spark.options import (
    ISOLATION_LEVELS,
    ClientSecurity,
    OffsetSpec,
    ReadSettings,
    SparkOptionError,
    Subscription,
)

# One logger for the whole data source, as when it was one module: log settings keep working.
log = logging.getLogger("kafkalite.spark")


# --- offsets: JSON form and arithmetic ---------------------------------------------------------


Offsets = dict[TopicPartition, int]


def offsets_to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """``{"topic": {"partition": offset}}``, topics and partitions in order (Spark compares the
    serialised form, so equal offsets must serialise equally)."""
    result: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        result.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return result


def offsets_from_json(value: Mapping[str, Any] | None) -> Offsets:
    result: Offsets = {}
    for topic, partitions in (value or {}).items():
        for partition, offset in dict(partitions).items():
            result[TopicPartition(str(topic), int(partition))] = int(offset)
    return result


def rate_limit(limit: int, start: Offsets, end: Offsets, earliest_of_new: Offsets) -> Offsets:
    """Spread ``limit`` records over the partitions in proportion to what each has available
    (Spark's rule: a partition with something to read gets at least one record)."""
    sizes: dict[TopicPartition, int] = {}
    for tp, until in end.items():
        begin = start.get(tp, earliest_of_new.get(tp))
        if begin is not None and until - begin > 0:
            sizes[tp] = until - begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(end)
    limited: Offsets = {}
    for tp, until in end.items():
        size = sizes.get(tp)
        if size is None:
            limited[tp] = until
            continue
        begin = start.get(tp, earliest_of_new.get(tp, 0))
        share = limit * (size / total)
        records = math.ceil(share) if share < 1 else math.floor(share)
        limited[tp] = min(until, begin + records)
    return limited


# --- driver-side cluster access ----------------------------------------------------------------


class ClusterClient:
    """Topic, partition and offset look-ups for planning (driver only; one thread).

    Offsets are listed with ``isolation_level``, the source's: under read_committed, latest is
    the last stable offset (an open transaction holds a read there), under read_uncommitted the
    high watermark."""

    def __init__(self, bootstrap_servers: str, isolation_level: str = ISOLATION_LEVELS[0],
                 security: ClientSecurity = ()) -> None:
        if isolation_level not in ISOLATION_LEVELS:
            raise SparkOptionError("kafka.isolation.level",
                                   f"must be read_committed or read_uncommitted, got {isolation_level!r}")
        self.bootstrap_servers = bootstrap_servers
        self.isolation_level = isolation_level
        self.security = security
        self.admin = self._connect()
        self._warned_missing: set[str] = set()

    def _connect(self) -> Any:
        from kafkalite.client.admin import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, client_id="kafkalite-spark-driver",
                                **dict(self.security))

    def close(self) -> None:
        self.admin.close()

    def _list_offsets(self, query: dict[TopicPartition, int]) -> dict[TopicPartition, Any]:
        from kafkalite.errors import UnknownTopicOrPartitionError

        answers: dict[TopicPartition, Any]
        try:
            answers = self.admin.list_offsets(query, isolation_level=self.isolation_level)
        except UnknownTopicOrPartitionError:
            # the admin client's cached metadata may predate partitions added since: start afresh
            self.admin.close()
            self.admin = self._connect()
            answers = self.admin.list_offsets(query, isolation_level=self.isolation_level)
        return answers

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """Current partitions of the subscription, sorted (missing topics have none)."""
        if subscription.kind == "assign":
            return sorted(subscription.partitions)
        if subscription.kind == "subscribe":
            described = self.admin.describe_topics(list(subscription.topics))
        else:
            pattern = re.compile(subscription.pattern)
            described = [topic for topic in self.admin.describe_topics(None)
                         if pattern.fullmatch(topic["name"]) and not topic.get("is_internal")
                         and not topic["name"].startswith("__")]
        result: list[TopicPartition] = []
        for topic in described:
            if topic.get("error_code"):
                if subscription.kind == "subscribe" and topic["name"] not in self._warned_missing:
                    # Spark's behaviour: a subscribed topic that does not exist has no rows (yet)
                    self._warned_missing.add(topic["name"])
                    log.warning("kafkalite source: subscribed topic %s does not exist (error %s); it is read "
                                "when it appears", topic["name"], topic["error_code"])
                continue
            self._warned_missing.discard(topic["name"])
            result.extend(TopicPartition(topic["name"], item["partition_index"]) for item in topic["partitions"])
        return sorted(result)

    def check_assigned(self, subscription: Subscription, timeout_s: float = 3.0) -> None:
        """Raise UnknownTopicOrPartitionError naming the assigned topics or partitions that do
        not exist (``assign``), after up to ``timeout_s`` for a topic that was just created to
        show in the metadata."""
        from kafkalite.errors import UnknownTopicOrPartitionError

        if subscription.kind != "assign":
            return
        wanted = sorted(subscription.partitions)
        topics = sorted({tp.topic for tp in wanted})
        deadline = time.monotonic() + timeout_s
        while True:
            described = {topic["name"]: topic for topic in self.admin.describe_topics(topics)}
            missing: list[str] = []
            for tp in wanted:
                topic = described.get(tp.topic)
                if topic is None or topic.get("error_code") == UnknownTopicOrPartitionError.errno:
                    missing.append(f"topic {tp.topic}")
                elif topic.get("error_code") or not topic["partitions"]:
                    continue  # another problem (no leader yet...): planning reports it if it lasts
                elif tp.partition not in {item["partition_index"] for item in topic["partitions"]}:
                    missing.append(f"partition {tp.topic}-{tp.partition} (the topic has "
                                   f"{len(topic['partitions'])} partitions)")
            if not missing:
                return
            if time.monotonic() >= deadline:
                raise UnknownTopicOrPartitionError("the assign option names what does not exist: "
                                                   + ", ".join(dict.fromkeys(missing)))
            time.sleep(0.2)

    def offsets_at(self, partitions: Iterable[TopicPartition], timestamp: int) -> Offsets:
        wanted = list(partitions)
        if not wanted:
            return {}
        answers = self._list_offsets(dict.fromkeys(wanted, timestamp))
        return {tp: answers[tp].offset for tp in wanted}

    def earliest(self, partitions: Iterable[TopicPartition]) -> Offsets:
        return self.offsets_at(partitions, protocol.EARLIEST_TIMESTAMP)

    def latest(self, partitions: Iterable[TopicPartition]) -> Offsets:
        return self.offsets_at(partitions, protocol.LATEST_TIMESTAMP)

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        if not timestamps:
            return {}
        answers = self._list_offsets(dict(timestamps))
        result: dict[TopicPartition, int | None] = {}
        for tp in timestamps:
            offset = answers[tp].offset if tp in answers else -1
            result[tp] = offset if offset is not None and offset >= 0 else None
        return result

    def resolve(self, spec: OffsetSpec, partitions: Sequence[TopicPartition], *, starting: bool,
                strategy: str = "error") -> Offsets:
        """Turn a spec into offsets for ``partitions`` (raising SparkOptionError for a spec that
        does not fit them)."""
        if spec.kind == "earliest":
            return self.earliest(partitions)
        if spec.kind == "latest":
            return self.latest(partitions)
        if spec.kind == "timestamp":
            wanted = dict.fromkeys(partitions, spec.timestamp)
        else:
            given = spec.by_partition
            missing = sorted(set(partitions) - set(given))
            extra = sorted(set(given) - set(partitions))
            if missing or extra:
                parts = []
                if missing:
                    parts.append("no entry for " + ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing))
                if extra:
                    parts.append("entries for partitions the query does not read: "
                                 + ", ".join(f"{tp.topic}-{tp.partition}" for tp in extra))
                raise SparkOptionError(spec.option, "must name every partition the query reads; " + "; ".join(parts))
            if spec.kind == "offsets":
                special = {tp: value for tp, value in given.items() if value < 0}
                result = {tp: value for tp, value in given.items() if value >= 0}
                earliest = [tp for tp, value in special.items() if value == protocol.EARLIEST_TIMESTAMP]
                latest = [tp for tp, value in special.items() if value == protocol.LATEST_TIMESTAMP]
                result.update(self.earliest(earliest))
                result.update(self.latest(latest))
                return result
            wanted = {tp: given[tp] for tp in partitions}
        special_earliest = [tp for tp, value in wanted.items() if value == protocol.EARLIEST_TIMESTAMP]
        special_latest = [tp for tp, value in wanted.items() if value == protocol.LATEST_TIMESTAMP]
        by_time = {tp: value for tp, value in wanted.items() if value >= 0}
        result = {**self.earliest(special_earliest), **self.latest(special_latest)}
        found = self.offsets_for_times(by_time)
        unmatched = [tp for tp, offset in found.items() if offset is None]
        result.update({tp: offset for tp, offset in found.items() if offset is not None})
        if unmatched:
            if starting and strategy == "error":
                raise SparkOptionError(spec.option, "no record at or after the timestamp in "
                                       + ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(unmatched))
                                       + " (set startingOffsetsByTimestampStrategy to latest to start at the end)")
            result.update(self.latest(unmatched))
        return result


@dataclass(frozen=True)
class OffsetRangePartition(InputPartition):
    """One Spark task's slice of one topic-partition: offsets ``[from_offset, until_offset)``."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    settings: ReadSettings

    @property
    def value(self) -> str:  # InputPartition's description
        return f"{self.topic}-{self.partition}[{self.from_offset},{self.until_offset})"

    def __repr__(self) -> str:
        return f"OffsetRangePartition({self.value})"


def plan_partitions(start: Offsets, end: Offsets, settings: ReadSettings, min_partitions: int | None,
                    max_records_per_partition: int | None) -> list[OffsetRangePartition]:
    """Offset ranges → Spark partitions, splitting big ranges (Spark's rule: with minPartitions
    above the number of topic-partitions, each range gets parts in proportion to its size; with
    maxRecordsPerPartition, no part is larger)."""
    ranges = [(tp, start[tp], end[tp]) for tp in sorted(end) if tp in start and end[tp] > start[tp]]
    total = sum(until - begin for _, begin, until in ranges)
    parts: list[OffsetRangePartition] = []
    for tp, begin, until in ranges:
        size = until - begin
        pieces = 1
        if min_partitions is not None and min_partitions > len(ranges) and total > 0:
            pieces = max(1, math.ceil(size / (total / min_partitions)))
        if max_records_per_partition is not None:
            pieces = max(pieces, math.ceil(size / max_records_per_partition))
        pieces = min(pieces, size)
        for index in range(pieces):
            low = begin + size * index // pieces
            high = begin + size * (index + 1) // pieces
            parts.append(OffsetRangePartition(tp.topic, tp.partition, low, high, settings))
    return parts
