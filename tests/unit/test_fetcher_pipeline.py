"""The consumer's fetcher keeps the next fetch on its way while the application works: when an
answer arrives, the next fetch for the partition is written before the application waiting for
records is woken (no broker: a transport twin records what is written and when)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kafkalite import protocol
from kafkalite.client.fetcher import Fetcher, PartitionState
from kafkalite.client.types import TopicPartition
from kafkalite.record.batch import build_batch

TP = TopicPartition("t", 0)


class _Connection:
    """Records each fetch offset written; the test answers the futures."""

    def __init__(self) -> None:
        self.written: list[tuple[int, asyncio.Future[tuple[int, bytes]]]] = []
        self.arrived = asyncio.Event()

    def submit(self, path: str, pieces: list[bytes], *, timeout_ms: int | None = None
               ) -> asyncio.Future[tuple[int, bytes]]:
        assert path == protocol.FETCH
        request = protocol.decode_fetch_request(b"".join(pieces))
        future: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self.written.append((request.partitions[0].fetch_offset, future))
        self.arrived.set()
        return future


class _Transport:
    def __init__(self, connection: _Connection) -> None:
        self.link = connection

    async def connection(self, address: str, channel: str = "default") -> _Connection:
        return self.link


def _answer(base_offset: int, count: int, high_watermark: int) -> tuple[int, bytes]:
    records = build_batch([b"v%d" % (base_offset + index) for index in range(count)], timestamps=5,
                          base_offset=base_offset)
    result = protocol.FetchResult(TP.topic, TP.partition, high_watermark=high_watermark,
                                  last_stable_offset=high_watermark, log_start_offset=0, records=records)
    return 200, b"".join(bytes(piece) for piece in protocol.encode_fetch_response([result]))


async def _scenario() -> list[tuple[str, Any]]:
    connection = _Connection()
    view = SimpleNamespace(leader=lambda tp: 1, address_of=lambda node: "127.0.0.1:9092")
    metadata: Any = SimpleNamespace(view=view, request_update=lambda: None)
    state = PartitionState(TP)
    state.position = 0
    fetcher = Fetcher(metadata, _Transport(connection), {TP: state},  # type: ignore[arg-type]
                      fetch_min_bytes=1, fetch_max_bytes=1 << 20, fetch_max_wait_ms=100,
                      max_partition_fetch_bytes=1 << 20, isolation_level=protocol.READ_UNCOMMITTED,
                      request_timeout_ms=5000, retry_backoff_ms=100, check_crcs=True, auto_offset_reset="earliest")
    seen: list[tuple[str, Any]] = []
    waiting = asyncio.Event()

    async def application() -> None:
        waiting.set()  # no await between this and the wait below: once the test sees it, the wait is on
        await fetcher.data_ready.wait()
        seen.append(("woken with fetches written at", [offset for offset, _ in connection.written]))

    fetcher.start()
    try:
        await asyncio.wait_for(connection.arrived.wait(), 5)
        woken = asyncio.get_running_loop().create_task(application())
        await asyncio.wait_for(waiting.wait(), 5)
        connection.arrived.clear()
        connection.written[0][1].set_result(_answer(0, 10, 30))
        await asyncio.wait_for(woken, 5)
        await asyncio.wait_for(connection.arrived.wait(), 5)
        seen.append(("buffered", [(fetch.fetch_offset, fetch.next_offset) for fetch in state.buffered]))
    finally:
        await fetcher.stop()
    return seen


def test_the_next_fetch_is_written_before_the_application_is_woken() -> None:
    seen = asyncio.run(_scenario())
    assert seen == [("woken with fetches written at", [0, 10]), ("buffered", [(0, 10)])]
