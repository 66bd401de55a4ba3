"""Client throughput benchmark: one ZooKeeper, one broker, one Python producer and consumer.

Prints records/s and MB/s for 100-byte values with acks=1:

* producer ``send()`` (one future per record) and the bulk ``send_batch()``;
* consumer ``poll()`` (ConsumerRecords) and the bulk ``poll_batches()`` + ``values()``;

then, with ``--profile``, the top functions of a cProfile run of each path. It is a program to
read the figures of, not a timed test. Run: ``python -m kafkalite.bench.clients [--records N]``.

Concurrency: single-threaded driver; the clients run their own I/O threads.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from kafkalite import KafkaAdminClient, KafkaConsumer, KafkaProducer, NewTopic, TopicPartition
from kafkalite.bench.local_cluster import start_cluster

VALUE_SIZE = 100


def _report(label: str, records: int, seconds: float) -> None:
    rate = records / seconds
    print(f"{label:<38} {records:>10,} records in {seconds:6.2f} s  {rate:>12,.0f} records/s  "
          f"{rate * VALUE_SIZE / 1e6:8.1f} MB/s", flush=True)


def _profiled(run: Callable[[], None], enabled: bool, title: str) -> None:
    if not enabled:
        run()
        return
    profile = cProfile.Profile()
    profile.enable()
    run()
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(12)
    print(f"--- profile: {title} (calling thread only; tottime order)")
    print("\n".join(out.getvalue().splitlines()[4:24]))


def bench(bootstrap: str, records: int, profile: bool) -> None:
    value = b"v" * VALUE_SIZE
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    send_topic = f"bench-send-{uuid.uuid4().hex[:6]}"
    bulk_topic = f"bench-bulk-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(send_topic, 1, 1), NewTopic(bulk_topic, 1, 1)])
    admin.close()

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=256 * 1024,
                             enable_idempotence=False)
    producer.send(send_topic, value).get(30)
    producer.send(bulk_topic, value).get(30)

    def produce_send() -> None:
        send = producer.send
        started = time.perf_counter()
        for _ in range(records):
            send(send_topic, value)
        producer.flush()
        _report("producer send() acks=1", records, time.perf_counter() - started)

    def produce_bulk() -> None:
        values = [value] * records
        started = time.perf_counter()
        step = 100_000
        futures = [producer.send_batch(bulk_topic, values[start:start + step]) for start in range(0, records, step)]
        for future in futures:
            future.get(120)
        _report("producer send_batch() acks=1", records, time.perf_counter() - started)

    _profiled(produce_send, profile, "producer send()")
    _profiled(produce_bulk, profile, "producer send_batch()")
    producer.close()

    def consume_poll() -> None:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=5000,
                                 fetch_max_wait_ms=100)
        consumer.assign([TopicPartition(bulk_topic, 0)])
        consumer.poll(timeout_ms=5000, max_records=1)
        count = 0
        started = time.perf_counter()
        while count < records:
            for items in consumer.poll(timeout_ms=2000).values():
                count += len(items)
        _report("consumer poll() ConsumerRecords", count, time.perf_counter() - started)
        consumer.close()

    def consume_bulk() -> None:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                                 max_partition_fetch_bytes=4 * 1024 * 1024)
        consumer.assign([TopicPartition(bulk_topic, 0)])
        count = 0
        started = time.perf_counter()
        while count < records:
            for batch in consumer.poll_batches(timeout_ms=2000):
                count += len(batch.values())
        _report("consumer poll_batches() + values()", count, time.perf_counter() - started)
        consumer.close()

    _profiled(consume_poll, profile, "consumer poll()")
    _profiled(consume_bulk, profile, "consumer poll_batches()")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--profile", action="store_true", help="print cProfile top functions of each path")
    parser.add_argument("--bootstrap", help="use a running broker instead of starting one")
    args = parser.parse_args(argv)
    if args.bootstrap:
        bench(args.bootstrap, args.records, args.profile)
        return 0
    with tempfile.TemporaryDirectory(prefix="kafkalite-bench-") as directory:
        zookeeper, cluster = start_cluster(Path(directory), 1)
        try:
            print(f"1 broker at {cluster.bootstrap}; {args.records:,} records of {VALUE_SIZE} bytes", flush=True)
            bench(cluster.bootstrap, args.records, args.profile)
        finally:
            cluster.stop()
            zookeeper.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
