"""Partition appends: which thread does what, and the order of concurrent produce requests.

A real PartitionLog on disk with ``flush.messages=1``: validation of compressed or big requests
and every fsync run on worker threads, while the producer state, the log's offset assignment
and the partition's waiters are touched only on the event loop thread, and queued requests
keep their arrival order (an idempotent producer with several requests in flight).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafkalite.broker.partition import VALIDATE_INLINE_RECORDS, Partition
from kafkalite.config import LogConfig
from kafkalite.errors import CorruptRecordError, OutOfOrderSequenceNumberError
from kafkalite.record.batch import RecordBatch, build_batch
from kafkalite.record.codec import Compression
from kafkalite.storage.log import AppendInfo, PartitionLog

BROKER_ID = 1


def leader_partition(directory: Path, **overrides: str) -> Partition:
    config = LogConfig().with_overrides({"flush.messages": "1", **overrides})
    partition_log = PartitionLog(directory, "topic", 0, config, clean_shutdown=True)
    partition = Partition("topic", 0, partition_log, BROKER_ID, clock=lambda: 0)
    partition.make_leader(0, [BROKER_ID], [BROKER_ID], 0, 0)
    return partition


def idempotent_batch(producer_id: int, sequence: int, count: int, compression: int = Compression.NONE) -> bytes:
    return build_batch([f"p{producer_id}-s{sequence + index}".encode() for index in range(count)],
                       timestamps=1_700_000_000_000, compression=compression, producer_id=producer_id,
                       producer_epoch=0, base_sequence=sequence)


class ThreadRecorder:
    """Wraps methods of real objects to record the thread each call ran on."""

    def __init__(self) -> None:
        self.threads: dict[str, set[int]] = {}

    def wrap(self, owner: Any, name: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)
        threads = self.threads.setdefault(name, set())

        def recorded(*args: Any, **kwargs: Any) -> Any:
            threads.add(threading.get_ident())
            return original(*args, **kwargs)

        setattr(owner, name, recorded)


def test_state_is_touched_on_the_loop_thread_and_blocking_work_in_workers(tmp_path: Path) -> None:
    partition = leader_partition(tmp_path / "topic-0")
    recorder = ThreadRecorder()
    for name in ("check", "update"):
        recorder.wrap(partition.producer_state, name)
    for name in ("append_checked_as_leader", "flush"):
        recorder.wrap(partition.log, name)
    recovery_at_ack: list[tuple[AppendInfo, int]] = []

    async def produce(records: bytes) -> AppendInfo:
        info = await partition.append_as_leader(records, required_acks=1)
        recovery_at_ack.append((info, partition.log.recovery_point))
        return info

    async def scenario() -> tuple[int, list[AppendInfo]]:
        # Two producers, five requests each in flight at once, compressed and plain batches mixed:
        # a compressed request is validated in a worker while the plain ones behind it queue.
        requests = []
        for producer_id in (1000, 2000):
            sequence = 0
            for number in range(5):
                count = 3 + number
                compression = Compression.GZIP if number % 2 == 0 else Compression.NONE
                requests.append(idempotent_batch(producer_id, sequence, count, compression))
                sequence += count
        infos = await asyncio.gather(*(produce(records) for records in requests))
        return threading.get_ident(), list(infos)

    loop_thread, infos = asyncio.run(scenario())

    # Appended in arrival order: the offsets follow the order the requests were made in.
    firsts = [info.first_offset for info in infos]
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)
    assert partition.log.log_end_offset == sum(info.record_count for info in infos) == 2 * (3 + 4 + 5 + 6 + 7)
    # The producer state, offset assignment and write ran on the loop thread only; fsyncs did not.
    for name in ("check", "update", "append_checked_as_leader"):
        assert recorder.threads[name] == {loop_thread}, name
    assert recorder.threads["flush"] and loop_thread not in recorder.threads["flush"]
    # flush.messages=1: every acknowledgement came after the fsync covering its records.
    assert all(recovery_point > info.last_offset for info, recovery_point in recovery_at_ack)
    # The log holds each producer's records once, in sequence order.
    partition.log.update_high_watermark(partition.log.log_end_offset)
    sequences: dict[int, list[int]] = {1000: [], 2000: []}
    for batch in partition.log.batches():
        sequences[batch.producer_id].extend(range(batch.base_sequence, batch.base_sequence + batch.record_count))
    assert sequences == {1000: list(range(25)), 2000: list(range(25))}


def test_a_queued_request_waits_for_the_one_validated_in_a_worker(tmp_path: Path) -> None:
    partition = leader_partition(tmp_path / "topic-0")
    big = idempotent_batch(7, 0, VALIDATE_INLINE_RECORDS + 1)  # uncompressed, but validated in a worker
    small = idempotent_batch(7, VALIDATE_INLINE_RECORDS + 1, 1)  # inline on its own; queued here
    order: list[str] = []

    async def produce(name: str, records: bytes) -> AppendInfo:
        info = await partition.append_as_leader(records, required_acks=1)
        order.append(name)
        return info

    async def scenario() -> tuple[AppendInfo, AppendInfo]:
        # Tasks start in creation order: the big request reaches its worker validation before the
        # small one arrives, which then finds it queued.
        first = asyncio.create_task(produce("big", big))
        second = asyncio.create_task(produce("small", small))
        return await first, await second

    first, second = asyncio.run(scenario())
    assert (first.first_offset, second.first_offset) == (0, VALIDATE_INLINE_RECORDS + 1)
    assert order == ["big", "small"]


def test_a_gap_is_still_refused_after_queueing(tmp_path: Path) -> None:
    partition = leader_partition(tmp_path / "topic-0")

    async def scenario() -> None:
        await partition.append_as_leader(idempotent_batch(7, 0, 2, Compression.GZIP), required_acks=1)
        with pytest.raises(OutOfOrderSequenceNumberError):
            await partition.append_as_leader(idempotent_batch(7, 5, 1, Compression.GZIP), required_acks=1)
        duplicate = await partition.append_as_leader(idempotent_batch(7, 0, 2, Compression.GZIP), required_acks=1)
        assert (duplicate.first_offset, duplicate.last_offset, duplicate.record_count) == (0, 1, 0)

    asyncio.run(scenario())
    assert partition.log.log_end_offset == 2


def test_damage_found_in_a_worker_is_a_named_error_and_writes_nothing(tmp_path: Path) -> None:
    partition = leader_partition(tmp_path / "topic-0")
    damaged = bytearray(idempotent_batch(7, 0, 4, Compression.GZIP))
    damaged[-1] ^= 0xFF

    async def scenario() -> None:
        with pytest.raises(CorruptRecordError):
            await partition.append_as_leader(bytes(damaged), required_acks=1)

    asyncio.run(scenario())
    assert partition.log.log_end_offset == 0


def test_partition_state_refuses_other_threads(tmp_path: Path) -> None:
    partition = leader_partition(tmp_path / "topic-0")
    records = build_batch([b"v"], timestamps=1, producer_id=7, producer_epoch=0, base_sequence=0)
    errors: list[BaseException] = []

    def off_loop() -> None:
        try:
            partition.record_replicated(records)
        except RuntimeError as exc:
            errors.append(exc)

    worker = threading.Thread(target=off_loop)
    worker.start()
    worker.join()
    assert len(errors) == 1 and "off its event loop thread" in str(errors[0])
    assert partition.producer_state.check(RecordBatch(records)) is None  # nothing was recorded
