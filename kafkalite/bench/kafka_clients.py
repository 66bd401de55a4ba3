"""confluent-kafka (librdkafka) throughput against a broker over Kafka's wire protocol.

``python -m kafkalite.bench.kafka_clients (--bootstrap HOST:PORT | --mock) [--records N]``
produces ``N`` records of 100-byte values (acks=1, no key, no compression) to partition 0 of a
new topic with a confluent-kafka ``Producer``, then reads them back from the beginning with a
``Consumer`` (assigned, no group), and prints one line per run::

    kafka produce <target>: <N> records in <s> s, <rate> records/s, <MB/s> MB/s
    kafka consume <target>: <N> records in <s> s, <rate> records/s, <MB/s> MB/s

With ``--mock`` the target is librdkafka's built-in mock cluster (``test.mock.num.brokers=1``),
started inside the producer (its broker listens on a loopback port, which the consumer then
bootstraps from), so the same client code runs against kafkalite and against the mock and the
two figures compare the brokers. The producer's rate is from its first ``produce()`` to the end
of ``flush()``; the consumer's from its first record to its last (see :func:`consume`). Both runs use the client
settings :data:`PRODUCER_SETTINGS` and :data:`CONSUMER_SETTINGS`, printed first: the consumer's
``queued.min.messages`` and ``fetch.queue.backoff.ms=0`` keep librdkafka fetching while the
application drains its queue (with the defaults, ``fetch.queue.backoff.ms=1000`` pauses each
partition's fetcher for a second whenever the local queue is full, which caps any broker near
200 k records/s on this scale).

Exit status 0, 1 when a record failed or the consumer did not get every record in time.

Concurrency: single-threaded driver; librdkafka runs its own threads.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import Any

VALUE_SIZE = 100
PRODUCER_SETTINGS: dict[str, Any] = {
    "acks": 1, "linger.ms": 5, "batch.size": 1_000_000, "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
    "compression.type": "none", "enable.idempotence": False, "delivery.report.only.error": True,
}
CONSUMER_SETTINGS: dict[str, Any] = {
    "queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 0, "enable.auto.commit": False,
    "enable.partition.eof": False, "fetch.wait.max.ms": 100,
}
#: The mock cluster's settings (librdkafka's built-in broker, started by the producer).
MOCK_SETTINGS: dict[str, Any] = {"test.mock.num.brokers": 1}


def settings_line() -> str:
    """The client settings of both runs, as one printable line."""
    def show(settings: dict[str, Any]) -> str:
        return " ".join(f"{key}={value}" for key, value in settings.items())
    return f"kafka settings: producer {show(PRODUCER_SETTINGS)}; consumer {show(CONSUMER_SETTINGS)}"


def _report(kind: str, target: str, records: int, seconds: float) -> str:
    rate = records / seconds if seconds > 0 else float("inf")
    return (f"kafka {kind} {target}: {records} records in {seconds:.2f} s, {rate:.0f} records/s, "
            f"{rate * VALUE_SIZE / 1e6:.1f} MB/s")


def _create_topic(confluent_kafka: Any, producer: Any, bootstrap: str, topic: str, mock: bool) -> None:
    """A topic of one partition on kafkalite (CreateTopics); on the mock cluster, which has no
    controller to create topics with, the Metadata request auto-creates it (with 4 partitions, of
    which the runs use partition 0 only)."""
    if not mock:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([confluent_kafka.admin.NewTopic(topic, num_partitions=1,
                                                                      replication_factor=1)], operation_timeout=30)
        futures[topic].result(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the leader must be known before the clock starts
        partitions = producer.list_topics(topic, timeout=10).topics[topic].partitions
        if partitions and partitions[0].leader >= 0:
            return
        time.sleep(0.05)
    raise RuntimeError(f"no leader for {topic}")


def produce(producer: Any, topic: str, records: int, errors: list[str]) -> float:
    """Seconds to produce and flush ``records`` values (failures are reported into ``errors``)."""
    value = b"v" * VALUE_SIZE
    send = producer.produce
    poll = producer.poll
    started = time.perf_counter()
    sent = 0
    while sent < records:
        try:
            send(topic, value, partition=0)
            sent += 1
        except BufferError:  # the local queue is full: serve the (error-only) delivery reports
            poll(0.001)
    left = producer.flush(120)
    seconds = time.perf_counter() - started
    if left:
        errors.append(f"{left} records still queued after flush")
    return seconds


def consume(confluent_kafka: Any, bootstrap: str, topic: str, records: int) -> float | None:
    """Seconds spent reading ``records`` from the beginning of partition 0, counted from the
    first record received to the last (the consumer's start and first fetch excluded, as in
    Kafka's ``fetch.nMsg.sec``); None when not all arrived within 120 s.

    The mock cluster keeps only about the last 5 MB of a partition: when the partition holds
    fewer than ``records``, the consumer reads what it holds again from its log start (a seek)
    on reaching its end, until it has read ``records``, and the clock stops from each end to the
    first record after the seek; kafkalite keeps them all (one pass).
    """
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                                         **CONSUMER_SETTINGS})
    try:
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, low)])
        received = 0
        seconds = 0.0
        pass_started: float | None = None
        next_offset = low
        deadline = time.monotonic() + 120
        while received < records:
            if time.monotonic() > deadline:
                return None
            # exactly what is left of the pass at most: consume() waits for that many or the timeout
            wanted = min(10_000, high - next_offset, records - received)
            batch = consumer.consume(num_messages=wanted, timeout=1.0)
            if not batch:
                continue
            if pass_started is None:
                pass_started = time.perf_counter()
            for message in batch:
                if message.error() is not None:
                    raise RuntimeError(f"consumer error: {message.error()}")
            received += len(batch)
            next_offset = batch[-1].offset() + 1
            if next_offset >= high or received >= records:
                seconds += time.perf_counter() - pass_started
                pass_started = None
                if received < records:
                    next_offset = low
                    consumer.seek(confluent_kafka.TopicPartition(topic, 0, low))
        return seconds
    finally:
        consumer.close()


def run(bootstrap: str | None, records: int) -> int:
    """Produce then consume against ``bootstrap`` (None: the mock cluster); print the figures."""
    import confluent_kafka
    import confluent_kafka.admin

    target = "mock" if bootstrap is None else "kafkalite"
    topic = f"bench-kafka-{uuid.uuid4().hex[:8]}"
    errors: list[str] = []

    def on_delivery(error: Any, message: Any) -> None:  # failed records only (delivery.report.only.error)
        if error is not None and len(errors) < 10:
            errors.append(str(error))

    producer_config = dict(PRODUCER_SETTINGS, on_delivery=on_delivery)
    if bootstrap is None:
        producer_config.update(MOCK_SETTINGS)
    else:
        producer_config["bootstrap.servers"] = bootstrap
    producer = confluent_kafka.Producer(producer_config)
    if bootstrap is None:  # the mock broker's address, from the producer's own Metadata answer
        broker = next(iter(producer.list_topics(timeout=10).brokers.values()))
        bootstrap = f"{broker.host}:{broker.port}"
    _create_topic(confluent_kafka, producer, bootstrap, topic, target == "mock")
    seconds = produce(producer, topic, records, errors)
    print(_report("produce", target, records, seconds), flush=True)
    if errors:
        print(f"kafka produce {target}: failed: {errors[0]}", file=sys.stderr, flush=True)
        return 1
    consumed = consume(confluent_kafka, bootstrap, topic, records)
    if consumed is None:
        print(f"kafka consume {target}: not every record within 120 s", file=sys.stderr, flush=True)
        return 1
    print(_report("consume", target, records, consumed), flush=True)
    del producer  # with --mock, the mock cluster lives as long as the producer
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap", help="a broker's Kafka-protocol address (kafkalite's listener)")
    where.add_argument("--mock", action="store_true", help="librdkafka's built-in mock cluster, 1 broker")
    parser.add_argument("--records", type=int, default=2_000_000)
    arguments = parser.parse_args(argv)
    print(settings_line(), flush=True)
    return run(None if arguments.mock else arguments.bootstrap, arguments.records)


if __name__ == "__main__":
    sys.exit(main())
