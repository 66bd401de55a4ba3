"""The Spark job of the compose stack's ``spark`` profile: summarise a kafkalite topic.

Reads every record of the topic that exists when the job starts (from each partition's log
start to its end) with kafkalite's consumer on the driver, turns them into a Spark DataFrame
(topic, partition, offset, timestamp, key, value) and prints records per partition and the
most frequent keys. Usage::

    python topic_summary.py --bootstrap-server 127.0.0.1:9092 --topic orders [--top 10]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kafkalite import KafkaConsumer, TopicPartition


def read_topic(bootstrap: str, topic: str, timeout_ms: int = 30_000) -> list[tuple[Any, ...]]:
    """Every record of ``topic`` up to the end offsets seen at the start, as tuples."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, client_id="spark-topic-summary")
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise SystemExit(f"Error: topic {topic!r} does not exist")
        assigned = [TopicPartition(topic, number) for number in sorted(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        end = consumer.end_offsets(assigned)
        rows: list[tuple[Any, ...]] = []
        remaining = {tp for tp in assigned if end[tp] > consumer.position(tp)}
        while remaining:
            batches = consumer.poll(timeout_ms=timeout_ms)
            if not batches:
                raise SystemExit(f"Error: no records within {timeout_ms} ms; still waiting for {sorted(remaining)}")
            for tp, records in batches.items():
                for record in records:
                    if record.offset < end[tp]:
                        rows.append((record.topic, record.partition, record.offset, record.timestamp,
                                     None if record.key is None else record.key.decode("utf-8", "replace"),
                                     None if record.value is None else record.value.decode("utf-8", "replace")))
                if consumer.position(tp) >= end[tp]:
                    remaining.discard(tp)
        return rows
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    """Run the job; returns the exit code."""
    parser = argparse.ArgumentParser(description="Summarise a kafkalite topic with Spark.")
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--top", type=int, default=10, help="how many of the most frequent keys to show")
    arguments = parser.parse_args(argv)

    from pyspark.sql import SparkSession, functions

    rows = read_topic(arguments.bootstrap_server, arguments.topic)
    spark = SparkSession.builder.master("local[2]").appName("kafkalite-topic-summary").getOrCreate()
    try:
        frame = spark.createDataFrame(rows, "topic string, partition int, offset long, timestamp long, "
                                            "key string, value string")
        print(f"{frame.count()} records in topic {arguments.topic}")
        frame.groupBy("partition").agg(functions.count("*").alias("records"),
                                       functions.min("offset").alias("first_offset"),
                                       functions.max("offset").alias("last_offset")).orderBy("partition").show()
        frame.where(functions.col("key").isNotNull()).groupBy("key").count() \
            .orderBy(functions.desc("count"), "key").show(arguments.top)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
