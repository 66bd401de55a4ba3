"""A Spark driver program for fault tests: copies one topic to another with a streaming query.

Run as ``python -m tests.support.spark_copy_driver BOOTSTRAP SOURCE SINK CHECKPOINT LOCAL_DIR
[--max-offsets-per-trigger N] [--available-now] [--hold]``. It starts its own local[2] SparkSession
(this Python process and its JVM, which :class:`tests.support.spark.SparkDriverProcess` kills
with -9), reads ``SOURCE`` from the earliest offset with the ``kafkalite`` source, and writes key
and value to ``SINK`` with the exactly-once ``kafkalite`` sink, checkpointed in
``CHECKPOINT``. Small Arrow batches (200 rows) give every write task several batches, so the
sink has a "mid-write" state. Without ``--available-now`` the query runs until killed; with
it, the program drains what is there now, prints ``drained`` and exits 0 (1 if the query
failed). With ``--hold``, the program sets everything up (its JVM, the data source, the query's
definition, which Spark checks through the source's schema) and then waits for a line on its
standard input before it starts the query: the checkpoint is not touched until then, so a test
can start the next run while the current one is still running and release it once the current
one is killed (an end of input without a line exits 2). The test-only pause (``KAFKALITE_SPARK_TEST_PAUSE_AT``, see
:func:`kafkalite.spark.pause_for_tests`) comes from the environment and reaches Spark's Python
workers through the JVM.
"""

from __future__ import annotations

import argparse
import sys

from tests.support.spark import session_builder


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "source", "sink", "checkpoint", "local_dir"):
        parser.add_argument(name)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=2000)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--hold", action="store_true")
    arguments = parser.parse_args(argv)

    from kafkalite.spark import register

    spark = (session_builder("kafkalite-copy-driver")
             .config("spark.local.dir", arguments.local_dir)
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
             # a driver that lives for seconds: start the JVM fast (client JIT only, serial GC)
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    writer = (spark.readStream.format("kafkalite").option("kafkalite.bootstrap.servers", arguments.bootstrap)
              .option("subscribe", arguments.source).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(arguments.max_offsets_per_trigger)).load()
              .selectExpr("key", "value")
              .writeStream.format("kafkalite").option("kafkalite.bootstrap.servers", arguments.bootstrap)
              .option("topic", arguments.sink).option("checkpointLocation", arguments.checkpoint))
    if arguments.available_now:
        writer = writer.trigger(availableNow=True)
    if arguments.hold:
        print("holding", flush=True)
        if not sys.stdin.readline():
            return 2
    query = writer.start()
    try:
        query.awaitTermination()
    except Exception as exc:  # the query's failure, reported to the test through the exit code
        print(f"query failed: {exc}", file=sys.stderr, flush=True)
        return 1
    print("drained", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
