"""Cross-checks against an independent implementation of Kafka's v2 batch format (kafka-python).

Batches built by kafka-python decode with our reader; ours decode with kafka-python's reader,
for every codec both sides support. A failure here means we drifted from Kafka's format.
"""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafkalite.record.batch import Record, RecordBatch, build_batch, iter_batches
from kafkalite.record.codec import Compression

CODECS = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]

ROWS = [
    (b"key-%d" % index if index % 3 else None,
     (b"value-%d-" % index) * (index % 7 + 1) if index % 5 else None,
     [("trace", b"t%d" % index)] if index % 4 == 0 else [],
     1_700_000_000_000 + index * 13)
    for index in range(200)
]


def _kafka_python_batch(codec: int, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=producer_epoch,
                                        base_sequence=base_sequence, batch_size=1 << 20)
    for offset, (key, value, headers, timestamp) in enumerate(ROWS):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=headers)
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.name)
def test_kafka_python_batches_decode_with_our_reader(codec: Compression) -> None:
    data = _kafka_python_batch(codec, producer_id=77, producer_epoch=3, base_sequence=10)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.compression == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 10)
    assert batch.record_count == len(ROWS)
    expected = [Record(offset, timestamp, key, value, tuple(headers))
                for offset, (key, value, headers, timestamp) in enumerate(ROWS)]
    assert batch.records() == expected


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.name)
def test_our_batches_decode_with_kafka_python(codec: Compression) -> None:
    data = build_batch([row[1] for row in ROWS], keys=[row[0] for row in ROWS], timestamps=[row[3] for row in ROWS],
                       headers=[row[2] for row in ROWS], compression=codec, base_offset=500,
                       partition_leader_epoch=4, producer_id=9, producer_epoch=1, base_sequence=0)
    records = MemoryRecords(data)
    batch = records.next_batch()
    assert batch.validate_crc()
    assert batch.base_offset == 500 and batch.leader_epoch == 4
    assert batch.producer_id == 9 and batch.base_sequence == 0
    decoded = [(record.offset, record.timestamp, record.key, record.value, list(record.headers)) for record in batch]
    assert decoded == [(500 + offset, timestamp, key, value, headers)
                       for offset, (key, value, headers, timestamp) in enumerate(ROWS)]
    assert records.next_batch() is None


def test_kafka_python_bytes_equal_ours_for_uncompressed_batches() -> None:
    ours = build_batch([row[1] for row in ROWS], keys=[row[0] for row in ROWS], timestamps=[row[3] for row in ROWS],
                       headers=[row[2] for row in ROWS], partition_leader_epoch=0)
    assert ours == _kafka_python_batch(Compression.NONE)


def test_segment_of_kafka_python_batches_reads_back_through_our_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from kafkalite.config import LogConfig
    from kafkalite.storage.log import PartitionLog

    partition_log = PartitionLog(tmp_path / "interop-0", "interop", 0, LogConfig())
    for codec in CODECS:
        partition_log.append_as_leader(_kafka_python_batch(codec), leader_epoch=0)
    partition_log.update_high_watermark(partition_log.log_end_offset)
    fetched = partition_log.read(0, 10 << 20).records
    offsets = []
    reader = MemoryRecords(fetched)
    while (batch := reader.next_batch()) is not None:
        assert batch.validate_crc()
        offsets.extend(record.offset for record in batch)
    assert offsets == list(range(4 * len(ROWS)))
    assert sum(batch.record_count for batch in iter_batches(fetched)) == 4 * len(ROWS)
    partition_log.close()
