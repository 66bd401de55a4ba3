"""The leader's side of DeleteRecords on a real Partition: the low watermark is the smallest log
start offset over the ISR as the followers' fetches report it, a wait for it completes when the
last follower of the ISR reports (or the ISR shrinks), times out with REQUEST_TIMED_OUT, and fails
with NOT_LEADER_OR_FOLLOWER when leadership moves. The HTTP codec's shapes come last."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kafkalite.broker import http_codec as codec
from kafkalite.broker.partition import Partition
from kafkalite.broker.services import DeleteRecordsAnswer, DeleteRecordsQuery
from kafkalite.config import LogConfig
from kafkalite.errors import (
    InvalidRequestError,
    NotLeaderForPartitionError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
)
from kafkalite.storage.log import PartitionLog
from tests.unit.test_log import values_batch


def leader_of_three(directory: Path) -> Partition:
    """Broker 1 leading a partition of 100 records replicated to brokers 2 and 3 (all in the ISR)."""
    partition_log = PartitionLog(directory, "topic", 0, LogConfig(), clean_shutdown=True)
    partition = Partition("topic", 0, partition_log, 1, clock=lambda: 0)
    partition.make_leader(0, [1, 2, 3], [1, 2, 3], 0, 0)
    partition_log.append_as_leader(values_batch(0, 100), leader_epoch=0)
    for follower in (2, 3):
        partition.record_follower_fetch(follower, 100, 0)
    assert partition.high_watermark == 100
    return partition


def test_the_wait_ends_when_the_last_isr_follower_reports_the_new_log_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader_of_three(tmp_path / "topic-0")
        assert partition.low_watermark == 0
        partition.log.delete_records_before(40)
        waiting = asyncio.ensure_future(partition.wait_for_low_watermark(40, 10.0))
        partition.record_follower_fetch(2, 100, 40)
        await asyncio.sleep(0)
        assert not waiting.done() and partition.low_watermark == 0
        partition.record_follower_fetch(3, 100, 40)
        await asyncio.wait_for(waiting, 1.0)
        assert partition.low_watermark == 40

    asyncio.run(scenario())


def test_a_follower_leaving_the_isr_no_longer_holds_the_wait(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader_of_three(tmp_path / "topic-0")
        partition.log.delete_records_before(40)
        partition.record_follower_fetch(2, 100, 40)
        waiting = asyncio.ensure_future(partition.wait_for_low_watermark(40, 10.0))
        await asyncio.sleep(0)
        assert not waiting.done()
        partition.update_isr([1, 2], 1)
        await asyncio.wait_for(waiting, 1.0)

    asyncio.run(scenario())


def test_the_wait_times_out_naming_the_lagging_followers(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader_of_three(tmp_path / "topic-0")
        partition.log.delete_records_before(40)
        partition.record_follower_fetch(2, 100, 40)
        with pytest.raises(RequestTimedOutError, match=r"followers \[3\]"):
            await partition.wait_for_low_watermark(40, 0.05)

    asyncio.run(scenario())


def test_the_wait_fails_when_leadership_moves(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader_of_three(tmp_path / "topic-0")
        partition.log.delete_records_before(40)
        waiting = asyncio.ensure_future(partition.wait_for_low_watermark(40, 10.0))
        await asyncio.sleep(0)
        partition.make_follower(2, 1, [1, 2, 3], [1, 2, 3], 1, 0)
        with pytest.raises(NotLeaderForPartitionError):
            await asyncio.wait_for(waiting, 1.0)

    asyncio.run(scenario())


def test_the_codec_reads_requests_and_writes_per_partition_answers() -> None:
    queries, timeout_ms = codec.decode_delete_records(
        {"partitions": [{"topic": "t", "partition": 0, "offset": 40}, {"topic": "t", "partition": 1, "offset": -1}]},
        30_000)
    assert (queries, timeout_ms) == ([DeleteRecordsQuery("t", 0, 40), DeleteRecordsQuery("t", 1, -1)], 30_000)
    assert codec.decode_delete_records({"partitions": [], "timeout_ms": 5}, 30_000) == ([], 5)
    for bad in ({"partitions": [{"topic": "t", "partition": 0}]}, {"partitions": [{"topic": "t", "partition": -1,
                                                                                  "offset": 1}]},
                {"partitions": [None]}, {"partitions": [], "timeout_ms": -1}):
        with pytest.raises(InvalidRequestError):
            codec.decode_delete_records(bad, 30_000)
    encoded = codec.encode_delete_records([
        DeleteRecordsAnswer("t", 0, None, 40),
        DeleteRecordsAnswer("t", 1, OffsetOutOfRangeError("beyond the high watermark"))])
    assert encoded["partitions"][0] == {"topic": "t", "partition": 0, "low_watermark": 40, "error_code": 0}
    refused = encoded["partitions"][1]
    assert (refused["error_code"], refused["error"], refused["low_watermark"]) == (1, "OFFSET_OUT_OF_RANGE", -1)
