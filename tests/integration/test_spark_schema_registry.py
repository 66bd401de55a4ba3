"""The Spark source and sink with typed values: Confluent-framed Avro through the schema registry.

Orders written with two compatible versions of their Avro schema are read by a batch query and
by an availableNow streaming query into a typed ``value`` struct (the subject's latest version,
older records resolved to it); the example job of compose/spark-jobs aggregates them into
windowed totals and writes those as Avro, which kafkalite's deserializer reads back. Spark
actions are few: each costs seconds.
"""

from __future__ import annotations

import importlib.util
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra (pyspark, pyarrow) is not installed")

from kafkalite import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafkalite.registry.serdes import AvroDeserializer, AvroSerializer  # noqa: E402
from tests.support.cluster import ROOT, BrokerCluster, running_cluster  # noqa: E402
from tests.support.spark import spark  # noqa: E402,F401

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "tags", "type": {"type": "array", "items": "string"}}]}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory, zookeeper, "spark-registry", size=1) as brokers:
        yield brokers


@pytest.fixture(scope="module")
def orders(cluster: BrokerCluster) -> tuple[str, list[dict[str, Any]]]:
    """A topic of 30 orders: 20 written with schema v1, then 10 with v2."""
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=2, replication_factor=1)
    url = registry(cluster)
    expected: list[dict[str, Any]] = []
    for schema, numbers in ((ORDER_V1, range(20)), (ORDER_V2, range(20, 30))):
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap,
                                 value_serializer=AvroSerializer(url, json.dumps(schema), topic=topic))
        try:
            for number in numbers:
                value = {"id": number, "item": ["apple", "pear"][number % 2], "amount": number * 0.5,
                         "tags": [f"t{number}"]}
                if schema is ORDER_V2:
                    value["note"] = f"note {number}"
                producer.send(topic, value, partition=number % 2).get(30)
                expected.append({**value, "note": value.get("note")})
        finally:
            producer.close()
    return topic, expected


def registry(cluster: BrokerCluster) -> str:
    return f"http://{cluster.brokers[1].address}/registry"


def typed_read(spark: Any, cluster: BrokerCluster, topic: str) -> Any:
    return (spark.read.format("kafkalite").option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", topic).option("valueFormat", "avro").option("schema.registry.url", registry(cluster))
            .load())


def test_batch_read_decodes_avro_into_typed_columns(spark: Any, cluster: BrokerCluster,
                                                     orders: tuple[str, list[dict[str, Any]]]) -> None:
    topic, expected = orders
    frame = typed_read(spark, cluster, topic)
    value_type = dict(frame.dtypes)["value"]
    assert value_type == "struct<id:bigint,item:string,amount:double,tags:array<string>,note:string>"
    rows = [row.asDict(recursive=True) for row in frame.select("value.*").collect()]
    assert sorted(rows, key=lambda row: row["id"]) == expected


def test_available_now_stream_reads_typed_values(spark: Any, cluster: BrokerCluster, tmp_path: Path,
                                                 orders: tuple[str, list[dict[str, Any]]]) -> None:
    topic, expected = orders
    seen: list[dict[str, Any]] = []

    def collect(frame: Any, batch_id: int) -> None:
        seen.extend(row.asDict(recursive=True) for row in frame.select("value.id", "value.note").collect())

    query = (spark.readStream.format("kafkalite").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "12")
             .option("valueFormat", "avro").option("schema.registry.url", registry(cluster))
             .load().writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None
    assert sorted(seen, key=lambda row: row["id"]) == [{"id": row["id"], "note": row["note"]} for row in expected]


def test_example_job_writes_windowed_totals_as_avro(spark: Any, cluster: BrokerCluster,
                                                    orders: tuple[str, list[dict[str, Any]]]) -> None:
    topic, expected = orders
    output = f"totals-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(output, partitions=1, replication_factor=1)
    location = ROOT / "compose" / "spark-jobs" / "typed_orders.py"
    specification = importlib.util.spec_from_file_location("typed_orders", location)
    assert specification is not None and specification.loader is not None
    job = importlib.util.module_from_spec(specification)
    specification.loader.exec_module(job)
    written = job.run(spark, cluster.bootstrap, registry(cluster), topic, output)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, consumer_timeout_ms=10_000,
                             value_deserializer=AvroDeserializer(registry(cluster)))
    try:
        consumer.assign([TopicPartition(output, 0)])
        consumer.seek_to_beginning()
        totals = [record.value for record in consumer]
    finally:
        consumer.close()
    assert written == len(totals) > 0
    by_item: dict[str, tuple[int, float]] = {}
    for total in totals:
        orders_count, amount = by_item.get(total["item"], (0, 0.0))
        by_item[total["item"]] = (orders_count + total["orders"], amount + total["amount"])
    for item in ("apple", "pear"):
        chosen = [row for row in expected if row["item"] == item]
        assert by_item[item][0] == len(chosen)
        assert by_item[item][1] == pytest.approx(sum(row["amount"] for row in chosen))


def test_typed_value_options_are_checked_at_load(spark: Any, cluster: BrokerCluster) -> None:
    for options, named in (({"subscribe": "a", "valueFormat": "avro"}, "schema.registry.url"),
                           ({"subscribe": "a", "valueFormat": "xml", "schema.registry.url": "http://x"}, "valueFormat"),
                           ({"subscribe": "a,b", "valueFormat": "avro", "schema.registry.url": registry(cluster)},
                            "valueSubject"),
                           ({"subscribe": "no-such-subject-topic", "valueFormat": "avro",
                             "schema.registry.url": registry(cluster)}, "valueSubject")):
        reader = spark.read.format("kafkalite").option("kafka.bootstrap.servers", cluster.bootstrap)
        with pytest.raises(Exception, match="SparkOptionError") as caught:  # Spark wraps the source's error
            reader.options(**options).load()
        assert f"kafkalite option '{named}'" in str(caught.value), caught.value
