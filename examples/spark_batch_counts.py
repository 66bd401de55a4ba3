"""Batch job: count the records of a kafkalite topic per key with Spark.

Reads the whole topic (or ``--starting-offsets`` / ``--ending-offsets``) through the
``kafkalite`` data source, groups by key and prints ``key<TAB>count`` lines, most frequent
first (records without a key count under ``<null>``). With ``--output-topic`` the counts are
also written back to kafkalite: key = the record key, value = the count as text.

Run against a local cluster (``scripts/kafkalite-cluster.sh start``)::

    python examples/spark_batch_counts.py --bootstrap-server 127.0.0.1:9092 --topic orders
    python examples/spark_batch_counts.py --bootstrap-server 127.0.0.1:9092 --topic orders \\
        --output-topic order-counts

Concurrency: a plain Spark driver program; :func:`count_per_key` takes an existing SparkSession
(the tests pass theirs), :func:`main` makes a local one when none is given.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

NULL_KEY = "<null>"


def count_per_key(spark: Any, bootstrap: str, topic: str, starting_offsets: str = "earliest",
                  ending_offsets: str = "latest", output_topic: str | None = None) -> list[tuple[str, int]]:
    """``[(key, count)]``, most frequent first, ties by key; optionally written to ``output_topic``."""
    from pyspark.sql import functions as F

    records = (spark.read.format("kafkalite")
               .option("kafkalite.bootstrap.servers", bootstrap)
               .option("subscribe", topic)
               .option("startingOffsets", starting_offsets)
               .option("endingOffsets", ending_offsets)
               .load())
    counts = (records
              .select(F.coalesce(F.col("key").cast("string"), F.lit(NULL_KEY)).alias("key"))
              .groupBy("key").count()
              .orderBy(F.desc("count"), F.asc("key")))
    rows = counts.collect()
    if output_topic:
        (counts.select(F.col("key"), F.col("count").cast("string").alias("value"))
         .write.format("kafkalite")
         .option("kafkalite.bootstrap.servers", bootstrap)
         .option("topic", output_topic)
         .mode("append").save())
    return [(row["key"], int(row["count"])) for row in rows]


def _session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from kafkalite.spark import register

    spark = (SparkSession.builder.master(master).appName("kafkalite-batch-counts")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    parser = argparse.ArgumentParser(description="Count the records of a kafkalite topic per key with Spark.")
    parser.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...] of kafkalite brokers")
    parser.add_argument("--topic", required=True, help="the topic to count")
    parser.add_argument("--output-topic", help="also write key → count (as text) to this topic")
    parser.add_argument("--starting-offsets", default="earliest", help="earliest or a JSON of offsets")
    parser.add_argument("--ending-offsets", default="latest", help="latest or a JSON of offsets")
    parser.add_argument("--master", default="local[2]", help="Spark master when this program makes the session")
    args = parser.parse_args(argv)
    own_session = spark is None
    if own_session:
        spark = _session(args.master)
    try:
        counts = count_per_key(spark, args.bootstrap_server, args.topic, args.starting_offsets, args.ending_offsets,
                               args.output_topic)
    finally:
        if own_session:
            spark.stop()
    for key, count in counts:
        print(f"{key}\t{count}")
    print(f"# {sum(count for _, count in counts)} records, {len(counts)} keys", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
