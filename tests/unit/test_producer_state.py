"""Idempotent producer state: duplicates, gaps, epochs, truncation, expiry."""

from __future__ import annotations

import pytest

from kafkalite.broker.producer_state import ProducerStateManager
from kafkalite.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from kafkalite.record.batch import RecordBatch, build_batch


def batch(sequence: int, count: int = 2, epoch: int = 0, producer_id: int = 7, base_offset: int = 0) -> RecordBatch:
    return RecordBatch(build_batch([b"v"] * count, timestamps=100, producer_id=producer_id, producer_epoch=epoch,
                                   base_sequence=sequence, base_offset=base_offset))


def test_in_order_batches_are_accepted_and_duplicates_found() -> None:
    state = ProducerStateManager()
    assert state.check(batch(0)) is None
    state.update(batch(0), 10, 11)
    assert state.check(batch(2)) is None
    state.update(batch(2), 12, 13)
    duplicate = state.check(batch(0))
    assert duplicate is not None and (duplicate.first_offset, duplicate.last_offset) == (10, 11)


def test_gap_and_old_epoch_are_rejected() -> None:
    state = ProducerStateManager()
    state.update(batch(0), 0, 1)
    with pytest.raises(OutOfOrderSequenceNumberError):
        state.check(batch(5))
    state.update(batch(0, epoch=3), 2, 3)
    with pytest.raises(InvalidProducerEpochError):
        state.check(batch(2, epoch=2))
    with pytest.raises(OutOfOrderSequenceNumberError):
        state.check(batch(4, epoch=4))  # a new epoch starts at 0
    assert state.check(batch(0, epoch=4)) is None


def test_only_last_five_batches_are_remembered() -> None:
    state = ProducerStateManager()
    for index in range(7):
        state.update(batch(index * 2), index * 2, index * 2 + 1)
    assert state.check(batch(4)) is not None
    with pytest.raises(OutOfOrderSequenceNumberError):
        state.check(batch(0))  # too old to be recognised: out of order


def test_unknown_producer_accepts_any_sequence_and_non_idempotent_batches_pass() -> None:
    state = ProducerStateManager()
    assert state.check(batch(41)) is None
    assert state.check(RecordBatch(build_batch([b"x"], timestamps=1))) is None


def test_truncation_and_rebuild() -> None:
    state = ProducerStateManager()
    state.update(batch(0), 0, 1)
    state.update(batch(2), 2, 3)
    state.truncate_to(2)
    assert state.check(batch(2)) is None  # the truncated batch is not a duplicate any more
    state.rebuild([batch(0, base_offset=0), batch(2, base_offset=2), batch(0, producer_id=9, base_offset=4)])
    assert set(state.producers) == {7, 9}
    assert state.check(batch(2, base_offset=2)) is not None


def test_expiry() -> None:
    state = ProducerStateManager(expiration_ms=1000)
    state.update(batch(0), 0, 1)
    assert state.expire(50) == 0
    assert state.expire(100 + 1001) == 1
    assert state.producers == {}
