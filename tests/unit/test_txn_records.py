"""Transactions in record/ and storage/: control batches (Kafka's EndTransactionMarker bytes),
the ``.txnindex`` format (34-byte entries), its life with its segment, compaction of aborted
data and markers, and what the dump tool prints."""

from __future__ import annotations

import asyncio
import io
import struct
from pathlib import Path

import pytest

from kafkalite.broker.partition import Partition
from kafkalite.errors import CorruptRecordError
from kafkalite.record.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, RecordBatch, build_batch, iter_batches
from kafkalite.record.control import ControlMarker, batch_marker, build_marker_batch, read_marker
from kafkalite.storage import cleaner, files
from kafkalite.storage.log import PartitionLog
from kafkalite.storage.txnindex import ENTRY_SIZE, AbortedTxn, TransactionIndex, decode_entries
from kafkalite.tools import dump_log
from tests.unit.test_log import FakeClock, open_log

DAY_MS = 86_400_000


def test_a_marker_batch_has_kafkas_layout() -> None:
    raw = build_marker_batch(42, 7, ControlMarker(True, 9), timestamp_ms=1_000, partition_leader_epoch=3)
    batch = RecordBatch(raw)
    batch.validate()
    assert batch.attributes == ATTR_TRANSACTIONAL | ATTR_CONTROL
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 7, -1)
    assert (batch.record_count, batch.partition_leader_epoch, batch.max_timestamp) == (1, 3, 1_000)
    [record] = batch.records()
    assert record.key == b"\x00\x00\x00\x01"  # version 0, type 1 = COMMIT
    assert record.value == b"\x00\x00\x00\x00\x00\x09"  # version 0, coordinator epoch 9
    assert read_marker(record.key, record.value) == ControlMarker(True, 9)
    abort = RecordBatch(build_marker_batch(42, 7, ControlMarker(False, 0), 1_000))
    assert abort.records()[0].key == b"\x00\x00\x00\x00"
    assert batch_marker(abort) == ControlMarker(False, 0)


def test_transactional_batches_carry_bit_4() -> None:
    assert RecordBatch(build_batch([b"v"], producer_id=1, producer_epoch=0, base_sequence=0,
                                   transactional=True)).is_transactional
    assert not RecordBatch(build_batch([b"v"])).is_transactional


@pytest.mark.parametrize(("key", "value"), [
    (b"\x00", b"\x00\x00\x00\x00\x00\x01"),  # key too short
    (b"\x00\x00\x00\x05", b"\x00\x00\x00\x00\x00\x01"),  # type 5 is no transaction marker
    (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01"),  # negative key version
    (b"\x00\x00\x00\x01", None),  # no value
    (b"\x00\x00\x00\x01", b"\x00\x00\x00"),  # value too short
])
def test_bad_control_records_are_named_errors(key: bytes, value: bytes | None) -> None:
    with pytest.raises(CorruptRecordError):
        read_marker(key, value)


def test_a_marker_of_a_later_version_is_read_by_its_prefix() -> None:
    assert read_marker(b"\x00\x01\x00\x00", b"\x00\x01\x00\x00\x00\x02extra") == ControlMarker(False, 2)


def test_txnindex_entries_are_34_bytes_big_endian() -> None:
    entry = AbortedTxn(producer_id=5, first_offset=10, last_offset=20, last_stable_offset=21)
    assert entry.encode() == struct.pack(">hqqqq", 0, 5, 10, 20, 21)
    assert ENTRY_SIZE == len(entry.encode()) == 34
    assert decode_entries(entry.encode() * 2) == [entry, entry]
    with pytest.raises(CorruptRecordError):
        decode_entries(entry.encode()[:-1])
    with pytest.raises(CorruptRecordError):
        decode_entries(struct.pack(">hqqqq", 1, 5, 10, 20, 21))  # unknown version


def test_txnindex_appends_truncates_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    assert index.load() and not path.exists()  # no file until the first entry
    entries = [AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 3, 8, 9), AbortedTxn(1, 9, 12, 13)]
    for entry in entries:
        index.append(entry)
    with pytest.raises(CorruptRecordError):
        index.append(AbortedTxn(3, 0, 12, 13))  # markers come in offset order
    assert index.collect(5, 9) == [entries[1]]
    assert index.collect(0, 1) == [entries[0]]
    index.truncate_to(8)
    assert index.entries == entries[:1] and path.stat().st_size == ENTRY_SIZE
    index.close()
    reloaded = TransactionIndex(path)
    assert reloaded.load() and reloaded.entries == entries[:1]
    path.write_bytes(b"\x00" * 7)
    damaged = TransactionIndex(path)
    assert not damaged.load() and damaged.stale and damaged.entries == []


def leader(partition_log: PartitionLog, clock: FakeClock) -> Partition:
    partition = Partition("topic", 0, partition_log, 1, clock)
    partition.make_leader(0, [1], [1], 0, 0)
    return partition


def append(partition: Partition, records: bytes) -> None:
    asyncio.run(partition.append_as_leader(records, 1))


def txn(producer_id: int, sequence: int, pairs: list[tuple[bytes, bytes]], timestamp: int) -> bytes:
    return build_batch([value for _, value in pairs], keys=[key for key, _ in pairs], timestamps=timestamp,
                       producer_id=producer_id, producer_epoch=0, base_sequence=sequence, transactional=True)


def test_the_txnindex_lives_and_dies_with_its_segment(tmp_path: Path) -> None:
    clock = FakeClock()
    partition_log = open_log(tmp_path / "topic-0", clock, segment_bytes=400)
    partition = leader(partition_log, clock)
    append(partition, txn(7, 0, [(b"k", b"v" * 50)], clock.now))
    partition.append_marker(7, 0, ControlMarker(False, 1))
    first_index = files.segment_path(partition_log.directory, 0, files.TXN_INDEX_SUFFIX)
    assert decode_entries(first_index.read_bytes()) == [AbortedTxn(7, 0, 1, 2)]
    for round_number in range(10):  # roll a few segments
        append(partition, build_batch([b"x" * 100], timestamps=clock.now))
        del round_number
    assert len(partition_log.segments) > 1
    partition_log.update_high_watermark(partition_log.log_end_offset)
    assert partition_log.collect_aborted_txns(0, partition_log.log_end_offset) == [AbortedTxn(7, 0, 1, 2)]
    assert partition_log.collect_aborted_txns(2, partition_log.log_end_offset) == []
    partition_log.delete_records_before(partition_log.segments[1].base_offset)
    partition_log.delete_segments_below_start()
    clock.advance(DAY_MS)
    partition_log.delete_expired_files()
    assert not first_index.exists()
    assert not list(partition_log.directory.glob("*.txnindex*"))


def contents(partition_log: PartitionLog) -> list[tuple[int, bool, bytes | None]]:
    """(offset, in a control batch, value) of every record."""
    return [(record.offset, batch.is_control, record.value) for batch in partition_log.batches()
            for record in batch.records()]


def test_compaction_removes_aborted_data_then_the_marker_after_delete_retention(tmp_path: Path) -> None:
    clock = FakeClock()
    partition_log = open_log(tmp_path / "topic-0", clock, cleanup_policy="compact", segment_bytes=300,
                             delete_retention_ms=DAY_MS)
    partition = leader(partition_log, clock)
    append(partition, txn(7, 0, [(b"a", b"aborted-a")], clock.now))  # 0
    append(partition, txn(8, 0, [(b"b", b"committed-b")], clock.now))  # 1
    partition.append_marker(7, 0, ControlMarker(False, 1))  # 2: abort of producer 7
    partition.append_marker(8, 0, ControlMarker(True, 1))  # 3: commit of producer 8
    append(partition, build_batch([b"plain-a"], keys=[b"a"], timestamps=clock.now))  # 4
    append(partition, txn(9, 0, [(b"c", b"open-c")], clock.now))  # 5: undecided
    for index in range(6):  # later segments (the active one is never cleaned)
        append(partition, build_batch([b"filler-%d" % index], keys=[b"f%d" % index], timestamps=clock.now))
    partition_log.update_high_watermark(partition_log.log_end_offset)
    assert partition_log.first_unstable_offset == 5

    result = cleaner.clean(partition_log, checkpoint=0, force=True)
    assert result.cleaned
    after = contents(partition_log)
    assert (0, False, b"aborted-a") not in after  # aborted data is gone
    assert (1, False, b"committed-b") in after and (4, False, b"plain-a") in after
    assert (5, False, b"open-c") in after  # past the first unstable offset: never cleaned
    # Both markers stay: the abort marker's data was removed only now, the commit's data remains.
    assert [offset for offset, control, _ in after if control] == [2, 3]
    assert partition_log.collect_aborted_txns(0, 5) == [AbortedTxn(7, 0, 2, 1)]  # 8 was still open at 1

    clock.advance(2 * DAY_MS)
    cleaner.clean(partition_log, checkpoint=result.new_checkpoint, force=True)
    after = contents(partition_log)
    # The abort marker's transaction has no data left and delete.retention.ms passed: removed,
    # with its .txnindex entry; the commit marker stays while its transaction's record does.
    assert [offset for offset, control, _ in after if control] == [3]
    assert partition_log.collect_aborted_txns(0, 5) == []


def test_the_dump_tool_prints_markers_flags_and_txnindex_entries(tmp_path: Path) -> None:
    clock = FakeClock()
    partition_log = open_log(tmp_path / "topic-0", clock)
    partition = leader(partition_log, clock)
    append(partition, txn(7, 0, [(b"k", b"v")], clock.now))
    partition.append_marker(7, 0, ControlMarker(False, 4))
    append(partition, txn(7, 1, [(b"k", b"w")], clock.now))
    partition.append_marker(7, 0, ControlMarker(True, 4))
    partition_log.close()
    out = io.StringIO()
    log_path = files.segment_path(partition_log.directory, 0, files.LOG_SUFFIX)
    txn_path = files.segment_path(partition_log.directory, 0, files.TXN_INDEX_SUFFIX)
    assert dump_log.main(["--files", f"{log_path},{txn_path}", "--deep-iteration"], out) == 0
    text = out.getvalue()
    assert text.count("isTransactional: true") == 4
    assert text.count("isControl: true") == 2
    assert "endTxnMarker: ABORT coordinatorEpoch: 4" in text
    assert "endTxnMarker: COMMIT coordinatorEpoch: 4" in text
    assert "version: 0 producerId: 7 firstOffset: 0 lastOffset: 1 lastStableOffset: 2" in text
    assert [batch.is_control for batch in iter_batches(log_path.read_bytes())] == [False, True, False, True]


def test_the_binary_fetch_response_carries_aborted_transactions_only_when_asked() -> None:
    from kafkalite import protocol
    from kafkalite.errors import InvalidRequestError

    plain = [protocol.FetchResult("t", 0, 0, 10, 10, 0, b""), protocol.FetchResult("t", 1, 0, 5, 5, 0, b"")]
    frame = b"".join(protocol.encode_fetch_response(plain))
    assert [item.aborted_transactions for item in protocol.decode_fetch_response(frame)] == [None, None]
    committed = [protocol.FetchResult("t", 0, 0, 10, 4, 0, b"", aborted_transactions=[(7, 1), (9, 3)]),
                 protocol.FetchResult("t", 1, 0, 5, 5, 0, b"", aborted_transactions=[])]
    with_trailer = b"".join(protocol.encode_fetch_response(committed))
    assert with_trailer.startswith(frame[:4]) and len(with_trailer) > len(frame)
    decoded = protocol.decode_fetch_response(with_trailer)
    assert [item.aborted_transactions for item in decoded] == [[(7, 1), (9, 3)], []]
    assert decoded[0].last_stable_offset == 4
    with pytest.raises(InvalidRequestError):
        protocol.decode_fetch_response(with_trailer[:-3])
    bad_index = frame + struct.pack(">iii", 1, 5, 0)  # a result that does not exist
    with pytest.raises(InvalidRequestError):
        protocol.decode_fetch_response(bad_index)


def test_the_consumer_drops_aborted_batches_and_control_batches() -> None:
    from types import SimpleNamespace

    from kafkalite.client.fetcher import Fetcher

    def at(offset: int, raw: bytes) -> bytes:
        stamped = bytearray(raw)
        stamped[0:8] = offset.to_bytes(8, "big")
        return bytes(stamped)

    def data(producer_id: int, offset: int, value: bytes) -> bytes:
        return at(offset, build_batch([value], producer_id=producer_id, producer_epoch=0, base_sequence=offset,
                                      transactional=True))

    answer = b"".join([
        data(7, 0, b"aborted-7"),  # producer 7's aborted transaction starts at 0
        data(8, 1, b"committed-8"),
        at(2, build_marker_batch(7, 0, ControlMarker(False, 1), 0)),
        data(7, 3, b"committed-7"),  # a later transaction of producer 7, committed
        at(4, build_marker_batch(8, 0, ControlMarker(True, 1), 0)),
        at(5, build_marker_batch(7, 0, ControlMarker(True, 1), 0)),
    ])
    fetcher = SimpleNamespace(check_crcs=True)
    batches, corrupt, end = Fetcher._batches(fetcher, answer, 0, 6, [(7, 0)])  # type: ignore[arg-type]
    assert corrupt is None and end == 6
    assert [batch.records()[0].value for batch in batches] == [b"committed-8", b"committed-7"]
    uncommitted, _, end = Fetcher._batches(fetcher, answer, 0, 6, None)  # type: ignore[arg-type]
    assert [batch.records()[0].value for batch in uncommitted] == [b"aborted-7", b"committed-8", b"committed-7"]
    markers = at(4, build_marker_batch(8, 0, ControlMarker(True, 1), 0)) \
        + at(5, build_marker_batch(7, 0, ControlMarker(True, 1), 0))
    only_markers, _, end = Fetcher._batches(fetcher, markers, 4, 6, [])  # type: ignore[arg-type]
    assert only_markers == [] and end == 6  # the position moves past markers alone


def test_an_interrupted_compaction_swap_gets_its_txnindex_rebuilt(tmp_path: Path) -> None:
    clock = FakeClock()
    directory = tmp_path / "topic-0"
    partition_log = open_log(directory, clock, segment_bytes=300)
    partition = leader(partition_log, clock)
    append(partition, txn(7, 0, [(b"k", b"v" * 40)], clock.now))
    partition.append_marker(7, 0, ControlMarker(False, 1))
    for index in range(6):
        append(partition, build_batch([b"x" * 60], keys=[b"f%d" % index], timestamps=clock.now))
    entries = partition_log.collect_aborted_txns(0, partition_log.log_end_offset)
    assert entries == [AbortedTxn(7, 0, 1, 2)]
    partition_log.close()
    # The cleaner's output was renamed .swap (its .txnindex too) when the broker died: the log
    # file replaces the segment on open; its indexes are rebuilt, the .txnindex by the replay.
    log_file = files.segment_path(directory, 0, files.LOG_SUFFIX)
    files.segment_path(directory, 0, files.LOG_SUFFIX, files.SWAP_SUFFIX).write_bytes(log_file.read_bytes())
    txn_file = files.segment_path(directory, 0, files.TXN_INDEX_SUFFIX)
    txn_file.rename(files.segment_path(directory, 0, files.TXN_INDEX_SUFFIX, files.SWAP_SUFFIX))
    reopened = open_log(directory, clock, segment_bytes=300)
    replayed = Partition("topic", 0, reopened, 1, clock)
    replayed.rebuild_producer_state()
    assert decode_entries(txn_file.read_bytes()) == entries
    assert not list(directory.glob("*.swap"))
