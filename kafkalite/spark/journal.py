"""The sink journal of exactly-once streaming writes, and the scan for what an attempt wrote.

See the package docstring for the protocol. Concurrency: a journal or scan object belongs to
one task or commit call (one thread); the journal topic is the only shared state.
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kafkalite.client.types import TopicPartition
from kafkalite.errors import KafkaliteError, OffsetOutOfRangeError
from kafkalite.spark.clients import SinkRow, open_consumer, open_producer
from kafkalite.spark.options import JOURNAL_PARTITIONS, SCAN_CLOCK_MARGIN_MS, SinkOptions
from kafkalite.spark.pauses import pause_for_tests

# One logger for the whole data source, as when it was one module: log settings keep working.
log = logging.getLogger("kafkalite.spark")


# --- the sink journal (exactly-once streaming writes) ------------------------------------------


@dataclass
class AttemptRecord:
    """One write-task attempt as the journal shows it."""

    key: str
    batch_id: int
    partition_id: int
    done: bool
    started_ms: int
    producer_id: int
    producer_epoch: int


@dataclass
class JournalState:
    committed_batch: int = -1
    attempts: dict[tuple[int, int], list[AttemptRecord]] = field(default_factory=dict)
    keys_by_batch: dict[int, list[str]] = field(default_factory=dict)
    #: Attempt keys whose task result reached the driver (Spark counted the task successful).
    confirmed: set[str] = field(default_factory=set)


class SinkJournal:
    """The sink's journal in a compacted topic (see the module docstring). One sink (streaming
    query id) lives in one partition of the topic. Used by write tasks and by the driver's
    commit; every call opens and closes its own clients."""

    def __init__(self, options: SinkOptions, sink_id: str) -> None:
        self.options = options
        self.sink_id = sink_id
        self.topic = options.journal_topic
        self._partition: int | None = None

    def commit_key(self) -> str:
        return f"{self.sink_id}/commit"

    def attempt_key(self, batch_id: int, partition_id: int, attempt_id: str) -> str:
        return f"{self.sink_id}/attempt/{batch_id}/{partition_id}/{attempt_id}"

    def confirmation_key(self, attempt_key: str) -> str:
        return f"{attempt_key}/confirmed"

    def partition(self) -> int:
        if self._partition is None:
            count = self._ensure_topic()
            self._partition = zlib.crc32(self.sink_id.encode("utf-8")) % count
        return self._partition

    def _ensure_topic(self) -> int:
        from kafkalite.client.admin import KafkaAdminClient
        from kafkalite.client.types import NewTopic
        from kafkalite.errors import TopicAlreadyExistsError

        admin = KafkaAdminClient(bootstrap_servers=self.options.bootstrap_servers, client_id="kafkalite-spark-journal",
                                 **dict(self.options.security))
        try:
            for _ in range(50):
                described = admin.describe_topics([self.topic])
                if described and not described[0].get("error_code") and described[0]["partitions"]:
                    return len(described[0]["partitions"])
                brokers = len(admin.describe_cluster()["brokers"]) or 1
                try:
                    admin.create_topics([NewTopic(self.topic, JOURNAL_PARTITIONS, min(3, brokers), topic_configs={
                        "cleanup.policy": "compact", "segment.bytes": str(1024 * 1024),
                        "min.cleanable.dirty.ratio": "0.1"})])
                except TopicAlreadyExistsError:
                    pass
                time.sleep(0.1)
            raise KafkaliteError(f"the sink journal topic {self.topic} did not become available")
        finally:
            admin.close()

    def read(self) -> JournalState:
        """Everything the journal holds for this sink (latest value per key)."""
        tp = TopicPartition(self.topic, self.partition())
        consumer = open_consumer(self.options.bootstrap_servers, "kafkalite-spark-journal",
                                 security=self.options.security)
        latest: dict[str, tuple[dict[str, Any] | None, int, int]] = {}
        prefix = self.sink_id + "/"
        try:
            consumer.assign([tp])
            begin = consumer.beginning_offsets([tp])[tp]
            end = consumer.end_offsets([tp])[tp]
            for item in _fetch_range(consumer, tp, begin, end, timeout_ms=60_000):
                for record in item.records():
                    key = (record.key or b"").decode("utf-8", errors="replace")
                    if not key.startswith(prefix):
                        continue
                    value = json.loads(record.value) if record.value is not None else None
                    latest[key] = (value, item.batch.producer_id, item.batch.producer_epoch)
        finally:
            consumer.close()
        state = JournalState()
        for key, (value, producer_id, producer_epoch) in latest.items():
            if value is None:
                continue
            if key == self.commit_key():
                state.committed_batch = max(state.committed_batch, int(value["batch_id"]))
            elif value.get("type") == "confirmed":
                state.confirmed.add(str(value["attempt"]))
                state.keys_by_batch.setdefault(int(value["batch_id"]), []).append(key)
            elif value.get("type") == "attempt":
                record = AttemptRecord(key, int(value["batch_id"]), int(value["partition_id"]),
                                       value.get("state") == "done", int(value["started_ms"]), producer_id,
                                       producer_epoch)
                state.attempts.setdefault((record.batch_id, record.partition_id), []).append(record)
                state.keys_by_batch.setdefault(record.batch_id, []).append(key)
        return state

    def record_attempt(self, producer: Any, key: str, batch_id: int, partition_id: int, started_ms: int,
                       done: bool, records: int = 0) -> None:
        value = {"type": "attempt", "batch_id": batch_id, "partition_id": partition_id, "started_ms": started_ms,
                 "state": "done" if done else "started", "records": records}
        producer.send(self.topic, key=key.encode("utf-8"), value=json.dumps(value).encode("utf-8"),
                      partition=self.partition()).get(timeout=60)

    def confirm_attempts(self, batch_id: int, attempt_keys: list[str]) -> None:
        """On the driver, for a batch that failed: record the attempts whose task Spark counted
        successful (their result reached the driver), so a replay skips exactly those tasks. A
        task's own "done" mark is not enough: a killed task's input can end early without an
        error, and its attempt then marks itself done after writing only part of its rows."""
        if not attempt_keys:
            return
        producer = open_producer(self.options, "kafkalite-spark-journal")
        try:
            for attempt_key in attempt_keys:
                value = {"type": "confirmed", "batch_id": batch_id, "attempt": attempt_key}
                producer.send(self.topic, key=self.confirmation_key(attempt_key).encode("utf-8"),
                              value=json.dumps(value).encode("utf-8"), partition=self.partition())
            producer.flush()
        finally:
            producer.close()

    def commit_batch(self, batch_id: int) -> None:
        """Record ``batch_id`` as committed, then drop the attempt records of batches up to it."""
        state = self.read()
        producer = open_producer(self.options, "kafkalite-spark-journal")
        try:
            if batch_id > state.committed_batch:
                value = {"type": "commit", "batch_id": batch_id, "committed_ms": int(time.time() * 1000)}
                producer.send(self.topic, key=self.commit_key().encode("utf-8"),
                              value=json.dumps(value).encode("utf-8"), partition=self.partition()).get(timeout=60)
                pause_for_tests("commit")
            stale = [key for number, keys in state.keys_by_batch.items() if number <= batch_id for key in keys]
            for key in stale:
                producer.send(self.topic, key=key.encode("utf-8"), value=None, partition=self.partition())
            producer.flush()
        finally:
            producer.close()


def _fetch_range(consumer: Any, tp: TopicPartition, begin: int, end: int, timeout_ms: int) -> Iterator[Any]:
    """FetchedBatches of ``tp`` covering [begin, end) (an assigned consumer)."""
    if begin >= end:
        return
    consumer.seek(tp, begin)
    position = begin
    deadline = time.monotonic() + timeout_ms / 1000
    while position < end:
        try:
            fetched = consumer.poll_batches(timeout_ms=500)
        except OffsetOutOfRangeError:
            position = max(position, consumer.beginning_offsets([tp])[tp])
            if position >= consumer.end_offsets([tp])[tp]:
                return
            consumer.seek(tp, position)
            continue
        if not fetched:
            if time.monotonic() > deadline:
                raise KafkaliteError(f"reading {tp.topic}-{tp.partition} [{begin}, {end}) stalled at {position}")
            continue
        for item in fetched:
            if item.topic != tp.topic or item.partition != tp.partition:
                continue
            if item.first_offset >= end:
                position = end
                break
            yield item
            position = max(position, item.next_offset)


class WrittenRecords:
    """Records that earlier, unfinished attempts of one write task already put in the topics,
    found by their producer ids; rows matching them are not written again."""

    def __init__(self, options: SinkOptions, attempts: list[AttemptRecord]) -> None:
        self.options = options
        self.producers = {(item.producer_id, item.producer_epoch) for item in attempts if item.producer_id >= 0}
        self.since_ms = min(item.started_ms for item in attempts) - SCAN_CLOCK_MARGIN_MS
        self.by_topic: dict[str, dict[tuple[bytes | None, bytes | None, tuple[Any, ...]], Counter[int]]] = {}

    def _scan(self, topic: str) -> dict[tuple[bytes | None, bytes | None, tuple[Any, ...]], Counter[int]]:
        found: dict[tuple[bytes | None, bytes | None, tuple[Any, ...]], Counter[int]] = {}
        consumer = open_consumer(self.options.bootstrap_servers, "kafkalite-spark-sink-scan",
                                 security=self.options.security)
        try:
            partitions = sorted(consumer.partitions_for_topic(topic) or ())
            tps = [TopicPartition(topic, number) for number in partitions]
            if not tps:
                return found
            ends = consumer.end_offsets(tps)
            starts = consumer.offsets_for_times({tp: max(0, self.since_ms) for tp in tps})
            for tp in tps:
                answer = starts.get(tp)
                if answer is None or answer.offset >= ends[tp]:
                    continue
                # one partition at a time: a partition assigned without a position makes poll fail
                consumer.assign([tp])
                for item in _fetch_range(consumer, tp, answer.offset, ends[tp], timeout_ms=120_000):
                    batch = item.batch
                    if (batch.producer_id, batch.producer_epoch) not in self.producers:
                        continue
                    for record in item.records():
                        content = (record.key, record.value, tuple((name, value) for name, value in record.headers))
                        found.setdefault(content, Counter())[record.partition] += 1
        finally:
            consumer.close()
        log.info("sink scan of %s found %d records of earlier attempts", topic,
                 sum(sum(counts.values()) for counts in found.values()))
        return found

    def remove_written(self, rows: list[SinkRow]) -> tuple[list[SinkRow], int]:
        """The rows not written yet, and how many were dropped."""
        kept: list[SinkRow] = []
        dropped = 0
        for row in rows:
            topic, partition, key, value, headers = row
            if topic not in self.by_topic:
                self.by_topic[topic] = self._scan(topic)
            counts = self.by_topic[topic].get((key, value, headers))
            if counts:
                chosen = partition if partition is not None else next(
                    (number for number, left in counts.items() if left > 0), None)
                if chosen is not None and counts.get(chosen, 0) > 0:
                    counts[chosen] -= 1
                    dropped += 1
                    continue
            kept.append(row)
        return kept, dropped
