"""The consumer's fetch state on damaged data (no broker): records before the damage come out,
then every take raises CorruptRecordError naming the partition and offset, the position stays
at the damaged batch, nothing past it is fetched, and a seek clears it."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest

from kafkalite.client.fetcher import CompletedFetch, Fetcher, PartitionState, take_batches, take_records
from kafkalite.client.types import TopicPartition
from kafkalite.errors import CorruptRecordError
from kafkalite.record.batch import CRC_START, build_batch, crc32c

TP = TopicPartition("t", 0)


def good(base_offset: int, count: int) -> bytes:
    return build_batch([b"v%d" % (base_offset + index) for index in range(count)], timestamps=5,
                       base_offset=base_offset)


def bad_records(base_offset: int) -> bytes:
    """A batch with a CRC that matches but a header count of 21 in a record without headers."""
    batch = bytearray(build_batch([b"bad"], timestamps=5, base_offset=base_offset))
    batch[-1] = 42
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


def bad_crc(base_offset: int) -> bytes:
    batch = bytearray(build_batch([b"bad"], timestamps=5, base_offset=base_offset))
    batch[-2] ^= 1
    return bytes(batch)


def fetched(answer: bytes, position: int = 0) -> PartitionState:
    state = PartitionState(TP)
    state.position = position
    batches, corrupt, _end = Fetcher._batches(SimpleNamespace(check_crcs=True), answer, position, -1)  # type: ignore[arg-type]
    state.buffered.append(CompletedFetch(batches, position, -1, state.generation, corrupt))
    return state


@pytest.mark.parametrize("damage", [bad_records, bad_crc], ids=["records", "crc"])
@pytest.mark.parametrize("max_records", [1000, 3])
def test_records_before_damage_then_an_error_that_stays(damage: object, max_records: int) -> None:
    state = fetched(good(0, 4) + good(4, 6) + damage(10))  # type: ignore[operator]
    assert state.blocked is (damage is bad_crc)  # a bad CRC stops fetching past it
    taken = []
    while True:
        try:
            records = take_records(state, max_records, None, None)
        except CorruptRecordError as exc:
            assert "t-0 at offset 10" in str(exc)
            break
        assert records, "take_records returned nothing before raising"
        assert len(records) <= max_records
        taken.extend(records)
    assert [record.offset for record in taken] == list(range(10))
    assert [record.value for record in taken] == [b"v%d" % index for index in range(10)]
    for _ in range(3):
        with pytest.raises(CorruptRecordError, match="t-0 at offset 10"):
            take_records(state, max_records, None, None)
        assert state.position == 10
    state.seek(11)
    assert not state.buffered and not state.blocked and take_records(state, max_records, None, None) == []


def test_damage_first_raises_at_once() -> None:
    state = fetched(bad_crc(0) + good(1, 3))
    with pytest.raises(CorruptRecordError, match="t-0 at offset 0"):
        take_records(state, 100, None, None)
    assert state.position == 0


def test_the_bulk_path_hands_out_the_batches_before_damage() -> None:
    state = fetched(good(0, 4) + good(4, 6) + bad_crc(10))
    batches = take_batches(state, None, None)
    assert [value for batch in batches for value in batch.values()] == [b"v%d" % index for index in range(10)]
    assert state.position == 10
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match="t-0 at offset 10"):
            take_batches(state, None, None)
        assert state.position == 10
