"""Reading: executor-side range reads and the batch and streaming readers Spark drives.

Concurrency: see the package docstring (readers plan on the driver; ``read`` runs on executors
from pickled copies, each opening and closing its own consumer).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from kafkalite.client.types import TopicPartition
from kafkalite.errors import KafkaTimeoutError, OffsetOutOfRangeError
from kafkalite.spark.arrow import ArrowBatchDecoder
from kafkalite.spark.clients import open_consumer
from kafkalite.spark.formats import typed_batch
from kafkalite.spark.offsets import (
    ClusterClient,
    OffsetRangePartition,
    Offsets,
    offsets_from_json,
    offsets_to_json,
    plan_partitions,
    rate_limit,
)
from kafkalite.spark.options import (
    IDLE_CHECK_MS,
    YIELD_BYTES,
    YIELD_ROWS,
    SourceOptions,
    SparkOptionError,
    report_data_loss,
)
from kafkalite.spark.pauses import pause_for_tests

# --- executor-side reading ----------------------------------------------------------------------


def read_offset_range(part: OffsetRangePartition) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``part`` as pyarrow RecordBatches (executor side), several record
    batches combined into one of about YIELD_ROWS rows (Spark handles big batches faster).

    Data that is gone (below the log start, or above a truncated end) follows failOnDataLoss.
    The consumer reads with the source's isolation level: under read_committed the records of
    aborted transactions are not returned. Offsets no returned batch covers (transaction markers,
    aborted records) are passed by following the consumer's own position.
    """
    if part.from_offset >= part.until_offset:
        return
    settings = part.settings
    tp = TopicPartition(part.topic, part.partition)
    decoder = ArrowBatchDecoder(part.topic, part.partition, settings.include_headers)
    consumer = open_consumer(settings.bootstrap_servers, "kafkalite-spark-reader", settings.isolation_level,
                             settings.security)
    try:
        consumer.assign([tp])
        consumer.seek(tp, part.from_offset)
        position = part.from_offset
        idle_since = time.monotonic()
        pending: list[pa.RecordBatch] = []
        pending_rows = pending_bytes = 0
        while position < part.until_offset:
            try:
                fetched = consumer.poll_batches(timeout_ms=500)
            except OffsetOutOfRangeError:
                position = _after_out_of_range(consumer, tp, position, part)
                if position < part.until_offset:
                    consumer.seek(tp, position)
                continue
            before = position
            for item in fetched:
                low = max(item.first_offset, position)
                high = min(item.next_offset, part.until_offset)
                if low >= high:
                    continue
                decoded = decoder.decode(item.batch, low, high)
                position = high
                if decoded is not None:
                    pending.append(decoded)
                    pending_rows += decoded.num_rows
                    pending_bytes += decoded.nbytes
                if position >= part.until_offset:
                    break
            if position < part.until_offset:
                # control batches (transaction markers) and, under read_committed, aborted records
                # take offsets no handed-out batch covers; the consumer's position moves past them,
                # also in a poll that hands out nothing (a fetch of nothing but such batches)
                position = max(position, min(consumer.position(tp), part.until_offset))
            if position > before:
                idle_since = time.monotonic()
            else:
                idle_ms = (time.monotonic() - idle_since) * 1000
                if idle_ms >= min(IDLE_CHECK_MS, settings.poll_timeout_ms):
                    position = _after_stall(consumer, tp, position, part, idle_ms >= settings.poll_timeout_ms)
                    if idle_ms >= settings.poll_timeout_ms:
                        idle_since = time.monotonic()
            if pending_rows >= YIELD_ROWS or pending_bytes >= YIELD_BYTES:
                yield _typed(pa.concat_batches(pending) if len(pending) > 1 else pending[0], part)
                pending, pending_rows, pending_bytes = [], 0, 0
        if pending:
            yield _typed(pa.concat_batches(pending) if len(pending) > 1 else pending[0], part)
    finally:
        consumer.close()


def _typed(batch: pa.RecordBatch, part: OffsetRangePartition) -> pa.RecordBatch:
    """The batch with its values decoded when the source reads typed values (valueFormat)."""
    value_format = part.settings.value_format
    return batch if value_format is None else typed_batch(batch, value_format, part.topic, part.partition)


def _end_of(part: OffsetRangePartition) -> str:
    """What the consumer's end offset is under the range's isolation level."""
    return "the last stable offset is" if part.settings.isolation_level == "read_committed" else "the log ends at"


def _after_out_of_range(consumer: Any, tp: TopicPartition, position: int, part: OffsetRangePartition) -> int:
    """Where to go on after the broker said ``position`` is out of range (below the log start,
    or past the log end: a fetch of an offset up to the log end, even one held back by an open
    transaction, is not out of range)."""
    begin: int = consumer.beginning_offsets([tp])[tp]
    end: int = consumer.end_offsets([tp])[tp]
    if position < begin:
        report_data_loss(part.settings.fail_on_data_loss,
                         f"cannot read offsets [{position}, {min(begin, part.until_offset)}) of "
                         f"{tp.topic}-{tp.partition}: the log starts at {begin} now")
        return min(begin, part.until_offset)
    report_data_loss(part.settings.fail_on_data_loss,
                     f"cannot read offsets [{max(position, end)}, {part.until_offset}) of {tp.topic}-{tp.partition}: "
                     f"{_end_of(part)} {end} now (the log was truncated)")
    return part.until_offset


def _after_stall(consumer: Any, tp: TopicPartition, position: int, part: OffsetRangePartition,
                 timed_out: bool) -> int:
    """Nothing arrived for a while: the log may have been truncated below the range's end (data
    loss), an open transaction may hold a read_committed read below it (an ``endingOffsets``
    past the last stable offset), or a broker is slow (give up after pollTimeoutMs)."""
    end = consumer.end_offsets([tp])[tp]
    reason = f"{_end_of(part)} {end}"
    if end <= position:
        high_watermark = consumer.highwater(tp) if part.settings.isolation_level == "read_committed" else None
        if high_watermark is None or high_watermark <= position:
            report_data_loss(part.settings.fail_on_data_loss,
                             f"offsets [{position}, {part.until_offset}) of {tp.topic}-{tp.partition} are not "
                             f"there: {reason} now")
            return part.until_offset
        reason = (f"the range ends at {part.until_offset}: an open transaction holds read_committed reads at the "
                  f"last stable offset {end} (the high watermark is {high_watermark})")
    if not timed_out:
        return position
    raise KafkaTimeoutError(f"no records of {tp.topic}-{tp.partition} from offset {position} arrived within "
                            f"{part.settings.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs) although {reason}")


# --- readers ---------------------------------------------------------------------------------------


class KafkaliteBatchReader(DataSourceReader):
    """Batch reads: partitions() plans on the driver, read() runs on executors."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = self.options
        cluster = ClusterClient(options.settings.bootstrap_servers, options.settings.isolation_level,
                                options.settings.security)
        try:
            cluster.check_assigned(options.subscription)
            partitions = cluster.partitions(options.subscription)
            start = cluster.resolve(options.starting, partitions, starting=True, strategy=options.starting_strategy)
            end = cluster.resolve(options.ending, partitions, starting=False)
        finally:
            cluster.close()
        for tp in partitions:
            if start[tp] > end[tp]:
                raise SparkOptionError(options.starting.option,
                                       f"the starting offset {start[tp]} of {tp.topic}-{tp.partition} is after the "
                                       f"ending offset {end[tp]} ({options.ending.option})")
        return list(plan_partitions(start, end, options.settings, options.min_partitions,
                                    options.max_records_per_partition))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRangePartition):
            return iter(())  # Spark hands one empty partition to a plan without partitions
        return read_offset_range(partition)


class KafkaliteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads. Planning methods run in one long-lived driver process; read() runs on
    executors from a pickled copy (the cluster client and timing state are not pickled)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._cluster: ClusterClient | None = None
        self._available_now_target: Offsets | None = None
        self._last_trigger_ms = 0.0
        self._latest_seen: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_cluster": None, "_available_now_target": None, "_last_trigger_ms": 0.0,
                "_latest_seen": None}

    @property
    def cluster(self) -> ClusterClient:
        if self._cluster is None:
            self._cluster = ClusterClient(self.options.settings.bootstrap_servers,
                                          self.options.settings.isolation_level, self.options.settings.security)
        return self._cluster

    # -- planning (driver) ------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        options = self.options
        self.cluster.check_assigned(options.subscription)
        partitions = self.cluster.partitions(options.subscription)
        start = self.cluster.resolve(options.starting, partitions, starting=True, strategy=options.starting_strategy)
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        partitions = self.cluster.partitions(self.options.subscription)
        self._available_now_target = self.cluster.latest(partitions)

    def _latest(self) -> Offsets:
        if self._available_now_target is not None:
            return dict(self._available_now_target)
        partitions = self.cluster.partitions(self.options.subscription)
        return self.cluster.latest(partitions)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offsets_from_json(start)
        latest = self._latest()
        self._latest_seen = latest
        if isinstance(limit, ReadAllAvailable):
            return offsets_to_json(latest)
        new_partitions = [tp for tp in latest if tp not in begin]
        earliest_of_new = self.cluster.earliest(new_partitions) if new_partitions else {}
        minimum = self.options.min_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            minimum = limit.min_rows
        if minimum is not None and self._available_now_target is None and self._delay(minimum, begin, latest,
                                                                                       earliest_of_new):
            return start
        if isinstance(limit, ReadMaxRows):
            return offsets_to_json(rate_limit(limit.max_rows, begin, latest, earliest_of_new))
        return offsets_to_json(latest)

    def _delay(self, minimum: int, begin: Offsets, latest: Offsets, earliest_of_new: Offsets) -> bool:
        """minOffsetsPerTrigger: wait for more records unless maxTriggerDelay has passed."""
        now = time.time() * 1000
        if now - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        available = sum(max(0, until - begin.get(tp, earliest_of_new.get(tp, until))) for tp, until in latest.items())
        if available < minimum:
            return True
        self._last_trigger_ms = now
        return False

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return offsets_to_json(self._latest_seen) if self._latest_seen is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        pause_for_tests("source-planned")
        options = self.options
        begin = offsets_from_json(start)
        until = offsets_from_json(end)
        fail = options.settings.fail_on_data_loss
        gone = sorted(set(begin) - set(until))
        if gone:
            report_data_loss(fail, "partitions " + ", ".join(f"{tp.topic}-{tp.partition}" for tp in gone)
                             + " are gone")
        new = [tp for tp in until if tp not in begin]
        if new:
            earliest = self.cluster.earliest(new)
            for tp in new:
                if earliest[tp] != 0:
                    report_data_loss(fail, f"added partition {tp.topic}-{tp.partition} starts from {earliest[tp]} "
                                           f"instead of 0")
                begin[tp] = earliest[tp]
        for tp in sorted(until):
            if until[tp] < begin[tp]:
                report_data_loss(fail, f"the offset of {tp.topic}-{tp.partition} went back from {begin[tp]} to "
                                       f"{until[tp]}")
                begin[tp] = until[tp]
        return list(plan_partitions({tp: begin[tp] for tp in until}, until, options.settings, options.min_partitions,
                                    options.max_records_per_partition))

    def commit(self, end: dict[str, Any]) -> None:
        """Spark checkpoints offsets itself; nothing to keep here."""

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    # -- executors ------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRangePartition):
            return iter(())
        return read_offset_range(partition)


class RejectedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream reader for options that only fail for streaming queries: every planning call
    raises the option error (driver side)."""

    def __init__(self, error: SparkOptionError) -> None:
        self.error = error

    def initialOffset(self) -> dict[str, Any]:
        raise self.error

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        raise self.error

    def getDefaultReadLimit(self) -> ReadLimit:
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        raise self.error

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing was read."""

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise self.error
