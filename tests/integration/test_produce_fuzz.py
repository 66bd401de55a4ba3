"""A bounded fuzz of the produce route of a real broker (HTTP and the binary channel): random
bodies and mutated frames and batches. No request may crash the broker or get a 5xx, nothing
may be logged at ERROR, and afterwards the log holds exactly what was acknowledged (plus what
acks=0 requests may have written) — read back and checked with the dump tool's deep iteration."""

from __future__ import annotations

import asyncio
import io
import random
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp
import pytest

from kafkalite import protocol
from kafkalite.errors import KafkaliteError
from kafkalite.record.batch import build_batch, crc32c, decode_all
from kafkalite.record.codec import Compression
from kafkalite.tools import dump_log
from tests.support.cluster import BrokerCluster, http

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "fuzzed"
REQUESTS = 10_000
TIME_BUDGET_S = 90.0
SEED = 20261124


@dataclass
class Sent:
    """A request whose batch, if written, holds ``values``."""

    values: list[bytes | None]
    acknowledged_at: int | None = None  # base offset of an error-free answer
    maybe_written: bool = False  # acks=0: written or not, nobody was told
    must_refuse: bool = False  # record/'s strict decoder rejects the batch: the broker must too


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    connect = f"{zookeeper.connect_string}/fuzz-{uuid.uuid4().hex[:8]}"
    cluster = BrokerCluster(tmp_path_factory.mktemp("fuzz"), connect, size=1,
                            extra_properties={"socket.request.max.bytes": str(256 * 1024)}).start()
    try:
        cluster.create_topic(TOPIC, partitions=1, replication_factor=1)
        cluster.create_topic("fuzzed-compacted", partitions=1, replication_factor=1,
                             configs={"cleanup.policy": "compact"})
        cluster.wait_in_sync(TOPIC)
        yield cluster
    finally:
        cluster.stop()


CRC_START, CRC_END = 17, 21  # the batch's CRC-32C field; it covers everything after it


def frame(topic: str, batch: bytes, acks: int = -1, partition: int = 0) -> bytes:
    request = protocol.ProduceRequest(acks, 5_000, [protocol.ProducePartition(topic, partition, batch)])
    return b"".join(bytes(piece) for piece in protocol.encode_produce_request(request))


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four random edits: bit flips, byte overwrites, cuts, insertions, int overwrites."""
    buffer = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not buffer:
            buffer.extend(rng.randbytes(rng.randint(1, 16)))
            continue
        choice = rng.randrange(6)
        position = rng.randrange(len(buffer))
        if choice == 0:
            buffer[position] ^= 1 << rng.randrange(8)
        elif choice == 1:
            buffer[position] = rng.randrange(256)
        elif choice == 2:
            del buffer[position:position + rng.randint(1, 64)]
        elif choice == 3:
            buffer[position:position] = rng.randbytes(rng.randint(1, 32))
        elif choice == 4 and position + 4 <= len(buffer):
            buffer[position:position + 4] = struct.pack(">i", rng.choice(
                [0, -1, 1, 2 ** 31 - 1, -2 ** 31, len(buffer), rng.randrange(-2 ** 31, 2 ** 31)]))
        else:
            del buffer[position:]
    return bytes(buffer)


def next_request(index: int, rng: random.Random) -> tuple[bytes, Sent | None]:
    """A fuzzed produce body; ``Sent`` when it carries an intact batch of the fuzzed topic."""
    values = [f"fuzz-{index}-{n}".encode() * rng.randint(1, 5) for n in range(rng.randint(1, 6))]
    codec = rng.choice([Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
    batch = build_batch(values, keys=[b"k%d" % n for n in range(len(values))], compression=codec)
    kind = rng.randrange(10)
    if kind == 0:
        return rng.randbytes(rng.randint(0, 300)), None
    if kind == 1:  # an intact request, acknowledged or with acks=0
        acks = rng.choice([-1, 1, 0])
        sent = Sent(values)
        sent.maybe_written = acks == 0
        return frame(TOPIC, batch, acks), sent
    if kind == 2:  # the frame around an intact batch is damaged
        body = mutate(frame(TOPIC, batch), rng)
        return body, Sent(values, maybe_written=True)
    if kind == 3:  # odd topic names, partitions and acks
        topic = rng.choice(["", ".", "..", "a" * 300, "bad\n", "x/y", "ü", "fuzzed-compacted", "__consumer_offsets"])
        return frame(topic, batch, rng.choice([-1, 1, 2, -2, 0]), rng.choice([0, -1, 7, 2 ** 31 - 1])), None
    if kind in (4, 5):  # damage inside the CRC's reach with the CRC recomputed (a buggy producer)
        plain = build_batch(values, keys=[b"k%d" % n for n in range(len(values))],
                            compression=rng.choice([Compression.NONE, Compression.NONE, codec]))
        damaged = bytearray(plain[:CRC_END] + mutate(plain[CRC_END:], rng))
        if len(damaged) >= 12:
            damaged[8:12] = struct.pack(">i", len(damaged) - 12)  # keep the length consistent half the time
            if kind == 5:
                damaged[8:12] = plain[8:12]
        if len(damaged) > CRC_END:
            damaged[CRC_START:CRC_END] = struct.pack(">I", crc32c(bytes(damaged[CRC_END:])))
        try:
            decoded = decode_all(bytes(damaged))
        except KafkaliteError:
            return frame(TOPIC, bytes(damaged)), Sent(values, must_refuse=True)
        return frame(TOPIC, bytes(damaged)), Sent([record.value for record in decoded])
    # the batch itself is damaged (its CRC is not recomputed), in an otherwise valid frame; an
    # edit outside the CRC's reach (base offset, leader epoch) leaves it valid and acknowledged
    return frame(TOPIC, mutate(batch, rng)), Sent(values)


async def run_fuzz(address: str) -> tuple[list[Sent], dict[int, int], int]:
    rng = random.Random(SEED)
    sent: list[Sent] = []
    statuses: dict[int, int] = {}
    deadline = time.monotonic() + TIME_BUDGET_S
    done = 0
    async with aiohttp.ClientSession() as session:
        channel = await session.ws_connect(f"http://{address}{protocol.CHANNEL}", max_msg_size=0)
        for index in range(REQUESTS):
            if time.monotonic() > deadline:
                break
            body, record = next_request(index, rng)
            if index % 3 == 0:  # the binary channel: api key 0 (produce) and the frame
                if channel.closed:
                    channel = await session.ws_connect(f"http://{address}{protocol.CHANNEL}", max_msg_size=0)
                await channel.send_bytes(struct.pack(">H", 0) + body)
                message = await channel.receive(timeout=30)
                assert message.type is aiohttp.WSMsgType.BINARY, message
                status = struct.unpack_from(">H", message.data)[0]
                payload = message.data[2:]
            else:
                async with session.post(f"http://{address}{protocol.PRODUCE}", data=body,
                                        headers={"Content-Type": protocol.BINARY_CONTENT_TYPE}) as response:
                    status = response.status
                    payload = await response.read()
                    if status >= 400:
                        assert response.content_type == "application/json", (status, payload[:200])
            statuses[status] = statuses.get(status, 0) + 1
            assert status < 500, (index, status, payload[:300])
            done += 1
            if record is None:
                continue
            if status == 200:
                results = protocol.decode_produce_response(payload)
                if len(results) == 1 and results[0].topic == TOPIC and results[0].partition == 0:
                    if results[0].error_code == 0:
                        record.acknowledged_at = results[0].base_offset
                    elif results[0].error_code in (7, 56):  # timed out or storage error: may be written
                        record.maybe_written = True
            elif status == 204:
                record.maybe_written = True
            sent.append(record)
        await channel.close()
    return sent, statuses, done


def test_fuzzed_produce_requests_never_crash_and_leave_a_clean_log(broker: BrokerCluster) -> None:
    address = broker.brokers[1].address
    started = time.monotonic()
    sent, statuses, done = asyncio.run(run_fuzz(address))
    elapsed = time.monotonic() - started
    print(f"produce fuzz: {done} requests in {elapsed:.1f} s, statuses {sorted(statuses.items())}")
    assert done >= 500, done
    assert broker.brokers[1].alive
    acknowledged = [item for item in sent if item.acknowledged_at is not None]
    wrongly_accepted = [item for item in acknowledged if item.must_refuse]
    assert not wrongly_accepted, f"{len(wrongly_accepted)} damaged batches with a recomputed CRC were acknowledged"
    print(f"produce fuzz: {sum(item.must_refuse for item in sent)} damaged batches with a recomputed CRC, "
          "all refused")
    assert len(acknowledged) >= 50, len(acknowledged)

    # Read the whole log back: every acknowledged record at its offset, nothing unexplained.
    records: list[tuple[int, bytes | None]] = []
    offset = 0
    while True:
        answer = http(address, "POST", protocol.FETCH, raw=protocol.encode_fetch_request(protocol.FetchRequest(
            [protocol.FetchPartition(TOPIC, 0, offset, 4 * 1024 * 1024)], max_wait_ms=0)),
            content_type=protocol.BINARY_CONTENT_TYPE)
        result = protocol.decode_fetch_response(answer)[0]
        assert result.error_code == 0, result
        batch_records = [(record.offset, record.value) for record in decode_all(bytes(result.records))
                         if record.offset >= offset]
        if not batch_records:
            break
        records.extend(batch_records)
        offset = batch_records[-1][0] + 1
    assert offset == result.high_watermark
    assert [position for position, _ in records] == list(range(len(records)))
    by_offset = dict(records)
    for item in acknowledged:
        assert item.acknowledged_at is not None
        assert [by_offset.get(item.acknowledged_at + n) for n in range(len(item.values))] == item.values
    allowed = {value for item in sent if item.acknowledged_at is not None or item.maybe_written
               for value in item.values}
    assert {value for _, value in records} <= allowed
    print(f"produce fuzz: {len(acknowledged)} acknowledged batches, {len(records)} records in the log")

    # The dump tool's deep iteration finds every batch of every segment intact.
    segments = sorted((broker.brokers[1].directory / "data" / f"{TOPIC}-0").glob("*.log"))
    out = io.StringIO()
    assert dump_log.main(["--deep-iteration", "--files", ",".join(str(path) for path in segments)], out) == 0, \
        out.getvalue()[-2000:]
    assert "isvalid: false" not in out.getvalue()
    log = broker.brokers[1].log_path.read_text(errors="replace")
    assert [line for line in log.splitlines() if "] ERROR " in line or line.startswith("Traceback")] == []
