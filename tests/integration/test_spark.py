"""The ``kafkalite`` PySpark data source against a real broker and the shared local[2] session.

Covers: Arrow decoding against the record decoder; option errors; batch reads with every offset
option and with data aged out (failOnDataLoss); stream planning (rate limits, minOffsets with
maxTriggerDelay, new and vanished partitions); availableNow + maxOffsetsPerTrigger micro-batch
sizes; a query restarted from its checkpoint after a crash between the sink's commit and
Spark's (no loss, no duplicates, a partition added meanwhile); a write task failing half-way
and its micro-batch replayed (no duplicates); the sink's recovery scan over several partitions,
topics and attempts; option errors at load(); assign / subscribe of missing topics; batch
writes with headers, keys, partitions and a topic column; kafka.isolation.level over committed,
aborted and open transactions (batch and availableNow streams); the two example jobs. Spark actions
are kept few: each costs seconds. Driver crashes: test_spark_faults.py.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra (pyspark, pyarrow) is not installed")

from kafkalite import (  # noqa: E402
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
    NewPartitions,
    NewTopic,
    TopicPartition,
)
from kafkalite.record.batch import RecordBatch, build_batch  # noqa: E402
from kafkalite.record.codec import Compression  # noqa: E402
from tests.support.cluster import ROOT, BrokerCluster  # noqa: E402
from tests.support.spark import spark  # noqa: E402,F401

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# recent enough that retention (checked every 300 ms by the test broker) keeps the records
START = (datetime.now(UTC) - timedelta(hours=1)).replace(second=0, microsecond=0)
START_MS = int(START.timestamp() * 1000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    connect = f"{zookeeper.connect_string}/spark-{uuid.uuid4().hex[:8]}"
    brokers = BrokerCluster(tmp_path_factory.mktemp("spark"), connect, size=1,
                            extra_properties={"log.retention.check.interval.ms": "300"}).start()
    try:
        yield brokers
    finally:
        brokers.stop()


@pytest.fixture(scope="module")
def bootstrap(cluster: BrokerCluster) -> str:
    return cluster.bootstrap


@pytest.fixture(scope="module")
def admin(bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        yield client
    finally:
        client.close()


def new_topic(admin: KafkaAdminClient, partitions: int = 1, configs: dict[str, str] | None = None,
              prefix: str = "spark") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    return name


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> None:
    """records: dicts with value and optional key, partition, timestamp_ms, headers."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    try:
        futures = [producer.send(topic, value=item["value"], key=item.get("key"), partition=item.get("partition"),
                                 timestamp_ms=item.get("timestamp_ms"), headers=item.get("headers"))
                   for item in records]
        for future in futures:
            future.get(30)
    finally:
        producer.close()


def consume_all(bootstrap: str, topic: str) -> list[Any]:
    """Every record of ``topic`` (all partitions), by partition then offset."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        partitions = sorted(consumer.partitions_for_topic(topic) or ())
        tps = [TopicPartition(topic, number) for number in partitions]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        records: list[Any] = []
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "reading the topic back took too long"
            for items in consumer.poll(timeout_ms=500).values():
                records.extend(items)
        return sorted(records, key=lambda record: (record.partition, record.offset))
    finally:
        consumer.close()


def spark_read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("kafkalite").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


# --- decoding (no Spark) ---------------------------------------------------------------------------


def test_arrow_decoding_matches_the_record_decoder() -> None:
    from kafkalite.client.fetcher import decode_records
    from kafkalite.spark import ArrowBatchDecoder

    values = [bytes([index % 251]) * 100 for index in range(3000)]
    ragged_keys = [b"k%d" % (index % 37) if index % 5 else None for index in range(3000)]
    shapes = {
        "uniform": build_batch(values, timestamps=START_MS, base_offset=500),
        "fixed keys": build_batch(values, keys=[b"key-%04d" % (index % 97) for index in range(3000)],
                                  timestamps=START_MS),
        "ragged": build_batch([value[:index % 100] for index, value in enumerate(values)], keys=ragged_keys,
                              timestamps=[START_MS + index for index in range(3000)]),
        "headers": build_batch(values[:200], timestamps=START_MS, headers=[
            [("trace", b"t%d" % index), ("empty", None)] if index % 3 else [] for index in range(200)]),
        "null values": build_batch([None] * 20 + values[:20], keys=[b"k"] * 40, timestamps=START_MS),
        "lz4": build_batch(values, timestamps=START_MS, compression=Compression.LZ4),
        "log append time": build_batch(values[:50], timestamps=START_MS, timestamp_type=1),
        "large records": build_batch([value * 300 for value in values[:8]], timestamps=START_MS),
        "empty keys and values": build_batch([b""] * 100, keys=[b""] * 100, timestamps=START_MS),
        "three-byte offset deltas": build_batch([b"v"] * 10_000, timestamps=START_MS),
    }
    for shape, raw in shapes.items():
        batch = RecordBatch(raw, 0)
        for include_headers in (False, True):
            decoder = ArrowBatchDecoder("orders", 2, include_headers)
            for low, high in ((0, 1 << 62), (batch.base_offset + 3, batch.base_offset + batch.record_count - 2)):
                decoded = decoder.decode(batch, low, high)
                expected = decode_records(batch, "orders", 2, low, high)
                assert decoded is not None and decoded.schema == decoder.schema, shape
                rows = decoded.to_pylist()
                assert len(rows) == len(expected), shape
                for row, record in zip(rows, expected):
                    assert (row["key"], row["value"], row["offset"], row["topic"], row["partition"]) == \
                        (record.key, record.value, record.offset, "orders", 2), shape
                    assert row["timestampType"] == record.timestamp_type, shape
                    assert int(row["timestamp"].timestamp() * 1000) == record.timestamp, shape
                    if include_headers:
                        want = [{"key": name, "value": value} for name, value in record.headers] or None
                        assert row["headers"] == want, shape


def test_options_are_checked_and_errors_name_the_option() -> None:
    from kafkalite.spark import SinkOptions, SourceOptions, SparkOptionError

    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    cases = [
        ({"subscribe": "t"}, "kafkalite.bootstrap.servers"),
        ({**base, "assign": '{"t":[0]}'}, "subscribe"),
        ({**base, "startingoffsets": "latest"}, "startingOffsets"),
        ({**base, "startingoffsets": '{"t":{"0":-1}}'}, "startingOffsets"),
        ({**base, "endingoffsets": "earliest"}, "endingOffsets"),
        ({**base, "startingoffsets": "{not json"}, "startingOffsets"),
        ({**base, "maxoffsetspertrigger": "10"}, "maxOffsetsPerTrigger"),
        ({**base, "failondataloss": "maybe"}, "failOnDataLoss"),
        ({**base, "minpartitions": "0"}, "minPartitions"),
        ({**base, "subscribepattern": "("}, "subscribe"),
        ({"kafka.bootstrap.servers": "h:1", "subscribepattern": "("}, "subscribePattern"),
        ({"kafka.bootstrap.servers": "h:1", "assign": '{"t":"0"}'}, "assign"),
        ({**base, "startingtimestamp": "yesterday"}, "startingTimestamp"),
        ({**base, "kafka.security.protocol": "TLS"}, "kafka.security.protocol"),
        ({**base, "kafka.ssl.truststore.type": "JKS"}, "kafka.ssl.truststore.type"),
        ({**base, "includeheader": "true"}, "includeheader"),
    ]
    for options, named in cases:
        with pytest.raises(SparkOptionError) as caught:
            SourceOptions.parse(options, streaming=False)
        assert caught.value.option == named and f"'{named}'" in str(caught.value), (options, caught.value)
    streaming_cases = [
        ({**base, "endingoffsets": "latest"}, "endingOffsets"),
        ({**base, "maxtriggerdelay": "soon"}, "maxTriggerDelay"),
    ]
    for options, named in streaming_cases:
        with pytest.raises(SparkOptionError) as caught:
            SourceOptions.parse(options, streaming=True)
        assert caught.value.option == named
    parsed = SourceOptions.parse({**base, "maxOffsetsPerTrigger": "5", "maxTriggerDelay": "2s",
                                  "minOffsetsPerTrigger": "3", "startingOffsets": "latest"}, streaming=True)
    assert (parsed.max_offsets_per_trigger, parsed.min_offsets_per_trigger, parsed.max_trigger_delay_ms) == \
        (5, 3, 2000)
    with pytest.raises(SparkOptionError, match=r"kafka\.acks"):
        SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "kafka.acks": "1"}, streaming=True)


def test_stream_option_errors_surface_at_load_naming_the_option(spark: Any, bootstrap: str) -> None:
    from kafkalite.spark import SourceOptions, SparkOptionError

    def stream(**options: str) -> Any:
        reader = (spark.readStream.format("kafkalite").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", "anything"))
        for name, value in options.items():
            reader = reader.option(name, value)
        return reader.load()

    # Spark lowercases option names before a Python data source sees them: the hint gives the spelling
    with pytest.raises(Exception, match=r"'includeheader': unknown option .*did you mean includeHeaders\?"):
        stream(includeHeader="true")
    with pytest.raises(Exception, match=r"'startingOffsets': is not valid JSON"):
        stream(startingOffsets='{"anything": {"0": 5')
    with pytest.raises(Exception, match=r"'maxOffsetsPerTrigger': must be a positive integer"):
        stream(maxOffsetsPerTrigger="many")
    # what only a streaming query rejects is reported by the query, not hidden behind PySpark's cleanup
    query = stream(endingOffsets="latest").writeStream.format("noop").start()
    with pytest.raises(Exception) as caught:
        query.awaitTermination(60)
    assert "'endingOffsets': is not valid for streaming queries" in str(caught.value)
    assert "UnboundLocalError" not in str(caught.value)
    # load() knows no more than "a source": options of either kind pass until the query starts
    SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "endingOffsets": "latest",
                         "maxOffsetsPerTrigger": "5"}, streaming=None)
    with pytest.raises(SparkOptionError, match="'maxOffsetsPerTrigger'"):
        SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "maxOffsetsPerTrigger": "5"},
                            streaming=False)


def test_assign_to_a_missing_topic_or_partition_fails_fast_and_subscribe_warns(
        spark: Any, bootstrap: str, admin: KafkaAdminClient, caplog: pytest.LogCaptureFixture) -> None:
    from kafkalite.spark import ClusterClient, Subscription

    existing = new_topic(admin, partitions=2)
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    # Each failure comes from the check of the assign option before any read (which gives up
    # after a few seconds), not from a read that waits out its timeouts: its message says so.
    upfront = "the assign option names what does not exist: "
    with pytest.raises(Exception, match=f"UNKNOWN_TOPIC_OR_PARTITION.*{upfront}topic {missing}"):
        spark_read(spark, bootstrap, assign=json.dumps({missing: [0], existing: [0]})).count()
    with pytest.raises(Exception, match=f"UNKNOWN_TOPIC_OR_PARTITION.*{upfront}partition {existing}-5 "
                                        r"\(the topic has 2 partitions\)"):
        spark_read(spark, bootstrap, assign=json.dumps({existing: [0, 5]})).count()
    query = (spark.readStream.format("kafkalite").option("kafka.bootstrap.servers", bootstrap)
             .option("assign", json.dumps({missing: [0]})).load().writeStream.format("noop").start())
    with pytest.raises(Exception, match=f"UNKNOWN_TOPIC_OR_PARTITION.*{upfront}topic {missing}"):
        query.awaitTermination(60)
    # subscribe: Spark's behaviour (no rows), and a warning naming the topic
    assert spark_read(spark, bootstrap, subscribe=missing).count() == 0
    cluster = ClusterClient(bootstrap)
    try:
        with caplog.at_level("WARNING", logger="kafkalite.spark"):
            assert cluster.partitions(Subscription("subscribe", topics=(existing, missing))) == [
                TopicPartition(existing, 0), TopicPartition(existing, 1)]
            cluster.partitions(Subscription("subscribe", topics=(missing,)))
        warnings = [record.getMessage() for record in caplog.records if record.name == "kafkalite.spark"]
        assert len(warnings) == 1 and f"subscribed topic {missing} does not exist" in warnings[0], warnings
    finally:
        cluster.close()


def test_pyspark_kafkalite_is_discoverable() -> None:
    import importlib
    from pkgutil import iter_modules

    from pyspark.sql.datasource import DataSource

    assert "pyspark_kafkalite" in {info.name for info in iter_modules([str(ROOT)])}
    module = importlib.import_module("pyspark_kafkalite")
    assert issubclass(module.DefaultSource, DataSource) and module.DefaultSource.name() == "kafkalite"


# --- stream planning on the driver (real broker, no Spark) ---------------------------------------


def test_stream_planning_limits_new_partitions_and_data_loss(bootstrap: str, admin: KafkaAdminClient) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

    from kafkalite.spark import DataLossError, KafkaliteStreamReader, SourceOptions, offsets_from_json

    topic = new_topic(admin, partitions=2)
    produce(bootstrap, topic, [{"value": b"a%d" % index, "partition": 0} for index in range(30)]
            + [{"value": b"b%d" % index, "partition": 1} for index in range(10)])
    options = {"kafkalite.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
    reader = KafkaliteStreamReader(SourceOptions.parse(options, streaming=True))
    waiting = KafkaliteStreamReader(SourceOptions.parse({**options, "minOffsetsPerTrigger": "100",
                                                         "maxTriggerDelay": "1s"}, streaming=True))
    try:
        start = reader.initialOffset()
        assert start == {topic: {"0": 0, "1": 0}}
        assert isinstance(reader.getDefaultReadLimit(), ReadAllAvailable)
        assert isinstance(waiting.getDefaultReadLimit(), ReadMinRows)
        # Spark's proportional rule: 20 records over 30 + 10 available
        limited = reader.latestOffset(start, ReadMaxRows(20))
        assert limited == {topic: {"0": 15, "1": 5}}
        # minOffsetsPerTrigger: the first trigger goes, then 40 < 100 waits until maxTriggerDelay passed
        assert waiting.latestOffset(start, ReadMinRows(100)) == {topic: {"0": 30, "1": 10}}
        assert waiting.latestOffset(start, ReadMinRows(100)) == start
        time.sleep(1.1)  # the behaviour under test: maxTriggerDelay (1 s) passes, then the trigger goes
        assert waiting.latestOffset(start, ReadMinRows(100)) == {topic: {"0": 30, "1": 10}}
        waiting.stop()
        planned = reader.partitions(start, limited)
        assert [(part.partition, part.from_offset, part.until_offset) for part in planned] == [(0, 0, 15), (1, 0, 5)]
        # a partition added later is read from its beginning
        admin.create_partitions({topic: NewPartitions(3)})
        produce(bootstrap, topic, [{"value": b"c%d" % index, "partition": 2} for index in range(4)])
        latest = reader.latestOffset(limited, ReadAllAvailable())
        assert latest == {topic: {"0": 30, "1": 10, "2": 4}}
        planned = reader.partitions(limited, latest)
        assert [(part.partition, part.from_offset, part.until_offset) for part in planned] == \
            [(0, 15, 30), (1, 5, 10), (2, 0, 4)]
        # availableNow: never past what was there when it started
        reader.prepareForTriggerAvailableNow()
        produce(bootstrap, topic, [{"value": b"late", "partition": 0}])
        assert reader.latestOffset(latest, ReadAllAvailable()) == latest
        # offsets that went back (the topic was recreated) and partitions that vanished
        gone = {topic: {"0": 30, "1": 10, "2": 4, "9": 7}}
        with pytest.raises(DataLossError, match="failOnDataLoss"):
            reader.partitions(gone, latest)
        lenient = KafkaliteStreamReader(SourceOptions.parse({**options, "failOnDataLoss": "false"}, streaming=True))
        back = {topic: {"0": 40, "1": 10, "2": 4}}
        assert [(part.partition, part.from_offset, part.until_offset) for part in lenient.partitions(back, latest)] \
            == []
        assert offsets_from_json(latest)[TopicPartition(topic, 2)] == 4
        lenient.stop()
    finally:
        reader.stop()


# --- batch reads -------------------------------------------------------------------------------------


def test_batch_reads_with_offset_and_timestamp_options(spark: Any, bootstrap: str, admin: KafkaAdminClient) -> None:
    from pyspark.sql import functions as F

    topic = new_topic(admin, partitions=3)
    records = [{"value": f"v{p}-{index}".encode(), "key": f"k{index % 4}".encode(), "partition": p,
                "timestamp_ms": START_MS + index * 1000, "headers": [("n", str(index).encode())] if index % 2 else None}
               for p in range(3) for index in range(20)]
    produce(bootstrap, topic, records)

    everything = spark_read(spark, bootstrap, subscribe=topic, includeHeaders="true")
    assert [(field.name, field.dataType.simpleString()) for field in everything.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int"), ("headers", "array<struct<key:string,value:binary>>")]
    rows = everything.orderBy("partition", "offset").collect()
    assert len(rows) == 60
    first = rows[1]
    assert (first["key"], first["value"], first["topic"], first["partition"], first["offset"],
            first["timestampType"]) == (b"k1", b"v0-1", topic, 0, 1, 0)
    assert first["timestamp"].replace(tzinfo=None) == (START + timedelta(seconds=1)).astimezone().replace(tzinfo=None)
    assert [tuple(header) for header in first["headers"]] == [("n", b"1")] and rows[0]["headers"] is None

    def offsets_by_partition(frame: Any) -> dict[int, list[int]]:
        result: dict[int, list[int]] = {}
        for row in frame.select("partition", "offset").collect():
            result.setdefault(row["partition"], []).append(row["offset"])
        return {key: sorted(value) for key, value in result.items()}

    # JSON offsets with -2 / -1 and explicit numbers, one Spark action for the lot via union
    by_offsets = spark_read(spark, bootstrap, subscribe=topic,
                            startingOffsets=json.dumps({topic: {"0": -2, "1": 5, "2": 18}}),
                            endingOffsets=json.dumps({topic: {"0": 3, "1": -1, "2": 20}}))
    assert offsets_by_partition(by_offsets) == {0: [0, 1, 2], 1: list(range(5, 20)), 2: [18, 19]}

    by_time = spark_read(spark, bootstrap, subscribe=topic, startingTimestamp=str(START_MS + 15_000),
                         endingTimestamp=str(START_MS + 17_000))
    assert offsets_by_partition(by_time) == {0: [15, 16], 1: [15, 16], 2: [15, 16]}

    per_partition = spark_read(spark, bootstrap, subscribe=topic, startingOffsetsByTimestamp=json.dumps(
        {topic: {"0": START_MS + 19_000, "1": START_MS + 18_500, "2": -2}}),
        endingOffsetsByTimestamp=json.dumps({topic: {"0": -1, "1": -1, "2": START_MS + 2000}}))
    assert offsets_by_partition(per_partition) == {0: [19], 1: [19], 2: [0, 1]}

    assigned = spark_read(spark, bootstrap, assign=json.dumps({topic: [1]}), minPartitions="4")
    assert assigned.rdd.getNumPartitions() == 4
    pattern = spark_read(spark, bootstrap, subscribePattern=topic[:-3] + ".*", startingOffsets="earliest",
                         maxRecordsPerPartition="7")
    assert pattern.rdd.getNumPartitions() == 9
    counts = (assigned.select(F.lit("assign").alias("how"), "partition")
              .unionByName(pattern.select(F.lit("pattern").alias("how"), "partition"))
              .groupBy("how", "partition").count().collect())
    assert sorted((row["how"], row["partition"], row["count"]) for row in counts) == [
        ("assign", 1, 20), ("pattern", 0, 20), ("pattern", 1, 20), ("pattern", 2, 20)]

    with pytest.raises(Exception, match="no record at or after the timestamp"):
        spark_read(spark, bootstrap, subscribe=topic, startingTimestamp=str(START_MS + 3_600_000)).count()
    with pytest.raises(Exception, match="must name every partition"):
        spark_read(spark, bootstrap, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 1}})).count()


def test_batch_read_of_aged_out_offsets_follows_fail_on_data_loss(spark: Any, bootstrap: str,
                                                                  admin: KafkaAdminClient) -> None:
    topic = new_topic(admin, configs={"segment.bytes": "4096", "retention.bytes": "8192"})
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for index in range(300):  # one record per batch: small segments roll often
            producer.send(topic, value=b"%05d" % index + b"x" * 395).get(30)
    finally:
        producer.close()
    tp = TopicPartition(topic, 0)
    deadline = time.monotonic() + 30
    while admin.beginning_offsets([tp])[tp] == 0:
        assert time.monotonic() < deadline, "retention never removed the old segments"
        time.sleep(0.2)
    log_start = admin.beginning_offsets([tp])[tp]
    from_zero = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        spark_read(spark, bootstrap, subscribe=topic, startingOffsets=from_zero).count()
    rows = spark_read(spark, bootstrap, subscribe=topic, startingOffsets=from_zero,
                      failOnDataLoss="false").select("offset").collect()
    offsets = sorted(row["offset"] for row in rows)
    assert offsets and offsets[0] >= log_start and offsets == list(range(offsets[0], 300))


# --- streaming reads -----------------------------------------------------------------------------------


def test_available_now_micro_batches_follow_max_offsets_per_trigger(spark: Any, bootstrap: str,
                                                                     admin: KafkaAdminClient, tmp_path: Path) -> None:
    topic = new_topic(admin, partitions=3)
    produce(bootstrap, topic, [{"value": b"%d-%d" % (p, index), "partition": p}
                               for p in range(3) for index in range(40)])
    sizes: list[int] = []
    seen: list[bytes] = []

    def collect(frame: Any, batch_id: int) -> None:
        values = [row["value"] for row in frame.select("value").collect()]
        sizes.append(len(values))
        seen.extend(values)

    query = (spark.readStream.format("kafkalite").option("kafkalite.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "30")
             .load().writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None
    assert sizes == [30, 30, 30, 30]
    assert [progress["numInputRows"] for progress in query.recentProgress if progress["numInputRows"]] == sizes
    assert sorted(seen) == sorted(b"%d-%d" % (p, index) for p in range(3) for index in range(40))


# --- transactions: kafka.isolation.level -------------------------------------------------------------


def _wait_for_end_offsets(admin: KafkaAdminClient, tp: TopicPartition, stable: int, high_watermark: int) -> None:
    """Wait until the partition's last stable offset and high watermark are these (EndTxn
    answers before the partition leader has written the transaction's marker)."""
    deadline = time.monotonic() + 30
    while True:
        seen = (admin.list_offsets({tp: -1}, isolation_level="read_committed")[tp].offset,
                admin.list_offsets({tp: -1}, isolation_level="read_uncommitted")[tp].offset)
        if seen == (stable, high_watermark):
            return
        assert time.monotonic() < deadline, f"LSO and high watermark are {seen}, not {(stable, high_watermark)}"
        time.sleep(0.1)


def test_isolation_level_reads_committed_transactions_and_waits_at_an_open_one(
        spark: Any, bootstrap: str, admin: KafkaAdminClient, tmp_path: Path) -> None:
    topic = new_topic(admin, prefix="spark-txn")
    tp = TopicPartition(topic, 0)
    committed = [b"committed-%d" % index for index in range(5)]
    aborted = [b"aborted-%d" % index for index in range(3)]
    held = [b"open-%d" % index for index in range(4)]
    # a regression that stalls on a marker fails within pollTimeoutMs instead of two minutes
    poll = {"kafkaConsumer.pollTimeoutMs": "20000"}

    def rows(**options: str) -> list[tuple[bytes, int]]:
        frame = spark_read(spark, bootstrap, subscribe=topic, **poll, **options)
        return sorted(((bytes(row["value"]), row["offset"]) for row in frame.select("value", "offset").collect()),
                      key=lambda item: item[1])

    def stream_once(checkpoint: Path) -> tuple[list[tuple[bytes, int]], dict[str, Any]]:
        """One availableNow run of a read_committed stream: its rows and its last end offset."""
        seen: list[tuple[bytes, int]] = []

        def collect(frame: Any, batch_id: int) -> None:
            seen.extend((bytes(row["value"]), row["offset"]) for row in frame.select("value", "offset").collect())

        reader = (spark.readStream.format("kafkalite").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
        for name, value in poll.items():
            reader = reader.option(name, value)
        query = (reader.load().writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert not query.isActive and query.exception() is None
        ends = [progress["sources"][0]["endOffset"] for progress in query.recentProgress if progress["numInputRows"]]
        assert ends, "the run read nothing"
        end = ends[-1]
        return sorted(seen, key=lambda item: item[1]), json.loads(end) if isinstance(end, str) else dict(end)

    # offsets: committed 0-4, commit marker 5, aborted 6-8, abort marker 9, open transaction 10-13
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"spark-{uuid.uuid4().hex[:8]}",
                             transaction_timeout_ms=600_000)
    try:
        producer.init_transactions()
        for values, end in ((committed, producer.commit_transaction), (aborted, producer.abort_transaction)):
            producer.begin_transaction()
            for value in values:
                producer.send(topic, value=value)
            producer.flush()
            end()
        producer.begin_transaction()
        for value in held:
            producer.send(topic, value=value)
        producer.flush()
        _wait_for_end_offsets(admin, tp, stable=10, high_watermark=14)

        # read_committed (the default): the committed records; the read ends at the LSO, right
        # after a commit marker, an aborted transaction and its abort marker
        assert rows() == [(value, offset) for offset, value in enumerate(committed)]
        assert rows(**{"kafka.isolation.level": "read_committed"}) == rows()
        # read_uncommitted: every data record, open and aborted ones too; no marker is a row
        everything = ([(value, offset) for offset, value in enumerate(committed)]
                      + [(value, 6 + index) for index, value in enumerate(aborted)]
                      + [(value, 10 + index) for index, value in enumerate(held)])
        assert rows(**{"kafka.isolation.level": "read_uncommitted"}) == everything
        # an endingOffsets past the LSO waits for the open transaction (no data loss reported)
        with pytest.raises(Exception, match="open transaction holds read_committed reads at the last stable "
                                            r"offset 10 \(the high watermark is 14\)"):
            spark_read(spark, bootstrap, subscribe=topic, endingOffsets=json.dumps({topic: {"0": 14}}),
                       **{"kafkaConsumer.pollTimeoutMs": "3000"}).count()
        # a stream stops at the LSO too
        streamed, end = stream_once(tmp_path / "checkpoint")
        assert streamed == [(value, offset) for offset, value in enumerate(committed)]
        assert end == {topic: {"0": 10}}

        producer.commit_transaction()
        _wait_for_end_offsets(admin, tp, stable=15, high_watermark=15)
    finally:
        producer.close()

    # now both transactions are committed; the reads end at the commit marker (offset 14)
    assert rows() == ([(value, offset) for offset, value in enumerate(committed)]
                      + [(value, 10 + index) for index, value in enumerate(held)])
    assert rows(**{"kafka.isolation.level": "read_uncommitted"}) == everything
    streamed, end = stream_once(tmp_path / "checkpoint")
    assert streamed == [(value, 10 + index) for index, value in enumerate(held)]
    assert end == {topic: {"0": 15}}


def _copy_query(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: Path, **source_options: str) -> Any:
    reader = (spark.readStream.format("kafkalite").option("kafkalite.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest"))
    for name, value in source_options.items():
        reader = reader.option(name, value)
    return (reader.load().selectExpr("key", "value")
            .writeStream.format("kafkalite").option("kafkalite.bootstrap.servers", bootstrap).option("topic", sink)
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def test_restart_after_a_crash_between_sink_commit_and_spark_commit_neither_loses_nor_repeats(
        spark: Any, bootstrap: str, admin: KafkaAdminClient, tmp_path: Path) -> None:
    source = new_topic(admin, partitions=2)
    sink = new_topic(admin, partitions=2)
    checkpoint = tmp_path / "checkpoint"
    produce(bootstrap, source, [{"value": b"first-%d" % index, "key": b"%d" % index, "partition": index % 2}
                                for index in range(90)])
    query = _copy_query(spark, bootstrap, source, sink, checkpoint, maxOffsetsPerTrigger="30")
    query.awaitTermination(120)
    assert query.exception() is None
    assert [progress["numInputRows"] for progress in query.recentProgress if progress["numInputRows"]] == [30, 30, 30]
    # The state a crash leaves after the sink committed batch 2 but before Spark's commit log
    # recorded it: offsets/2 exists, commits/2 does not. Spark replays batch 2 on restart.
    last = max(int(path.name) for path in (checkpoint / "commits").iterdir() if path.name.isdigit())
    assert last == 2
    (checkpoint / "commits" / "2").unlink()
    for crc in (checkpoint / "commits").glob(".2.crc"):
        crc.unlink()
    # new data, also in a partition added while the query was down
    admin.create_partitions({source: NewPartitions(3)})
    produce(bootstrap, source, [{"value": b"second-%d" % index, "partition": index % 3} for index in range(30)])
    query = _copy_query(spark, bootstrap, source, sink, checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None
    batches = {progress["batchId"]: progress["numInputRows"] for progress in query.recentProgress}
    assert batches[2] == 30, "Spark must have replayed batch 2"
    written = Counter(record.value for record in consume_all(bootstrap, sink))
    expected = Counter([b"first-%d" % index for index in range(90)] + [b"second-%d" % index for index in range(30)])
    assert written == expected


def test_a_write_task_failing_half_way_is_replayed_without_duplicates(spark: Any, bootstrap: str,
                                                                        admin: KafkaAdminClient,
                                                                        tmp_path: Path) -> None:
    # The sink topic refuses one big record of source partition 1 (max.message.bytes), so that
    # write task fails after it wrote the rows before it; the operator raises the limit and
    # restarts the query, which replays the micro-batch.
    source = new_topic(admin, partitions=2)
    sink = new_topic(admin, configs={"max.message.bytes": "65536"})
    checkpoint = tmp_path / "checkpoint"

    def value(index: int) -> bytes:
        return b"p%d-%03d-" % (index % 2, index) + b"x" * (200_000 if index == 121 else 1000)

    produce(bootstrap, source, [{"value": value(index), "partition": index % 2} for index in range(200)])

    def start() -> Any:
        return (spark.readStream.format("kafkalite").option("kafkalite.bootstrap.servers", bootstrap)
                .option("subscribe", source).option("startingOffsets", "earliest").load().select("value")
                .writeStream.format("kafkalite").option("kafkalite.bootstrap.servers", bootstrap)
                .option("topic", sink).option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True).start())

    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    try:
        query = start()
        with pytest.raises(Exception, match=r"max\.message\.bytes"):
            query.awaitTermination(120)
        partial = Counter(record.value[:3] for record in consume_all(bootstrap, sink))
        assert 0 < partial[b"p1-"] < 100, partial
        admin.incremental_alter_configs([ConfigResource(ConfigResourceType.TOPIC, sink,
                                                        configs={"max.message.bytes": "1048576"})])
        query = start()
        query.awaitTermination(120)
        assert query.exception() is None
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    written = Counter(record.value for record in consume_all(bootstrap, sink))
    assert written == Counter(value(index) for index in range(200))


def test_sink_recovery_scan_finds_earlier_attempts_in_every_partition_and_topic(bootstrap: str,
                                                                                admin: KafkaAdminClient) -> None:
    # Two cut-off attempts of one write task wrote rows to three partitions of two topics; a
    # third producer wrote equal rows that are not theirs. A new attempt must drop exactly the
    # rows the two attempts wrote (the scan once sought only one partition of a topic).
    from kafkalite.spark import AttemptRecord, SinkOptions, WrittenRecords

    first, second = new_topic(admin, partitions=3), new_topic(admin, partitions=2)
    started_ms = int(time.time() * 1000)
    writes = {"attempt-1": [(first, index % 3, b"row-%d" % index) for index in range(12)],
              "attempt-2": [(first, index % 3, b"row-%d" % index) for index in range(12, 18)]
              + [(second, index % 2, b"row-%d" % index) for index in range(4)],
              "other": [(first, 1, b"row-20"), (second, 1, b"row-21")]}
    producer_ids: dict[str, tuple[int, int]] = {}
    for rows in writes.values():
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
        try:
            for future in [producer.send(topic, key=b"k", value=value, partition=partition)
                           for topic, partition, value in rows]:
                future.get(30)
        finally:
            producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(first, 1)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + 30
        while len(producer_ids) < 3:
            assert time.monotonic() < deadline, "the producer ids did not show up"
            for item in consumer.poll_batches(timeout_ms=500):
                value = next(iter(item.records())).value
                name = "other" if value == b"row-20" else "attempt-2" if int(value[4:]) >= 12 else "attempt-1"
                producer_ids[name] = (item.batch.producer_id, item.batch.producer_epoch)
    finally:
        consumer.close()
    attempts = [AttemptRecord(f"sink/attempt/7/0/{name}", 7, 0, False, started_ms, *producer_ids[name])
                for name in ("attempt-1", "attempt-2")]
    written = WrittenRecords(SinkOptions(bootstrap_servers=bootstrap), attempts)
    replay = [(topic, partition, b"k", value, ()) for rows in writes.values() for topic, partition, value in rows] \
        + [(first, 2, b"k", b"row-30", ()), (second, None, b"k", b"row-2", ())]
    kept, dropped = written.remove_written(replay)
    assert dropped == 22
    assert sorted(row[3] for row in kept) == [b"row-2", b"row-20", b"row-21", b"row-30"]


def test_a_task_attempt_that_marked_itself_done_is_completed_unless_the_driver_confirmed_it(
        bootstrap: str, admin: KafkaAdminClient) -> None:
    # A killed write task's input can end early without an error, and its attempt then marks
    # itself done after part of its rows. A replay must write the rest; it skips the task only
    # for an attempt the driver confirmed (the task's result reached abort()). The writer runs
    # here as on an executor, under a task context carrying the micro-batch and query ids.
    import pyarrow as pa
    from pyspark import TaskContext

    from kafkalite.spark import SinkOptions
    from kafkalite.spark.writer import KafkaliteStreamWriter, SinkColumns

    sink = new_topic(admin)
    rows = [b"row-%02d" % index for index in range(40)]
    writer = KafkaliteStreamWriter(SinkOptions(bootstrap_servers=bootstrap, topic=sink),
                                   SinkColumns(value_is_string=False))

    def batches(values: list[bytes]) -> Iterator[Any]:
        for start in range(0, len(values), 10):
            yield pa.record_batch([pa.array(values[start:start + 10], pa.binary())], names=["value"])

    assert TaskContext.get() is None
    TaskContext(partitionId=0, localProperties={"streaming.sql.batchId": "3",
                                                "sql.streaming.queryId": f"query-{uuid.uuid4().hex[:8]}"})
    try:
        cut_short = writer.write(batches(rows[:25]))
        assert (cut_short.records, cut_short.skipped) == (25, 0)
        replay = writer.write(batches(rows))
        assert (replay.records, replay.skipped) == (15, 25)
        writer.abort([None, replay], 3)
        confirmed = writer.write(batches(rows))
        assert (confirmed.records, confirmed.skipped) == (0, 40) and "succeeded" in confirmed.note
    finally:
        TaskContext._setTaskContext(None)
    assert sorted(record.value for record in consume_all(bootstrap, sink)) == rows


# --- batch writes ------------------------------------------------------------------------------------


def test_batch_write_round_trips_keys_headers_partitions_and_topic_column(spark: Any, bootstrap: str,
                                                                          admin: KafkaAdminClient) -> None:
    first = new_topic(admin, partitions=3)
    second = new_topic(admin, partitions=1)
    rows = [(f"key-{index}" if index % 4 else None, f"value-{index}".encode(), first if index % 3 else second,
             (index % 3) if index % 3 else None,
             [("index", str(index).encode()), ("null", None)] if index % 2 else [])
            for index in range(60)]
    frame = spark.createDataFrame(rows, "key string, value binary, topic string, partition int, "
                                        "headers array<struct<key: string, value: binary>>")
    frame.write.format("kafkalite").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    back = (spark_read(spark, bootstrap, subscribe=f"{first},{second}", includeHeaders="true")
            .selectExpr("cast(key as string) as key", "value", "topic", "partition", "headers").collect())
    got = sorted(((row["key"] or ""), row["value"], row["topic"], row["partition"],
                  [tuple(header) for header in row["headers"] or []]) for row in back)
    want = sorted(((key or ""), value, topic, partition if partition is not None else 0, headers)
                  for key, value, topic, partition, headers in rows)
    assert got == want
    with pytest.raises(Exception, match="append"):
        frame.write.format("kafkalite").option("kafka.bootstrap.servers", bootstrap).mode("overwrite").save()
    with pytest.raises(Exception, match="value column"):
        frame.select("key").write.format("kafkalite").option("kafka.bootstrap.servers", bootstrap) \
            .option("topic", first).mode("append").save()


# --- the example jobs ----------------------------------------------------------------------------------


def _load_example(name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_jobs(spark: Any, bootstrap: str, admin: KafkaAdminClient, tmp_path: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    counts_job = _load_example("spark_batch_counts")
    orders_job = _load_example("spark_streaming_orders")

    events = new_topic(admin, partitions=2)
    produce(bootstrap, events, [{"value": b"e%d" % index, "key": b"user-%d" % (index % 3) if index % 10 else None}
                                for index in range(50)])
    counts_topic = new_topic(admin)
    assert counts_job.main(["--bootstrap-server", bootstrap, "--topic", events, "--output-topic", counts_topic],
                           spark=spark) == 0
    expected_counts = Counter(f"user-{index % 3}" if index % 10 else "<null>" for index in range(50))
    ranked = sorted(expected_counts.items(), key=lambda item: (-item[1], item[0]))
    assert capsys.readouterr().out.splitlines() == [f"{key}\t{count}" for key, count in ranked]
    assert sorted((record.key, record.value) for record in consume_all(bootstrap, counts_topic)) == sorted(
        (key.encode(), str(count).encode()) for key, count in ranked)

    orders = new_topic(admin, partitions=2, prefix="orders")
    stats = new_topic(admin, prefix="order-stats")
    sample = orders_job.produce_sample_orders(bootstrap, orders, 60, start=START)
    arguments = ["--bootstrap-server", bootstrap, "--input-topic", orders, "--output-topic", stats,
                 "--checkpoint", str(tmp_path / "orders-checkpoint"), "--available-now", "--window", "1 minute",
                 "--max-offsets-per-trigger", "25"]
    assert orders_job.main(arguments, spark=spark) == 0
    emitted: dict[str, list[dict[str, Any]]] = {}
    for record in consume_all(bootstrap, stats):
        emitted.setdefault(record.key.decode(), []).append(json.loads(record.value))
    expected: dict[str, list[float]] = {}
    moments = []
    for order in sample:
        moment = datetime.strptime(order["timestamp"], "%Y-%m-%dT%H:%M:%SZ")
        moments.append(moment)
        expected.setdefault(moment.replace(second=0).strftime("%Y-%m-%dT%H:%M:%SZ"), []).append(order["amount"])
    watermark = max(moments) - timedelta(seconds=30)
    closed = {window for window in expected
              if datetime.strptime(window, "%Y-%m-%dT%H:%M:%SZ") + timedelta(minutes=1) <= watermark}
    assert len(closed) >= 2 and closed <= set(emitted) <= set(expected)
    for window, records in emitted.items():
        assert len(records) == 1, f"append mode writes window {window} once"
        amounts = expected[window]
        assert records[0]["orders"] == len(amounts)
        assert records[0]["revenue"] == pytest.approx(round(sum(amounts), 2))
        assert records[0]["largest_order"] == max(amounts)
    shutil.rmtree(tmp_path / "orders-checkpoint")
