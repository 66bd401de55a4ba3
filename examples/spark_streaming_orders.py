"""Streaming job: order analytics per time window, from an ``orders`` topic to an output topic.

Orders are JSON values such as ``{"order_id": "o-17", "customer": "c-3", "amount": 42.5,
"timestamp": "2024-05-01T10:00:07Z"}`` (``timestamp`` may be missing: the record's own
timestamp is used then). The job reads them with Structured Streaming through the
``kafkalite`` source, counts orders and sums amounts per tumbling event-time window (with a
watermark for late orders) and writes window records to the output topic: key = the window
start (ISO-8601), value = JSON ``{"window_start", "window_end", "orders", "revenue",
"average_amount", "largest_order"}``. In ``append`` mode (the default) each window is written
once, when the watermark has passed its end (orders later than the watermark are dropped); in
``complete`` mode every window is written again after each micro-batch — read that output like a
compacted topic, the last record of a key wins. (Spark 4.3 offers Python sinks no update mode.)

The sink is exactly-once: a restarted job (same ``--checkpoint``) neither loses nor repeats
output records.

Run against a local cluster (``scripts/kafkalite-cluster.sh start``)::

    python examples/spark_streaming_orders.py --bootstrap-server 127.0.0.1:9092 \\
        --input-topic orders --output-topic order-stats --checkpoint /tmp/order-stats-checkpoint \\
        --produce-sample 1000

``--produce-sample N`` first writes N made-up orders; ``--available-now`` processes what is in
the topic and stops (otherwise the job runs until interrupted).

Concurrency: a plain Spark driver program; :func:`run` takes an existing SparkSession (the
tests pass theirs), :func:`main` makes a local one when none is given.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any

ORDER_SCHEMA = "order_id string, customer string, amount double, timestamp timestamp"


def produce_sample_orders(bootstrap: str, topic: str, count: int, start: datetime | None = None,
                          seed: int = 7) -> list[dict[str, Any]]:
    """Write ``count`` made-up orders, a few seconds apart from ``start``; returns them."""
    from kafkalite import KafkaProducer

    generator = random.Random(seed)
    moment = start or datetime.now(timezone.utc).replace(microsecond=0)
    orders = []
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for number in range(count):
            moment += timedelta(seconds=generator.randint(1, 5))
            order = {"order_id": f"o-{number}", "customer": f"c-{generator.randint(1, 20)}",
                     "amount": round(generator.uniform(5, 200), 2),
                     "timestamp": moment.strftime("%Y-%m-%dT%H:%M:%SZ")}
            orders.append(order)
            producer.send(topic, key=order["customer"].encode(), value=json.dumps(order).encode())
        producer.flush()
    finally:
        producer.close()
    return orders


def window_stats(spark: Any, bootstrap: str, input_topic: str, window: str, watermark: str,
                 starting_offsets: str, max_offsets_per_trigger: int | None) -> Any:
    """The streaming DataFrame of per-window statistics (key, value columns for the sink)."""
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("kafkalite")
              .option("kafkalite.bootstrap.servers", bootstrap)
              .option("subscribe", input_topic)
              .option("startingOffsets", starting_offsets))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    orders = (reader.load()
              .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("order"),
                      F.col("timestamp").alias("record_time"))
              .where(F.col("order.amount").isNotNull())
              .select(F.col("order.amount").alias("amount"),
                      F.coalesce(F.col("order.timestamp"), F.col("record_time")).alias("event_time")))
    stats = (orders.withWatermark("event_time", watermark)
             .groupBy(F.window("event_time", window).alias("window"))
             .agg(F.count(F.lit(1)).alias("orders"), F.round(F.sum("amount"), 2).alias("revenue"),
                  F.round(F.avg("amount"), 2).alias("average_amount"), F.max("amount").alias("largest_order")))
    start = F.date_format(F.col("window.start"), "yyyy-MM-dd'T'HH:mm:ss'Z'")
    end = F.date_format(F.col("window.end"), "yyyy-MM-dd'T'HH:mm:ss'Z'")
    return stats.select(start.alias("key"), F.to_json(F.struct(
        start.alias("window_start"), end.alias("window_end"), "orders", "revenue", "average_amount",
        "largest_order")).alias("value"))


def run(spark: Any, bootstrap: str, input_topic: str, output_topic: str, checkpoint: str, *, window: str = "1 minute",
        watermark: str = "30 seconds", output_mode: str = "append", starting_offsets: str = "earliest",
        available_now: bool = False, trigger_seconds: float = 5.0,
        max_offsets_per_trigger: int | None = None) -> Any:
    """Start the query; with ``available_now`` wait for it to finish. Returns the query."""
    stats = window_stats(spark, bootstrap, input_topic, window, watermark, starting_offsets, max_offsets_per_trigger)
    writer = (stats.writeStream.format("kafkalite")
              .option("kafkalite.bootstrap.servers", bootstrap)
              .option("topic", output_topic)
              .option("checkpointLocation", checkpoint)
              .outputMode(output_mode)
              .queryName(f"order-stats-{output_topic}"))
    if available_now:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = writer.trigger(processingTime=f"{trigger_seconds} seconds").start()
    return query


def _session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from kafkalite.spark import register

    spark = (SparkSession.builder.master(master).appName("kafkalite-order-stats")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    parser = argparse.ArgumentParser(description="Windowed order analytics from kafkalite to kafkalite with Spark.")
    parser.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...] of kafkalite brokers")
    parser.add_argument("--input-topic", default="orders")
    parser.add_argument("--output-topic", default="order-stats")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory of the query")
    parser.add_argument("--window", default="1 minute", help="tumbling window length (Spark interval)")
    parser.add_argument("--watermark", default="30 seconds", help="how late an order may arrive")
    parser.add_argument("--output-mode", choices=("append", "complete"), default="append")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--max-offsets-per-trigger", type=int)
    parser.add_argument("--trigger-seconds", type=float, default=5.0)
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--produce-sample", type=int, default=0, metavar="N", help="first write N made-up orders")
    parser.add_argument("--master", default="local[2]", help="Spark master when this program makes the session")
    args = parser.parse_args(argv)
    if args.produce_sample:
        produce_sample_orders(args.bootstrap_server, args.input_topic, args.produce_sample)
    own_session = spark is None
    if own_session:
        spark = _session(args.master)
    try:
        query = run(spark, args.bootstrap_server, args.input_topic, args.output_topic, args.checkpoint,
                    window=args.window, watermark=args.watermark, output_mode=args.output_mode,
                    starting_offsets=args.starting_offsets, available_now=args.available_now,
                    trigger_seconds=args.trigger_seconds, max_offsets_per_trigger=args.max_offsets_per_trigger)
        if not args.available_now:
            print(f"query {query.name} running; Ctrl-C stops it", file=sys.stderr)
            reported = -1
            try:
                while query.isActive:
                    time.sleep(1)
                    progress = query.lastProgress
                    if progress and progress["batchId"] != reported and progress.get("numInputRows"):
                        reported = progress["batchId"]
                        print(f"batch {reported}: {progress['numInputRows']} orders", file=sys.stderr)
            except KeyboardInterrupt:
                query.stop()
        exception = query.exception()
        if exception is not None:
            print(f"query failed: {exception}", file=sys.stderr)
            return 1
    finally:
        if own_session:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
