"""Damaged record batches against a real broker: the broker refuses them with Kafka's errors and
stores nothing, and a consumer that meets damage on disk returns every record in front of it,
then raises CorruptRecordError naming the partition and offset, and stays there until a seek —
with the blocking and the asyncio consumer alike."""

from __future__ import annotations

import asyncio
import io
import random
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalite import AIOKafkaConsumer, KafkaConsumer, TopicPartition, errors, protocol
from kafkalite.record.batch import CRC_START, HEADER_SIZE, RecordBatch, build_batch, crc32c, iter_batches
from kafkalite.record.codec import Compression
from kafkalite.tools import dump_log
from tests.support.cluster import BrokerCluster, http

pytestmark = pytest.mark.integration

BASE_TIMESTAMP = 1_900_000_000_000  # far ahead: retention never touches these records


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    connect = f"{zookeeper.connect_string}/corrupt-{uuid.uuid4().hex[:8]}"
    brokers = BrokerCluster(tmp_path_factory.mktemp("corrupt"), connect, size=1).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def restamp(batch: bytearray) -> bytes:
    """Fix the length field and recompute the CRC after editing a batch (a damaged batch that
    no CRC check can catch)."""
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


def with_header_count(raw: bytes, count: int) -> bytes:
    """``raw`` (one header-less record) with its header-count varint changed, CRC recomputed."""
    damaged = bytearray(raw)
    assert damaged[-1] == 0
    damaged[-1] = count << 1
    return restamp(damaged)


def produce_raw(cluster: BrokerCluster, topic: str, batch: bytes) -> protocol.ProduceResult:
    request = protocol.ProduceRequest(1, 10_000, [protocol.ProducePartition(topic, 0, batch)])
    body = b"".join(bytes(piece) for piece in protocol.encode_produce_request(request))
    answer = http(cluster.brokers[1].address, "POST", protocol.PRODUCE, raw=body,
                  content_type=protocol.BINARY_CONTENT_TYPE)
    return protocol.decode_produce_response(answer)[0]


def fetch_all(cluster: BrokerCluster, topic: str) -> protocol.FetchResult:
    request = protocol.FetchRequest([protocol.FetchPartition(topic, 0, 0)], max_wait_ms=0)
    answer = http(cluster.brokers[1].address, "POST", protocol.FETCH, raw=protocol.encode_fetch_request(request),
                  content_type=protocol.BINARY_CONTENT_TYPE)
    return protocol.decode_fetch_response(answer)[0]


def segment_of(cluster: BrokerCluster, topic: str) -> Path:
    return cluster.brokers[1].directory / "data" / f"{topic}-0" / "00000000000000000000.log"


def new_topic(cluster: BrokerCluster, prefix: str, configs: dict[str, str] | None = None) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, 1, 1, configs)
    cluster.wait_in_sync(name)
    return name


def good_batches(cluster: BrokerCluster, topic: str) -> None:
    """Ten good records in three batches (one compressed), offsets 0..9."""
    for values, codec in (([b"r0", b"r1", b"r2"], Compression.NONE), ([b"r3", b"r4", b"r5", b"r6"], Compression.LZ4),
                          ([b"r7", b"r8", b"r9"], Compression.NONE)):
        result = produce_raw(cluster, topic, build_batch(values, timestamps=BASE_TIMESTAMP, compression=codec))
        assert result.error_code == 0, result


def test_the_broker_refuses_damaged_batches_and_stores_nothing(cluster: BrokerCluster) -> None:
    topic = new_topic(cluster, "refuse")
    good_batches(cluster, topic)
    one = build_batch([b"payload"], timestamps=BASE_TIMESTAMP)
    headers = build_batch([b"payload"], timestamps=BASE_TIMESTAMP, headers=[[("hk", b"x")]])
    at = headers.index(b"\x04hk")
    non_utf8 = bytearray(headers)
    non_utf8[at + 1:at + 3] = b"\xff\xfe"
    trailing = bytearray(one) + b"\x00\x00"
    two = build_batch([b"a", b"b"], timestamps=BASE_TIMESTAMP)
    gap = bytearray(two)
    second_delta = gap.index(b"\x00\x00\x02\x01\x02b") + 2
    gap[second_delta] = 0x04  # offset deltas 0, 2 in a batch of two records
    damaged = {
        "header count 21": with_header_count(one, 21),
        "trailing bytes": restamp(trailing),
        "non-UTF-8 header key": restamp(non_utf8),
        "record count one too high": restamp(bytearray(one[:57]) + struct.pack(">i", 2) + one[61:]),
        "record attributes": restamp(bytearray(one[:HEADER_SIZE + 1]) + b"\x08" + one[HEADER_SIZE + 2:]),
        "offset deltas 0, 2 in a batch of two": restamp(gap),
    }
    for name, batch in damaged.items():
        result = produce_raw(cluster, topic, batch)
        assert protocol.error_for(result.error_code).message == "CORRUPT_MESSAGE", name
    # 1,000 bit flips in the records with the CRC recomputed: each is refused or decodes cleanly
    rng = random.Random(14)
    source = build_batch([b"value-%d" % index for index in range(5)], keys=[b"k", None, b"k", None, b"k"],
                         timestamps=[BASE_TIMESTAMP + index for index in range(5)],
                         headers=[[("trace", b"t")], [], [("a", None)], [], []])
    stored = 0
    for _ in range(1000):
        flipped = bytearray(source)
        flipped[rng.randrange(HEADER_SIZE, len(flipped))] ^= 1 << rng.randrange(8)
        candidate = restamp(flipped)
        code = produce_raw(cluster, topic, candidate).error_code
        if code:
            assert protocol.error_for(code).message == "CORRUPT_MESSAGE", candidate.hex()
        else:
            stored += 1
            RecordBatch(candidate).records()  # what was acknowledged decodes
    # the log holds the ten good records and the flipped batches that were whole, nothing else
    result = fetch_all(cluster, topic)
    assert result.error_code == 0
    offsets = [record.offset for batch in iter_batches(bytes(result.records), validate=True)
               for record in batch.records()]
    assert offsets[:10] == list(range(10))
    assert result.high_watermark == 10 + 5 * stored
    out = io.StringIO()
    code = dump_log.main(["--files", str(segment_of(cluster, topic)), "--deep-iteration"], out)
    assert code == 0, out.getvalue()
    assert "damaged" not in out.getvalue() and "impossible" not in out.getvalue()


def test_a_compacted_topic_refuses_records_without_keys(cluster: BrokerCluster) -> None:
    topic = new_topic(cluster, "compacted", {"cleanup.policy": "compact"})
    for codec in (Compression.NONE, Compression.GZIP):
        batch = build_batch([b"v1", b"v2"], keys=[b"k", None], timestamps=BASE_TIMESTAMP, compression=codec)
        assert protocol.error_for(produce_raw(cluster, topic, batch).error_code).message == "INVALID_RECORD"
        uniform = build_batch([b"v1", b"v2"], timestamps=BASE_TIMESTAMP, compression=codec)
        assert protocol.error_for(produce_raw(cluster, topic, uniform).error_code).message == "INVALID_RECORD"
    keyed = build_batch([b"v1", b"v2"], keys=[b"k1", b"k2"], timestamps=BASE_TIMESTAMP)
    assert produce_raw(cluster, topic, keyed).error_code == 0
    assert fetch_all(cluster, topic).high_watermark == 2


# --- the consumer on damaged data --------------------------------------------------------------


class Blocking:
    def __init__(self, bootstrap: str) -> None:
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                      auto_offset_reset="none")

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.consumer, name)(*args, **kwargs)

    def close(self) -> None:
        self.consumer.close()


class Asyncio:
    def __init__(self, bootstrap: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                         auto_offset_reset="none")
        self.loop.run_until_complete(self.consumer.start())

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "poll":
            name = "getmany"
        result = getattr(self.consumer, name)(*args, **kwargs)
        if asyncio.iscoroutine(result):
            result = self.loop.run_until_complete(result)
        return result

    def close(self) -> None:
        self.loop.run_until_complete(self.consumer.stop())
        self.loop.close()


def append_to_segment(cluster: BrokerCluster, topic: str, make: Callable[[int], bytes]) -> None:
    """Append the batch ``make(leader_epoch)`` at the log end of a stopped broker's segment."""
    path = segment_of(cluster, topic)
    data = path.read_bytes()
    last = list(iter_batches(data))[-1]
    batch = bytearray(make(last.partition_leader_epoch))
    struct.pack_into(">q", batch, 0, last.next_offset)
    with open(path, "ab") as handle:
        handle.write(batch)


@pytest.fixture(scope="module")
def damaged_topics(cluster: BrokerCluster) -> dict[str, str]:
    """Two topics with ten good records each, then on disk: a CRC-valid batch whose header
    count is damaged, or a batch with a bad CRC (the broker is stopped to write them)."""
    topics = {"records": new_topic(cluster, "bad-records"), "crc": new_topic(cluster, "bad-crc")}
    for topic in topics.values():
        good_batches(cluster, topic)
    broker = cluster.brokers[1]
    assert broker.stop() == 0

    def bad_header_count(epoch: int) -> bytes:
        return with_header_count(build_batch([b"bad"], timestamps=BASE_TIMESTAMP, partition_leader_epoch=epoch), 21)

    def bad_crc(epoch: int) -> bytes:
        batch = bytearray(build_batch([b"bad"], timestamps=BASE_TIMESTAMP, partition_leader_epoch=epoch))
        batch[-2] ^= 0x40
        return bytes(batch)

    append_to_segment(cluster, topics["records"], bad_header_count)
    append_to_segment(cluster, topics["crc"], bad_crc)
    broker.start()
    broker.wait_ready()
    for topic in topics.values():
        cluster.wait_for(lambda topic=topic: fetch_all(cluster, topic).high_watermark == 11, 30,
                         f"{topic} served up to 11")
    return topics


def poll_until_error(client: Any, tp: TopicPartition, timeout: float = 30) -> tuple[list[Any], BaseException]:
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            for items in client.call("poll", timeout_ms=500).values():
                records.extend(items)
        except errors.CorruptRecordError as exc:
            return records, exc
    raise AssertionError(f"no CorruptRecordError within {timeout} s; got {len(records)} records")


@pytest.mark.parametrize("flavour", [Blocking, Asyncio], ids=["blocking", "asyncio"])
@pytest.mark.parametrize("damage", ["records", "crc"])
def test_the_consumer_returns_every_record_before_damage_and_stays_there(
        cluster: BrokerCluster, damaged_topics: dict[str, str], damage: str, flavour: Any) -> None:
    topic = damaged_topics[damage]
    tp = TopicPartition(topic, 0)
    client = flavour(cluster.bootstrap)
    try:
        client.call("assign", [tp])
        client.call("seek", tp, 0)
        records, error = poll_until_error(client, tp)
        assert [(record.offset, record.value) for record in records] == [(i, b"r%d" % i) for i in range(10)]
        assert f"{topic}-0" in str(error) and "offset 10" in str(error)
        assert client.call("position", tp) == 10
        for _ in range(2):  # every poll raises again; the position does not move
            with pytest.raises(errors.CorruptRecordError, match=f"{topic}-0 at offset 10"):
                client.call("poll", timeout_ms=200)
            assert client.call("position", tp) == 10
        # a seek into the middle of the good records works as before
        client.call("seek", tp, 7)
        again, error = poll_until_error(client, tp)
        assert [record.offset for record in again] == [7, 8, 9] and "offset 10" in str(error)
        # past the damaged batch, consumption goes on with what comes after it
        client.call("seek", tp, 11)
        assert produce_raw(cluster, topic, build_batch([b"after"], timestamps=BASE_TIMESTAMP)).error_code == 0
        deadline = time.monotonic() + 30
        after: list[Any] = []
        while not after and time.monotonic() < deadline:
            for items in client.call("poll", timeout_ms=500).values():
                after.extend(items)
        assert [(record.offset, record.value) for record in after][:1] == [(11, b"after")]
    finally:
        client.close()
