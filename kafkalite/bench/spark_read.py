"""Spark read benchmark: rows/s of a local[2] batch read of 100-byte values through the
``kafkalite`` data source.

Starts one ZooKeeper and one broker (or uses ``--bootstrap``), fills a topic of
``--partitions`` partitions with ``--records`` records of 100-byte values through the bulk
producer path, then times, after a warm-up read:

* the executor read path alone, in this process (fetch + Arrow decoding, no Spark);
* ``spark.read.format("kafkalite")...load().count()`` with a local[2] SparkSession, after
  warm-up runs (the JVM's first runs are several times slower), reporting median and best;
* the same read aggregating ``sum(length(value))`` (every value reaches the JVM).

It prints figures; it is not a timed test. Run:
``python -m kafkalite.bench.spark_read [--records N] [--partitions P] [--bootstrap HOST:PORT]``.

Concurrency: single-threaded driver; Spark runs its own JVM and Python workers, the clients
their own I/O threads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kafkalite import KafkaAdminClient, KafkaProducer, NewTopic, TopicPartition
from kafkalite.bench.local_cluster import start_cluster

VALUE_SIZE = 100
CHUNK = 20_000


def _report(label: str, rows: int, seconds: float) -> None:
    print(f"{label:<46} {rows:>10,} rows in {seconds:6.2f} s  {rows / seconds:>12,.0f} rows/s", flush=True)


def fill_topic(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, enable_idempotence=False)
    values = [os.urandom(VALUE_SIZE) for _ in range(CHUNK)]
    started = time.perf_counter()
    futures = []
    sent = 0
    while sent < records:
        count = min(CHUNK, records - sent)
        futures.append(producer.send_batch(topic, values[:count], partition=(sent // CHUNK) % partitions))
        sent += count
        if len(futures) >= 8:
            futures.pop(0).get(60)
    for future in futures:
        future.get(60)
    producer.close()
    _report(f"produced into {topic} ({partitions} partitions)", records, time.perf_counter() - started)


def bench_decode(bootstrap: str, topic: str, partitions: int) -> None:
    from kafkalite.spark import ClusterClient, ReadSettings, plan_partitions, read_offset_range

    cluster = ClusterClient(bootstrap)
    try:
        tps = [TopicPartition(topic, number) for number in range(partitions)]
        start, end = cluster.earliest(tps), cluster.latest(tps)
    finally:
        cluster.close()
    started = time.perf_counter()
    rows = 0
    for part in plan_partitions(start, end, ReadSettings(bootstrap), None, None):
        for batch in read_offset_range(part):
            rows += batch.num_rows
    _report("executor read path alone (1 core, no Spark)", rows, time.perf_counter() - started)


def bench_spark(bootstrap: str, topic: str, runs: int, warmups: int) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import DataFrame, SparkSession

    from kafkalite.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("kafkalite-spark-read-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "1g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        def frame() -> DataFrame:
            return (spark.read.format("kafkalite").option("kafkalite.bootstrap.servers", bootstrap)
                    .option("subscribe", topic).load())

        frame().limit(10).collect()  # Python workers start, pyarrow loads
        for run in range(warmups):  # the JVM compiles the hot paths
            started = time.perf_counter()
            rows = frame().count()
            _report(f"spark local[2] count() warm-up {run + 1}", rows, time.perf_counter() - started)
        rates = []
        for run in range(runs):
            started = time.perf_counter()
            rows = frame().count()
            seconds = time.perf_counter() - started
            rates.append(rows / seconds)
            _report(f"spark local[2] count() run {run + 1}", rows, seconds)
        started = time.perf_counter()
        total = frame().selectExpr("count(*) AS rows", "sum(length(value)) AS bytes").collect()[0]
        _report("spark local[2] sum(length(value))", total["rows"], time.perf_counter() - started)
        print(f"count(): median {statistics.median(rates):,.0f} rows/s, best {max(rates):,.0f} rows/s "
              f"over {runs} runs after {warmups} warm-up runs", flush=True)
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=3_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5, help="timed count() runs")
    parser.add_argument("--warmups", type=int, default=2, help="untimed count() runs first (JVM warm-up)")
    parser.add_argument("--bootstrap", help="use a running broker instead of starting one")
    args = parser.parse_args(argv)
    topic = f"bench-spark-{uuid.uuid4().hex[:6]}"
    if args.bootstrap:
        fill_topic(args.bootstrap, topic, args.partitions, args.records)
        bench_decode(args.bootstrap, topic, args.partitions)
        bench_spark(args.bootstrap, topic, args.runs, args.warmups)
        return 0
    with tempfile.TemporaryDirectory(prefix="kafkalite-spark-bench-") as directory:
        zookeeper, cluster = start_cluster(Path(directory), 1)
        try:
            bootstrap = cluster.bootstrap
            fill_topic(bootstrap, topic, args.partitions, args.records)
            bench_decode(bootstrap, topic, args.partitions)
            bench_spark(bootstrap, topic, args.runs, args.warmups)
        finally:
            cluster.stop()
            zookeeper.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
