"""The per-record ``send()`` path beside confluent-kafka's ``produce()`` on librdkafka's mock cluster.

``python -m kafkalite.bench.send_path --bootstrap HOST:PORT --topic T [--records N] [--rounds R]
[--acks 1|all] [--no-peer]`` sends ``N`` records of 100-byte values (no key, no callbacks, one
``flush()`` at the end) with kafkalite's ``KafkaProducer.send()`` to partition 0 of topic ``T``
on the kafkalite cluster at ``HOST:PORT``, and the same number with confluent-kafka's
``Producer.produce()`` to librdkafka's built-in mock cluster (``test.mock.num.brokers=1``,
started inside this process), the client settings of :mod:`kafkalite.bench.kafka_clients`
(acks, linger, batch size; delivery reports for failures only). It alternates: ``R`` rounds
(default 3) of ``N / R`` records each, the peer first, so that both see the same state of the
machine, and prints one line per run and then::

    send-path <implementation>: send() <rate> records/s, produce() on the mock <rate> records/s, ratio <median>

where the implementation is ``compiled`` or ``pure-python`` (``KAFKALITE_NO_EXTENSIONS=1``), the
rates are over all records of each side and the ratio is the median of the rounds' ratios. A run
is from the first call to the end of ``flush()``. ``--no-peer`` leaves the mock out (the line
then gives the kafkalite rate alone).

Exit status 0; 1 when a record of the mock's run failed; a failed kafkalite send raises.

Concurrency: single-threaded driver; each producer runs its own I/O thread(s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from typing import Any

from kafkalite.bench.kafka_clients import MOCK_SETTINGS, PRODUCER_SETTINGS, VALUE_SIZE, produce
from kafkalite.client.producer_core import SEND_IMPLEMENTATION


def kafkalite_round(bootstrap: str, topic: str, records: int, acks: str) -> float:
    """Seconds to ``send()`` and flush ``records`` values with kafkalite's producer."""
    from kafkalite import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all" if acks == "all" else int(acks), linger_ms=5,
                             batch_size=PRODUCER_SETTINGS["batch.size"], buffer_memory=256 * 1024 * 1024)
    try:
        producer.partitions_for(topic)
        value = b"v" * VALUE_SIZE
        send = producer.send
        started = time.perf_counter()
        first = send(topic, value)
        for _ in range(records - 2):
            send(topic, value)
        last = send(topic, value) if records > 1 else first
        producer.flush()
        seconds = time.perf_counter() - started
        first.get(30)  # raises the send's error, if it failed
        last.get(30)
        return seconds
    finally:
        producer.close()


class MockPeer:
    """confluent-kafka's producer on librdkafka's mock cluster, kept for every round."""

    def __init__(self) -> None:
        import confluent_kafka

        self.errors: list[str] = []
        config = dict(PRODUCER_SETTINGS, on_delivery=self._delivered, **MOCK_SETTINGS)
        self.producer: Any = confluent_kafka.Producer(config)
        self.topic = f"bench-send-{uuid.uuid4().hex[:8]}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the mock auto-creates the topic on Metadata
            partitions = self.producer.list_topics(self.topic, timeout=10).topics[self.topic].partitions
            if partitions and partitions[0].leader >= 0:
                return
            time.sleep(0.05)
        raise RuntimeError("the mock cluster did not create the topic")

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None and len(self.errors) < 10:
            self.errors.append(str(error))

    def round(self, records: int) -> float:
        return produce(self.producer, self.topic, records, self.errors)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--bootstrap", required=True, help="the kafkalite cluster's address")
    parser.add_argument("--topic", required=True, help="an existing topic; records go to partition 0")
    parser.add_argument("--records", type=int, default=1_500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--acks", choices=("1", "all"), default="1")
    parser.add_argument("--no-peer", action="store_true", help="leave confluent-kafka's mock run out")
    arguments = parser.parse_args(argv)
    if arguments.records < 1 or arguments.rounds < 1:
        parser.error("--records and --rounds must be positive")
    per_round = max(1, arguments.records // arguments.rounds)
    peer = None if arguments.no_peer else MockPeer()
    ours: list[float] = []
    theirs: list[float] = []
    for number in range(1, arguments.rounds + 1):
        if peer is not None:
            seconds = peer.round(per_round)
            theirs.append(seconds)
            print(f"send-path round {number}: produce() on the mock: {per_round / seconds:.0f} records/s", flush=True)
            if peer.errors:
                print(f"send-path: the mock's producer failed: {peer.errors[0]}", file=sys.stderr, flush=True)
                return 1
        seconds = kafkalite_round(arguments.bootstrap, arguments.topic, per_round, arguments.acks)
        ours.append(seconds)
        print(f"send-path round {number}: send() ({SEND_IMPLEMENTATION}, acks={arguments.acks}): "
              f"{per_round / seconds:.0f} records/s", flush=True)
    total = per_round * arguments.rounds
    line = f"send-path {SEND_IMPLEMENTATION}: send() {total / sum(ours):.0f} records/s"
    if theirs:
        ratio = statistics.median(their / mine for mine, their in zip(ours, theirs))  # rate over rate
        line += f", produce() on the mock {total / sum(theirs):.0f} records/s, ratio {ratio:.2f}"
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
