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


def txn_batch(sequence: int, count: int = 2, epoch: int = 0, producer_id: int = 7) -> RecordBatch:
    return RecordBatch(build_batch([b"v"] * count, timestamps=100, producer_id=producer_id, producer_epoch=epoch,
                                   base_sequence=sequence, transactional=True))


def test_transactions_open_and_close_and_bound_the_last_stable_offset() -> None:
    from kafkalite.record.control import ControlMarker
    from kafkalite.storage.txnindex import AbortedTxn

    state = ProducerStateManager()
    state.update(txn_batch(0), 10, 11)
    state.update(txn_batch(2), 14, 15)  # same transaction: it still starts at 10
    state.update(txn_batch(0, producer_id=8), 12, 13)
    assert state.ongoing == {7: 10, 8: 12}
    assert state.last_stable_offset(high_watermark=16) == 10
    assert state.last_stable_offset(high_watermark=16, log_start_offset=11) == 11  # never below the log start

    completed = state.complete(7, 0, ControlMarker(False, 2), 16)
    assert (completed.first_offset, completed.last_offset, completed.aborted) == (10, 16, True)
    assert state.aborted_entry(completed) == AbortedTxn(7, 10, 16, 12)  # 8 still holds the LSO at 12
    assert state.last_stable_offset(high_watermark=16) == 10  # the marker is not replicated yet
    assert state.last_stable_offset(high_watermark=17) == 12
    committed = state.complete(8, 0, ControlMarker(True, 2), 17)
    assert not committed.aborted and state.ongoing == {}
    assert state.last_stable_offset(high_watermark=18) == 18


def test_markers_are_fenced_and_open_transactions_refuse_plain_batches() -> None:
    from kafkalite.errors import InvalidTxnStateError, TransactionCoordinatorFencedError
    from kafkalite.record.control import ControlMarker

    state = ProducerStateManager()
    state.update(txn_batch(0, epoch=2), 0, 1)
    with pytest.raises(InvalidTxnStateError):
        state.check(batch(2, epoch=2))  # a non-transactional write inside the transaction
    with pytest.raises(InvalidProducerEpochError):
        state.check_marker(7, 1, 0)
    state.check_marker(7, 2, 3)
    state.complete(7, 2, ControlMarker(True, 3), 2)
    with pytest.raises(TransactionCoordinatorFencedError):
        state.check_marker(7, 2, 2)
    state.check(batch(2, epoch=2))  # the transaction is over: plain batches are fine again
    state.check_marker(7, 3, 3)  # a newer producer epoch (the coordinator bumped it)


def test_expiry_keeps_a_producer_with_an_open_transaction_and_truncation_closes_it() -> None:
    state = ProducerStateManager(expiration_ms=1_000)
    state.update(txn_batch(0), 5, 6)
    assert state.expire(now_ms=1_000_000) == 0 and 7 in state.producers
    state.truncate_to(5)
    assert state.ongoing == {} and 7 not in state.producers
