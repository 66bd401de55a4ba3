"""A Spark job over typed values: Avro orders in, windowed totals out, schemas in the registry.

Reads the ``orders`` topic with ``valueFormat=avro`` (each value decoded with its writer schema
from the schema registry and resolved to the subject's latest version, so ``value`` is a struct
column), sums the amount per item over one-minute windows of the record timestamp, and writes
the results to the output topic as Avro with the ``<output>-value`` subject's schema (registered
here when missing). Usage::

    python typed_orders.py --bootstrap-server 127.0.0.1:9092 \\
        --schema-registry-url http://127.0.0.1:8081 --topic orders --output-topic order-totals
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

#: The schema of one result (registered under ``<output-topic>-value``).
TOTALS_SCHEMA = {"type": "record", "name": "OrderTotal", "namespace": "shop", "fields": [
    {"name": "window_start", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "item", "type": "string"},
    {"name": "orders", "type": "long"},
    {"name": "amount", "type": "double"}]}


def run(spark: Any, bootstrap: str, registry_url: str, topic: str, output_topic: str) -> int:
    """Read, aggregate, write; the number of result rows written."""
    from pyspark.sql import functions

    from kafkalite.registry.client import RegistryClient
    from kafkalite.spark import register

    register(spark)
    RegistryClient(registry_url).register(f"{output_topic}-value", json.dumps(TOTALS_SCHEMA))
    orders = (spark.read.format("kafkalite").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("valueFormat", "avro")
              .option("schema.registry.url", registry_url).load())
    totals = (orders.groupBy(functions.window("timestamp", "1 minute"), functions.col("value.item").alias("item"))
              .agg(functions.count("*").alias("orders"), functions.sum("value.amount").alias("amount")))
    results = totals.select(functions.struct(
        functions.col("window.start").alias("window_start"), "item", "orders", "amount").alias("value"))
    rows = results.count()
    (results.write.format("kafkalite").option("kafka.bootstrap.servers", bootstrap).option("topic", output_topic)
     .option("valueFormat", "avro").option("schema.registry.url", registry_url).mode("append").save())
    return int(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Windowed totals of typed (Avro) orders with Spark.")
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--schema-registry-url", required=True)
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--output-topic", default="order-totals")
    arguments = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("kafkalite-typed-orders").getOrCreate()
    try:
        written = run(spark, arguments.bootstrap_server, arguments.schema_registry_url, arguments.topic,
                      arguments.output_topic)
    finally:
        spark.stop()
    print(f"wrote {written} windowed totals to {arguments.output_topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
