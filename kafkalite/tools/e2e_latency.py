"""``kafkalite-e2e-latency.sh``: end-to-end latency from ``send()`` to the consumer, like Kafka's
``kafka-e2e-latency.sh`` (EndToEndLatency).

``kafkalite-e2e-latency.sh BOOTSTRAP TOPIC NUM_MESSAGES ACKS MESSAGE_SIZE [PROPERTIES_FILE]``
works as Kafka's tool does: it sends one record of MESSAGE_SIZE random bytes, waits for its acknowledgement,
polls until the consumer has it (checking it is the same record, and the only one), and
repeats, NUM_MESSAGES times. It prints ``i<TAB>latency ms`` every 1000 records, then::

    Avg latency: 1.2345 ms

    Percentiles: 50th = 1.101, 99th = 2.870, 99.9th = 4.312

Latencies are in milliseconds with three decimals (Kafka truncates them to whole ms); a
percentile is ``sorted[int(fraction * count)]`` as in Kafka. ACKS is ``1`` or ``all`` (a
latency test needs acknowledgements). The consumer reads every partition of the topic from
its end (no consumer group); the producer uses ``linger.ms=0``. PROPERTIES_FILE (Kafka's
names) goes to both clients, each taking the settings it knows (bootstrap servers, acks, the
offset reset and the group stay the tool's). The topic is created by the brokers'
auto-creation when it does not exist.

``--rate R`` measures latency under a steady load instead: the producer sends NUM_MESSAGES
records at R records/s (paced like Kafka's ThroughputThrottler, without waiting for
acknowledgements) while a consumer in a separate process reads them; each record carries its
send time (``CLOCK_MONOTONIC``, shared by processes on one machine) and a sequence number, and
its latency is from just before ``send()`` to the ``poll_batches()`` call that returned it.
Before the clock starts one record makes the round trip, so connections are established. The
output adds a line ``Sent N records in S s (X records/s); received M, lost L, duplicated D.``
ahead of the two lines above. MESSAGE_SIZE must then be at least 16 bytes.

Exit codes: 0 done; 1 a record was lost, changed or not consumed in time, or a broker error;
2 bad arguments; 130 interrupted.

Concurrency: fixed mode is single-threaded (the clients run their own I/O threads); in rate
mode the consumer runs in a child process started with ``spawn`` and reports over a pipe.
"""

from __future__ import annotations

import array
import multiprocessing
import multiprocessing.connection
import random
import struct
import sys
import time
from typing import Any, TextIO

from kafkalite.client import KafkaConsumer, KafkaProducer, TopicPartition
from kafkalite.client.consumer_settings import ConsumerSettings
from kafkalite.client.producer_settings import ProducerSettings
from kafkalite.config import load_properties
from kafkalite.errors import ConfigError, KafkaliteError
from kafkalite.tools.common import EXIT_FAILED, EXIT_OK, SECURITY_OPTIONS, ToolArgumentParser, UsageError, run_cli
from kafkalite.tools.producer_perf_test import ThroughputThrottler, client_options

POLL_TIMEOUT_MS = 60_000
PROGRESS_EVERY = 1000
HEADER = struct.Struct(">qq")  # send time (monotonic ns), sequence number
WARM_UP_SEQUENCE = -1
CONSUMER_READY_TIMEOUT_SECONDS = 60.0
DRAIN_TIMEOUT_SECONDS = 30.0


class EndToEndError(KafkaliteError):
    """A record did not come back as sent (missing, different, or more than one)."""


def build_parser() -> ToolArgumentParser:
    """The command line: Kafka's positional arguments plus ``--rate``."""
    parser = ToolArgumentParser(prog="kafkalite-e2e-latency.sh",
                                description="Measure the latency from send() until a consumer has the record "
                                            "(Kafka's kafka-e2e-latency.sh).")
    parser.add_argument("broker_list", metavar="BOOTSTRAP", help="the broker(s) to connect to, host:port[,...]")
    parser.add_argument("topic", metavar="TOPIC", help="the topic to use")
    parser.add_argument("num_messages", metavar="NUM_MESSAGES", type=int, help="number of records")
    parser.add_argument("producer_acks", metavar="ACKS", help="producer acks: 1 or all")
    parser.add_argument("message_size", metavar="MESSAGE_SIZE", type=int, help="record value size in bytes")
    parser.add_argument("properties_file", metavar="PROPERTIES_FILE", nargs="?",
                        help="client settings (Kafka's names); each client takes those it knows")
    parser.add_argument("--rate", type=float, default=None, metavar="R",
                        help="send at R records/s without waiting, with the consumer in another process, "
                             "instead of one record at a time")
    return parser


def acks_option(text: str) -> int | str:
    """ACKS as a producer option; 0 is refused (a latency test needs acknowledgements)."""
    if text in ("all", "-1"):
        return "all"
    if text == "1":
        return 1
    raise UsageError(f"latency testing requires synchronous acknowledgement: ACKS must be 1 or all, got {text!r}")


def percentile(ordered: list[float], fraction: float) -> float:
    """Kafka's percentile: ``ordered[int(fraction * count)]`` (``ordered`` sorted, non-empty)."""
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary_lines(latencies_ms: list[float]) -> list[str]:
    """The two result lines (and the blank line between them, as Kafka prints it)."""
    if not latencies_ms:
        return ["Avg latency: NaN ms", "", "Percentiles: 50th = NaN, 99th = NaN, 99.9th = NaN"]
    ordered = sorted(latencies_ms)
    average = sum(ordered) / len(ordered)
    return [f"Avg latency: {average:.4f} ms", "",
            f"Percentiles: 50th = {percentile(ordered, 0.5):.3f}, 99th = {percentile(ordered, 0.99):.3f}, "
            f"99.9th = {percentile(ordered, 0.999):.3f}"]


def client_settings(path: str | None, known: set[str]) -> dict[str, Any]:
    """The settings of PROPERTIES_FILE that a client with options ``known`` accepts (as
    Kafka's tool gives one file to both clients, each taking what it knows)."""
    if path is None:
        return {}
    try:
        options = client_options(load_properties(path))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    return {name: value for name, value in options.items() if name in known or name in SECURITY_OPTIONS}


def make_producer(bootstrap: str, acks: int | str, properties_file: str | None = None) -> KafkaProducer:
    """The producer: ``linger.ms=0`` unless PROPERTIES_FILE says otherwise, the given acks."""
    options: dict[str, Any] = {"linger_ms": 0, "client_id": "e2e-latency-producer",
                               **client_settings(properties_file, ProducerSettings.KNOWN)}
    options.update(bootstrap_servers=bootstrap, acks=acks)
    try:
        return KafkaProducer(**options)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def make_consumer(bootstrap: str, topic: str, partitions: set[int],
                  properties_file: str | None = None) -> KafkaConsumer:
    """A group-less consumer of every partition of ``topic``, positioned at the end."""
    options: dict[str, Any] = {"client_id": "e2e-latency-consumer",
                               **client_settings(properties_file, ConsumerSettings.KNOWN)}
    options.update(bootstrap_servers=bootstrap, auto_offset_reset="latest", enable_auto_commit=False)
    options.pop("group_id", None)
    try:
        consumer = KafkaConsumer(**options)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    try:
        assigned = [TopicPartition(topic, number) for number in sorted(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_end(*assigned)
        for tp in assigned:
            consumer.position(tp)  # resolve now: records sent from here on are all read
    except BaseException:
        consumer.close()
        raise
    return consumer


# --- Kafka's mode: one record at a time ---------------------------------------------------------


def run_one_at_a_time(arguments: Any, output: TextIO) -> int:
    """Kafka's mode: send, wait for the acknowledgement, poll until consumed, repeat."""
    topic = arguments.topic
    producer = make_producer(arguments.broker_list, acks_option(arguments.producer_acks), arguments.properties_file)
    try:
        partitions = producer.partitions_for(topic)
        consumer = make_consumer(arguments.broker_list, topic, partitions, arguments.properties_file)
        try:
            generator = random.Random(0)
            latencies: list[float] = []
            for number in range(arguments.num_messages):
                message = bytes(generator.randrange(65, 91) for _ in range(arguments.message_size))
                began = time.perf_counter_ns()
                producer.send(topic, message).get()
                received = [record for records in consumer.poll(timeout_ms=POLL_TIMEOUT_MS).values()
                            for record in records]
                elapsed_ms = (time.perf_counter_ns() - began) / 1e6
                if not received:
                    raise EndToEndError(f"poll() timed out before finding a result (timeout:[{POLL_TIMEOUT_MS}])")
                if received[0].value != message:
                    raise EndToEndError(f"the message read [{received[0].value!r}] did not match the message sent "
                                        f"[{message!r}]")
                if len(received) > 1:
                    raise EndToEndError(f"only one result was expected during this test. We found [{len(received)}]")
                if number % PROGRESS_EVERY == 0:
                    output.write(f"{number}\t{elapsed_ms}\n")
                    output.flush()
                latencies.append(elapsed_ms)
        finally:
            consumer.close()
    finally:
        producer.close()
    output.write("\n".join(summary_lines(latencies)) + "\n")
    output.flush()
    return EXIT_OK


# --- rate mode: steady load, consumer in another process --------------------------------------


def consumer_process(bootstrap: str, topic: str, partitions: list[int], properties_file: str | None,
                     connection: Any) -> None:
    """The child of rate mode: read the records, send back their latencies.

    Messages on ``connection``: child → parent ``("ready",)`` once positioned, ``("warm",)``
    after the warm-up record, finally ``("result", latencies bytes, received, duplicates)`` or
    ``("error", text)``; parent → child ``("expect", count)`` after its last send.
    """
    try:
        consumer = make_consumer(bootstrap, topic, set(partitions), properties_file)
    except BaseException as exc:  # report instead of dying silently
        connection.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    try:
        connection.send(("ready",))
        latencies = array.array("d")
        seen: set[int] = set()
        duplicates = 0
        expected: int | None = None
        warm = False
        last_progress = time.monotonic()
        clock = time.monotonic_ns
        unpack = HEADER.unpack_from
        while True:
            if expected is None and connection.poll():
                message = connection.recv()
                if message[0] == "expect":
                    expected = int(message[1])
            if expected is not None and len(seen) >= expected:
                break
            if expected is not None and time.monotonic() - last_progress > DRAIN_TIMEOUT_SECONDS:
                break
            batches = consumer.poll_batches(timeout_ms=100)
            if not batches:
                continue
            now = clock()
            last_progress = time.monotonic()
            for batch in batches:
                for value in batch.values():
                    if value is None or len(value) < HEADER.size:
                        continue
                    sent, sequence = unpack(value)
                    if sequence == WARM_UP_SEQUENCE:
                        if not warm:
                            warm = True
                            connection.send(("warm",))
                        continue
                    if sequence in seen:
                        duplicates += 1
                        continue
                    seen.add(sequence)
                    latencies.append((now - sent) / 1e6)
        connection.send(("result", latencies.tobytes(), len(seen), duplicates))
    except KeyboardInterrupt:
        pass
    except BaseException as exc:
        try:
            connection.send(("error", f"{type(exc).__name__}: {exc}"))
        except OSError:
            pass
    finally:
        consumer.close()


def _expect(connection: Any, wanted: str, timeout: float) -> tuple[Any, ...]:
    """The next message of the consumer process, which must be ``wanted``."""
    if not connection.poll(timeout):
        raise EndToEndError(f"the consumer process did not report {wanted!r} within {timeout:.0f} s")
    message: tuple[Any, ...] = connection.recv()
    if message[0] == "error":
        raise EndToEndError(f"the consumer process failed: {message[1]}")
    if message[0] != wanted:
        raise EndToEndError(f"the consumer process reported {message[0]!r} instead of {wanted!r}")
    return message


def run_at_rate(arguments: Any, output: TextIO) -> int:
    """``--rate``: send at the rate, the child process measures arrivals; print the results."""
    topic = arguments.topic
    count = arguments.num_messages
    filler = b"x" * (arguments.message_size - HEADER.size)
    producer = make_producer(arguments.broker_list, acks_option(arguments.producer_acks), arguments.properties_file)
    context = multiprocessing.get_context("spawn")
    parent_end, child_end = context.Pipe()
    child: Any = None
    try:
        partitions = sorted(producer.partitions_for(topic))
        child = context.Process(target=consumer_process, name="e2e-latency-consumer", daemon=True,
                                args=(arguments.broker_list, topic, partitions, arguments.properties_file,
                                      child_end))
        child.start()
        child_end.close()
        _expect(parent_end, "ready", CONSUMER_READY_TIMEOUT_SECONDS)
        producer.send(topic, HEADER.pack(time.monotonic_ns(), WARM_UP_SEQUENCE) + filler).get(60)
        _expect(parent_end, "warm", CONSUMER_READY_TIMEOUT_SECONDS)
        send = producer.send
        clock = time.monotonic_ns
        pack = HEADER.pack
        errors: list[BaseException] = []
        throttler = ThroughputThrottler(arguments.rate, time.monotonic())
        started = time.monotonic()
        for sequence in range(count):
            if throttler.should_throttle(sequence, time.monotonic()):
                throttler.throttle()
            send(topic, pack(clock(), sequence) + filler).add_errback(errors.append)
        producer.flush()
        send_seconds = time.monotonic() - started
        parent_end.send(("expect", count))
        _, raw, received, duplicates = _expect(parent_end, "result", DRAIN_TIMEOUT_SECONDS + 60)
    finally:
        producer.close(timeout=5)
        if child is not None:
            child.join(10)
            if child.is_alive():
                child.kill()
                child.join()
        parent_end.close()
    latencies = array.array("d")
    latencies.frombytes(raw)
    lost = count - received
    output.write(f"Sent {count} records in {send_seconds:.3f} s ({count / max(send_seconds, 1e-9):.1f} records/s); "
                 f"received {received}, lost {lost}, duplicated {duplicates}.\n")
    output.write("\n".join(summary_lines(latencies.tolist())) + "\n")
    output.flush()
    if errors:
        print(f"Error: a send failed: {type(errors[0]).__name__}: {errors[0]}", file=sys.stderr)
    if lost:
        print(f"Error: {lost} of {count} records were not consumed within {DRAIN_TIMEOUT_SECONDS:.0f} s",
              file=sys.stderr)
    return EXIT_FAILED if lost or errors else EXIT_OK


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Run the tool; ``run_cli`` turns errors into exit codes."""
    arguments = build_parser().parse_args(argv)
    if arguments.num_messages <= 0:
        raise UsageError("NUM_MESSAGES must be positive")
    if arguments.message_size <= 0:
        raise UsageError("MESSAGE_SIZE must be positive")
    acks_option(arguments.producer_acks)
    output = out or sys.stdout
    if arguments.rate is None:
        return run_one_at_a_time(arguments, output)
    if not arguments.rate > 0:
        raise UsageError("--rate must be a positive number of records/s")
    if arguments.message_size < HEADER.size:
        raise UsageError(f"with --rate, MESSAGE_SIZE must be at least {HEADER.size} bytes (send time and sequence)")
    return run_at_rate(arguments, output)


if __name__ == "__main__":
    sys.exit(run_cli(main))
