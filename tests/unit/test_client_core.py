"""The clients' pure core: accumulator rules, decoders, chunking, settings, metadata views, and
the pipelined binary channel against a scripted local server."""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

import pytest
from aiohttp import web

from kafkalite import errors, protocol
from kafkalite.client.accumulator import RecordAccumulator, chunk_bounds
from kafkalite.client.consumer import ConsumerSettings
from kafkalite.client.fetcher import FetchedBatch, decode_records, decode_values
from kafkalite.client.metadata import ClusterView, parse_bootstrap
from kafkalite.client.producer import ProducerSettings
from kafkalite.client.types import TopicPartition
from kafkalite.record.batch import RecordBatch, build_batch, decode_all
from kafkalite.record.codec import Compression
from kafkalite.transport import AsyncTransport, check_answer

TP = TopicPartition("t", 0)


def accumulator(**overrides: int) -> RecordAccumulator:
    options = dict(batch_size=1000, buffer_memory=10_000, linger_ms=0, max_request_size=5000,
                   delivery_timeout_ms=60_000, max_in_flight_per_partition=5, idempotent=False)
    options.update(overrides)
    return RecordAccumulator(**options)  # type: ignore[arg-type]


def test_records_fill_batches_and_drain_one_batch_per_partition() -> None:
    acc = accumulator()
    futures = [acc.append(TP, 1000 + i, None, b"x" * 88, None, 100) for i in range(25)]
    assert all(future is not None for future in futures)
    nodes, _, unknown = acc.ready({TP: 7}, time.monotonic())
    assert nodes == {7} and not unknown
    drained = acc.drain({TP: 7}, {7}, time.monotonic())
    batch = drained[7][0]
    assert len(drained[7]) == 1 and batch.record_count == 9  # 61 + 9 * 100 ≤ 1000
    records = decode_all(batch.encode(Compression.NONE))
    assert [record.timestamp for record in records] == list(range(1000, 1009))
    acc.complete(batch, 40, -1, 0)
    assert futures[3].get(0).offset == 43 and futures[3].get(0).timestamp == 1003
    assert acc.used_memory == 16 * 100


def test_linger_holds_a_batch_until_it_is_due() -> None:
    acc = accumulator(linger_ms=200)
    acc.append(TP, 1, b"k", b"v", None, 20)
    now = time.monotonic()
    nodes, delay, _ = acc.ready({TP: 1}, now)
    assert nodes == set() and 0 < delay <= 0.2
    assert acc.ready({TP: 1}, now + 0.25)[0] == {1}
    assert acc.ready({}, now + 0.25)[2] is True  # unknown leader is reported


def test_memory_budget_and_retry_order() -> None:
    acc = accumulator(buffer_memory=300)
    assert acc.append(TP, 1, None, b"a", None, 150) is not None
    assert acc.append(TP, 1, None, b"b", None, 150) is not None
    assert acc.append(TP, 1, None, b"c", None, 150) is None
    assert acc.wait_for_memory(150, 0.05) is False
    first = acc.drain({TP: 1}, {1}, time.monotonic())[1][0]
    acc.reenqueue(first, time.monotonic() - 1)
    again = acc.drain({TP: 1}, {1}, time.monotonic())[1][0]
    assert again is first and again.attempts == 2
    acc.fail(again, errors.KafkaTimeoutError("gone"))
    assert acc.append(TP, 1, None, b"c", None, 150) is not None
    with pytest.raises(errors.KafkaTimeoutError):
        first.result.wait(0)
        raise first.result.error  # type: ignore[misc]


def test_idempotent_batches_get_consecutive_sequences() -> None:
    acc = accumulator(idempotent=True, batch_size=200)
    acc.reset_producer(42, 0)
    for _ in range(6):
        acc.append(TP, 1, None, b"x" * 50, None, 60)
    sequences = []
    while True:
        drained = acc.drain({TP: 1}, {1}, time.monotonic())
        if not drained:
            break
        batch = drained[1][0]
        sequences.append((batch.base_sequence, batch.record_count))
        header = RecordBatch(batch.encode(Compression.NONE))
        assert (header.producer_id, header.base_sequence) == (42, batch.base_sequence)
        acc.complete(batch, 0, -1, 0)
    assert sequences == [(0, 2), (2, 2), (4, 2)]


def test_chunk_bounds() -> None:
    assert chunk_bounds([100] * 10, 350) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert chunk_bounds([1000, 10, 10], 500) == [(0, 1), (1, 3)]
    assert chunk_bounds([], 10) == []


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_decoders_agree_with_the_batch_reader(codec: int) -> None:
    values = [b"v%d" % i * (i % 90) if i % 11 else None for i in range(300)]
    keys = [b"k%d" % i if i % 3 else None for i in range(300)]
    headers = [[("a", b"1")] if i % 5 == 0 else [] for i in range(300)]
    timestamps = [5000 + i for i in range(300)]
    raw = build_batch(values, keys=keys, timestamps=timestamps, headers=headers, compression=codec, base_offset=100)
    batch = RecordBatch(raw)
    expected = decode_all(raw)
    records = decode_records(batch, "t", 0, 150, 390)
    assert [record.offset for record in records] == list(range(150, 390))
    for record, reference in zip(records, expected[50:]):
        assert (record.key, record.value, record.timestamp) == (reference.key, reference.value, reference.timestamp)
        assert record.headers == list(reference.headers)
        assert record.serialized_value_size == (-1 if reference.value is None else len(reference.value))
    assert decode_values(batch) == values
    assert FetchedBatch("t", 0, batch, 100, 400, None, None).values() == values
    assert FetchedBatch("t", 0, batch, 398, 400, None, None).values() == values[-2:]


def test_corrupt_batch_is_reported() -> None:
    raw = bytearray(build_batch([b"abc"] * 3))
    raw[-2] ^= 0xFF
    batch = RecordBatch(bytes(raw))
    with pytest.raises(errors.CorruptRecordError):
        batch.validate()


def test_settings_follow_kafka_rules() -> None:
    settings = ProducerSettings.from_options({"bootstrap_servers": "h1:1,h2"})
    assert (settings.acks, settings.enable_idempotence, settings.linger_ms) == (-1, True, 0)
    assert settings.bootstrap_servers == ["h1:1", "h2:9092"]
    assert ProducerSettings.from_options({"acks": 1}).enable_idempotence is False
    with pytest.raises(errors.ConfigError):
        ProducerSettings.from_options({"acks": 1, "enable_idempotence": True})
    with pytest.raises(errors.UnrecognizedClientOptionError):
        ProducerSettings.from_options({"lingerms": 5})
    with pytest.raises(errors.ConfigError, match="SASL_SSL needs sasl_plain_username"):
        ProducerSettings.from_options({"security_protocol": "SASL_SSL"})
    with pytest.raises(errors.ConfigError, match="ssl_cafile need security_protocol='SSL'"):
        ProducerSettings.from_options({"ssl_cafile": "/ca.pem"})
    assert ProducerSettings.from_options({"security_protocol": "SSL"}).ssl_context is not None
    assert ProducerSettings.from_options({"ssl_check_hostname": True}).ssl_context is None
    assert ProducerSettings.from_options({"api_version": (2, 0), "retries": float("inf")}).retries > 0
    consumer = ConsumerSettings.from_options({"auto_offset_reset": "smallest"})
    assert consumer.auto_offset_reset == "earliest" and consumer.max_poll_records == 500
    with pytest.raises(errors.ConfigError):
        ConsumerSettings.from_options({"auto_offset_reset": "sometimes"})
    with pytest.raises(errors.ConfigError):
        parse_bootstrap("")


def test_cluster_view_merges_partial_answers() -> None:
    brokers = [protocol.BrokerEndpoint(1, "h", 1), protocol.BrokerEndpoint(2, "h", 2)]
    first = ClusterView.build("c", 1, brokers, [
        protocol.TopicMetadata("a", [protocol.PartitionMetadata(0, 1, 0, [1], [1]),
                                     protocol.PartitionMetadata(1, -1, 0, [2], [])]),
        protocol.TopicMetadata("b", [protocol.PartitionMetadata(0, 2, 0, [2], [2])])], 1.0)
    assert first.partitions["a"] == (0, 1) and first.available["a"] == (0,)
    assert first.leader_address(TopicPartition("b", 0)) == "h:2"
    answer = protocol.ClusterMetadata("c", 2, brokers, [protocol.TopicMetadata("missing", [], 3)])
    merged = first.merged(answer, ["missing"], 2.0)
    assert set(merged.partitions) == {"a", "b"} and merged.topic_errors == {"missing": 3}
    assert merged.controller_id == 2


async def _channel_server(handler: Any, max_msg_size: int = 4 << 20) -> tuple[web.AppRunner, str]:
    """A local aiohttp server whose ``/v1/channel`` WebSocket runs ``handler(socket)``."""

    async def serve(request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(max_msg_size=max_msg_size)
        await socket.prepare(request)
        await handler(socket)
        return socket

    app = web.Application()
    app.router.add_get(protocol.CHANNEL, serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"127.0.0.1:{port}"


def test_pipelined_connection_matches_answers_in_order() -> None:
    async def scenario() -> None:
        error = protocol.dumps({"error_code": 6, "error": "NOT_LEADER_OR_FOLLOWER", "message": "moved"})
        large = bytes(range(256)) * 3000  # longer than one socket read: gathered across reads
        replies = [(200, b"first"), (200, large), (204, b""), (421, error)]
        seen: list[bytes] = []

        async def handler(socket: web.WebSocketResponse) -> None:
            for status, body in replies:
                message = await socket.receive()
                seen.append(message.data)
                await socket.send_bytes(struct.pack(">H", status) + body)
            await socket.close()

        runner, address = await _channel_server(handler)
        transport = AsyncTransport(request_timeout_ms=5000)
        try:
            connection = await transport.connection(address, "produce")
            futures = [connection.submit(protocol.PRODUCE if i % 2 == 0 else protocol.FETCH, [b"req-", b"%d" % i])
                       for i in range(4)]
            answers = await asyncio.gather(*futures)
            assert [(status, bytes(body)) for status, body in answers[:3]] == [(200, b"first"), (200, large),
                                                                                (204, b"")]
            produce, fetch = (struct.pack(">H", protocol.CHANNEL_APIS[path])
                              for path in (protocol.PRODUCE, protocol.FETCH))
            assert seen == [produce + b"req-0", fetch + b"req-1", produce + b"req-2", fetch + b"req-3"]
            with pytest.raises(errors.NotLeaderForPartitionError):
                check_answer(*answers[3])
            deadline = time.monotonic() + 5  # the server's close frame arrives
            while connection.usable and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert not connection.usable
            late = connection.submit(protocol.PRODUCE, [b"after close"])
            with pytest.raises(errors.KafkaConnectionError):
                await late
            assert not connection.usable
        finally:
            await transport.close()
            await runner.cleanup()

    asyncio.run(scenario())


def test_request_timeout_closes_the_connection() -> None:
    async def scenario() -> None:
        async def silent(socket: web.WebSocketResponse) -> None:
            async for _ in socket:  # reads, never answers; ends when the client gives up
                pass

        runner, address = await _channel_server(silent)
        transport = AsyncTransport(request_timeout_ms=200)
        try:
            connection = await transport.connection(address)
            first = connection.submit(protocol.PRODUCE, [b"a"])
            second = connection.submit(protocol.PRODUCE, [b"b"])
            with pytest.raises(errors.KafkaTimeoutError):
                await first
            with pytest.raises(errors.KafkaConnectionError):
                await second
            assert not connection.usable
        finally:
            await transport.close()
            await runner.cleanup()

    asyncio.run(scenario())


def test_oversize_request_fails_as_message_too_large_and_others_can_retry() -> None:
    async def scenario() -> None:
        async def echo(socket: web.WebSocketResponse) -> None:
            async for message in socket:
                await socket.send_bytes(struct.pack(">H", 200) + message.data[2:])

        runner, address = await _channel_server(echo, max_msg_size=1000)
        transport = AsyncTransport(request_timeout_ms=5000)
        try:
            connection = await transport.connection(address)
            small = connection.submit(protocol.PRODUCE, [b"small"])
            too_big = connection.submit(protocol.PRODUCE, [b"x" * 5000])
            after = connection.submit(protocol.PRODUCE, [b"after"])
            assert bytes((await small)[1]) == b"small"
            with pytest.raises(errors.MessageSizeTooLargeError):
                await too_big
            with pytest.raises(errors.KafkaConnectionError):
                await after
            again = await transport.connection(address)
            assert again is not connection and bytes(await again.request(protocol.PRODUCE, [b"ok"])) == b"ok"
        finally:
            await transport.close()
            await runner.cleanup()

    asyncio.run(scenario())


def test_a_server_without_the_channel_is_a_connection_error() -> None:
    async def scenario() -> None:
        app = web.Application()
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        transport = AsyncTransport(request_timeout_ms=2000)
        try:
            with pytest.raises(errors.KafkaConnectionError, match="refused the binary channel"):
                await transport.connection(f"127.0.0.1:{port}")
        finally:
            await transport.close()
            await runner.cleanup()

    asyncio.run(scenario())


def _general_decode(batch: RecordBatch) -> list[Any]:
    """record/'s general decoder, in the consumer's fields (what the bulk-shape path must match)."""
    return [("t", 3, batch.partition_leader_epoch, record.offset, record.timestamp, 0, record.key, record.value,
             list(record.headers), None, -1 if record.key is None else len(record.key),
             -1 if record.value is None else len(record.value),
             sum(len(name) + len(value or b"") for name, value in record.headers) if record.headers else -1)
            for record in batch.records()]


def test_fast_record_decoding_agrees_with_the_general_decoder() -> None:
    import random

    rng = random.Random(7)
    base = 1_700_000_000_000
    shapes_taken_fast = 0
    for trial in range(400):
        count = rng.choice([1, 2, 63, 64, 65, 200, 9000 if trial % 50 == 0 else 3])
        sizes = rng.choice([[0], [1], [63], [64], [100], [8191], [8192], [0, 5, 100, 70, 9000]])
        values: list[bytes | None] = [rng.randbytes(rng.choice(sizes)) for _ in range(count)]
        if trial % 7 == 0:
            values[rng.randrange(count)] = None
        keys = [b"k"] * count if trial % 11 == 0 else None
        spread = rng.choice([0, 5, 63, 64, 8191, 8192, 100_000])
        timestamps = [base + rng.randint(-spread // 4, spread) for _ in range(count)]
        headers = [[("h", b"v")] if i == 0 else [] for i in range(count)] if trial % 13 == 0 else None
        data = build_batch(values, keys=keys, timestamps=timestamps, headers=headers, base_offset=5000)
        batch = RecordBatch(data, 0)
        fast = decode_records(batch, "t", 3, 0, 1 << 62)
        general = _general_decode(batch)
        assert [tuple(record) for record in fast] == general
        shapes_taken_fast += batch.uniform_runs(batch.payload()) is not None
        assert [record.value for record in fast] == values
        assert [record.timestamp for record in fast] == timestamps
        assert [record.offset for record in fast] == list(range(5000, 5000 + count))
    assert shapes_taken_fast > 50
    # the offset window still applies (the fast path only takes whole batches)
    data = build_batch([b"a", b"b", b"c"], timestamps=[base, base + 1, base + 2], base_offset=10)
    assert [record.offset for record in decode_records(RecordBatch(data, 0), "t", 0, 11, 12)] == [11]
    # headers lists are not shared between records
    records = decode_records(RecordBatch(build_batch([b"x", b"y"], timestamps=[base, base]), 0), "t", 0, 0, 99)
    records[0].headers.append(("n", None))
    assert records[1].headers == []


def test_fast_record_decoding_never_accepts_what_the_general_decoder_rejects() -> None:
    import random

    rng = random.Random(11)
    base = 1_700_000_000_000
    original = build_batch([b"v" * 70, b"w" * 5, b"x" * 200], timestamps=[base, base + 3, base + 90], base_offset=7)
    for _ in range(3000):
        data = bytearray(original)
        for _ in range(rng.choice([1, 1, 2])):
            data[rng.randrange(61, len(data))] = rng.randrange(256)
        batch = RecordBatch(bytes(data), 0)
        try:
            expected: Any = _general_decode(batch)
        except errors.CorruptRecordError:
            expected = errors.CorruptRecordError
        try:
            got: Any = [tuple(record) for record in decode_records(batch, "t", 3, 0, 1 << 62)]
        except errors.CorruptRecordError:
            got = errors.CorruptRecordError
        assert got == expected
