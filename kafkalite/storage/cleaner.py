"""Log compaction: one cleaning pass over one partition log (``cleanup.policy=compact``).

The algorithm, separated from its scheduling (the broker's LogManager decides when to run it):

1. The cleanable range ends at the first of: the active segment, the high watermark, and the
   first segment newer than ``min.compaction.lag.ms``. The dirty part starts at the cleaner
   checkpoint (``cleaner-offset-checkpoint``): everything below it was cleaned before.
2. Build a map key → last offset over the dirty part.
3. Recopy the cleanable segments, grouped so that each output stays under ``segment.bytes``,
   keeping a record only when no later offset exists for its key. Offsets are preserved (gaps
   appear); a batch that lost records is rebuilt with the same base offset, span, producer
   fields and codec; a batch that lost nothing is copied byte for byte.
4. Tombstones (null values) are kept until they have been in the clean part for
   ``delete.retention.ms`` (measured from their segment's largest timestamp), then dropped, so
   a consumer reading from the start within that window sees every delete.
5. Each output is written as ``<base>.log.cleaned``, then swapped in crash-safely by
   :meth:`~kafkalite.storage.log.PartitionLog.replace_segments`.

Transactions follow Kafka's rules: the cleanable range also ends at the first offset of an
undecided transaction (the log's ``first_unstable_offset``); the batches of aborted
transactions (known from the ``.txnindex`` files) are removed and never enter the key map;
control batches never enter it either. A marker is kept while its transaction still has data
in the log — an abort marker whose aborted data this pass removes stays (with its
``.txnindex`` entry) until a later pass — and a marker whose transaction has no data left is
removed like a tombstone, once its segment is older than ``delete.retention.ms``.

Concurrency: reads only inactive segments (immutable) without the log's lock; the swap takes
the lock and is abandoned when retention or truncation changed the segments meanwhile.
Run it on a worker thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kafkalite.record.batch import BatchBuilder, Record, RecordBatch
from kafkalite.record.control import batch_marker
from kafkalite.storage import files
from kafkalite.storage.log import PartitionLog
from kafkalite.storage.segment import INT32_MAX, Segment
from kafkalite.storage.txnindex import AbortedTxn

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CleanResult:
    """What one pass did; ``new_checkpoint`` is where the next pass's dirty part starts."""

    cleaned: bool
    new_checkpoint: int
    bytes_before: int = 0
    bytes_after: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    markers_removed: int = 0


class _Transactions:
    """Which batches of one pass belong to aborted transactions, and which markers may go
    (Kafka's CleanedTransactionMetadata). Fed every batch in offset order."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda entry: entry.first_offset)
        self._by_marker = {(entry.producer_id, entry.last_offset): entry for entry in aborted}
        self._aborting: set[int] = set()  # producers inside an aborted transaction
        self._observed: set[int] = set()  # ... whose aborted data this pass saw (and removes)
        self._committing: set[int] = set()  # producers with kept transactional data since their last marker

    def _advance(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            self._aborting.add(self._pending.pop(0).producer_id)

    def is_aborted(self, batch: RecordBatch) -> bool:
        """For a data batch: True when it belongs to an aborted transaction."""
        self._advance(batch.last_offset)
        if not batch.is_transactional:
            return False
        if batch.producer_id in self._aborting:
            self._observed.add(batch.producer_id)
            return True
        self._committing.add(batch.producer_id)
        return False

    def marker(self, batch: RecordBatch) -> tuple[bool, AbortedTxn | None]:
        """For a control batch: (whether it may be discarded — its transaction has no data
        left —, the ``.txnindex`` entry to keep with it when it stays)."""
        self._advance(batch.last_offset)
        marker = batch_marker(batch)
        producer_id = batch.producer_id
        if marker is None:
            return True, None
        if marker.committed:
            had_data = producer_id in self._committing
            self._committing.discard(producer_id)
            return not had_data, None
        self._aborting.discard(producer_id)
        entry = self._by_marker.get((producer_id, batch.base_offset))
        if producer_id in self._observed:
            self._observed.discard(producer_id)
            return False, entry
        return True, entry


def dirty_ratio(partition_log: PartitionLog, checkpoint: int) -> float:
    """Dirty bytes / total bytes over the inactive segments."""
    segments = partition_log.segments[:-1]
    total = sum(segment.size for segment in segments)
    if total == 0:
        return 0.0
    dirty = sum(segment.size for segment in segments if segment.next_offset > checkpoint)
    return dirty / total


def clean(partition_log: PartitionLog, checkpoint: int, *, force: bool = False) -> CleanResult:
    """Run one compaction pass; returns the result (``cleaned`` False when nothing qualified)."""
    config = partition_log.config
    now = partition_log.clock()
    with partition_log.lock:
        inactive = list(partition_log.segments[:-1])
        high_watermark = partition_log.high_watermark
        log_start = partition_log.log_start_offset
    checkpoint = max(checkpoint, log_start)
    cleanable: list[Segment] = []
    unstable = partition_log.first_unstable_offset
    for segment in inactive:
        if segment.next_offset > high_watermark or (unstable is not None and segment.next_offset > unstable):
            break
        if config.min_compaction_lag_ms > 0 and now - segment.largest_timestamp() < config.min_compaction_lag_ms:
            break
        cleanable.append(segment)
    if not cleanable or (cleanable[-1].next_offset <= checkpoint and not force):
        return CleanResult(False, checkpoint)
    if not force:
        ratio = dirty_ratio(partition_log, checkpoint)
        overdue = any(now - segment.largest_timestamp() > config.max_compaction_lag_ms
                      for segment in cleanable if segment.next_offset > checkpoint)
        if ratio < config.min_cleanable_dirty_ratio and not overdue:
            return CleanResult(False, checkpoint)
    end_offset = max(cleanable[-1].next_offset, checkpoint)

    aborted = partition_log.collect_aborted_txns(cleanable[0].base_offset, end_offset)
    latest: dict[bytes | None, int] = {}
    transactions = _Transactions(aborted)
    for segment in cleanable:
        if segment.next_offset <= checkpoint:
            continue
        for _position, batch in segment.scan(validate=True):
            if batch.is_control:
                transactions.marker(batch)
                continue
            if transactions.is_aborted(batch) or batch.last_offset < checkpoint:
                continue
            for record in batch.records():
                if record.offset >= checkpoint:
                    latest[record.key] = record.offset

    tombstone_horizon = now - config.delete_retention_ms
    totals = {"before": 0, "after": 0, "records": 0, "tombstones": 0, "markers": 0}
    transactions = _Transactions(aborted)
    for group in _group_segments(cleanable, config.segment_bytes):
        output = _clean_group(partition_log, group, latest, checkpoint, tombstone_horizon, totals, transactions)
        with partition_log.lock:
            if partition_log.closed or any(segment not in partition_log.segments for segment in group):
                output.delete_files()
                log.info("%s: segments changed during cleaning; pass abandoned", partition_log.name)
                return CleanResult(False, checkpoint)
            partition_log.replace_segments(group, output)
    log.info("%s: compacted %d -> %d bytes, %d records, %d tombstones and %d transaction markers removed",
             partition_log.name, totals["before"], totals["after"], totals["records"], totals["tombstones"],
             totals["markers"])
    return CleanResult(True, end_offset, totals["before"], totals["after"], totals["records"], totals["tombstones"],
                       totals["markers"])


def _group_segments(segments: list[Segment], max_bytes: int) -> list[list[Segment]]:
    groups: list[list[Segment]] = []
    current: list[Segment] = []
    size = 0
    for segment in segments:
        span_ok = not current or segment.next_offset - 1 - current[0].base_offset <= INT32_MAX
        if current and (size + segment.size > max_bytes or not span_ok):
            groups.append(current)
            current, size = [], 0
        current.append(segment)
        size += segment.size
    if current:
        groups.append(current)
    return groups


def _clean_group(partition_log: PartitionLog, group: list[Segment], latest: dict[bytes | None, int],
                 checkpoint: int, tombstone_horizon: int, totals: dict[str, int],
                 transactions: _Transactions) -> Segment:
    config = partition_log.config
    base_offset = group[0].base_offset
    for kind in (files.LOG_SUFFIX, files.TXN_INDEX_SUFFIX):
        files.segment_path(partition_log.directory, base_offset, kind, files.CLEANED_SUFFIX).unlink(missing_ok=True)
    output = Segment(partition_log.directory, base_offset, suffix=files.CLEANED_SUFFIX,
                     index_interval_bytes=config.index_interval_bytes,
                     max_index_entries=config.segment_index_bytes // 8,
                     created_ms=max(segment.created_ms for segment in group))
    try:
        _copy_group(group, output, latest, checkpoint, tombstone_horizon, totals, transactions)
    except BaseException:
        output.delete_files()  # a failed pass (a full disk) leaves no .cleaned file behind
        raise
    totals["after"] += output.size
    return output


def _copy_group(group: list[Segment], output: Segment, latest: dict[bytes | None, int], checkpoint: int,
                tombstone_horizon: int, totals: dict[str, int], transactions: _Transactions) -> None:
    for segment in group:
        totals["before"] += segment.size
        drop_tombstones = segment.largest_timestamp() < tombstone_horizon
        for _position, batch in segment.scan(validate=True):
            if batch.is_control:
                discardable, entry = transactions.marker(batch)
                if discardable and drop_tombstones and batch.last_offset < checkpoint:
                    totals["markers"] += 1
                    continue
                output.append(batch.raw(), batch.base_offset, batch.next_offset, batch.max_timestamp,
                              batch.last_offset)
                if entry is not None:
                    output.txn_index.append(entry)
                continue
            if transactions.is_aborted(batch):
                totals["records"] += batch.record_count
                continue
            records = batch.records()
            kept: list[Record] = []
            for record in records:
                newest = latest.get(record.key)
                if newest is not None and newest > record.offset:
                    totals["records"] += 1
                    continue
                if record.value is None and drop_tombstones and record.offset < checkpoint:
                    totals["tombstones"] += 1
                    continue
                kept.append(record)
            if not kept:
                continue
            data = batch.raw() if len(kept) == len(records) else _rebuild(batch, kept)
            output.append(data, batch.base_offset, batch.next_offset,
                          max(record.timestamp for record in kept), kept[-1].offset)


def _rebuild(batch: RecordBatch, kept: list[Record]) -> bytes:
    builder = BatchBuilder(
        compression=batch.compression,
        base_offset=batch.base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        timestamp_type=batch.timestamp_type,
        transactional=batch.is_transactional,
    )
    for record in kept:
        builder.append(record.timestamp, record.key, record.value, record.headers,
                       offset_delta=record.offset - batch.base_offset)
    return builder.build(last_offset_delta=batch.last_offset_delta)
