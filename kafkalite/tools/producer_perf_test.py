"""``kafkalite-producer-perf-test.sh``: producer throughput and latency, like Kafka's
``kafka-producer-perf-test.sh`` (ProducerPerformance), with its flags and its output.

Every 5 seconds it prints the window's figures and at the end one line in Kafka's format::

    N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency.
    N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency, a ms 50th, b ms 95th, c ms 99th, d ms 99.9th.

* *records sent* counts records the brokers acknowledged (failed records are reported on
  standard error and make the exit code 1);
* MB is 1024 × 1024 bytes of record values (keys are not used);
* latency is, per record, the time from just before ``send()`` to its acknowledgement callback;
  the percentiles are whole milliseconds as in Kafka (rounded), computed over at most 500,000
  evenly sampled records; average and maximum use the exact values;
* the clock starts once the topic's metadata is known (the tool asks for it first);
* ``--throughput R`` caps the send rate at R records/s the way Kafka's ThroughputThrottler
  does (sleeping whenever 2 ms of sleep have accumulated); ``-1`` means no cap.

``--bulk`` uses the bulk API ``send_batch()`` instead of ``send()``: each call hands over as
many records as fit in ``batch.size`` bytes and in one request (``max.request.size`` less
1 KiB), counting the per-record overhead, and the time
from that call to the acknowledgement of its batch is attributed to each of its records. The
acknowledgements are awaited in send order by a helper thread, so a batch acknowledged before
an earlier one is counted when the earlier one is. The figures are therefore per batch, not
per record — compare them with ``send()`` figures with that in mind.

Producer settings come from ``--producer-props key=value ...`` and ``--producer.config FILE``
(Kafka's names: ``bootstrap.servers``, ``acks``, ``linger.ms``, ``batch.size``,
``compression.type``, ...; the props win over the file). Serializer settings are ignored: the
tool sends bytes.

Exit codes: 0 every record acknowledged, 1 some record failed or a broker error, 2 bad
arguments, 130 interrupted.

Concurrency: the calling thread sends; acknowledgement callbacks run on the producer's I/O
thread (``--bulk``: on the helper thread), which alone updates the statistics until the end.
"""

from __future__ import annotations

import functools
import math
import queue
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from kafkalite.client import KafkaProducer, RecordMetadata
from kafkalite.client.accumulator import RECORD_OVERHEAD
from kafkalite.config import load_properties
from kafkalite.errors import ConfigError, KafkaliteError
from kafkalite.tools.common import (
    EXIT_FAILED,
    EXIT_OK,
    ToolArgumentParser,
    UsageError,
    parse_key_values,
    pop_security_options,
    run_cli,
)
from kafkalite.tools.verifiable_producer import property_to_option

REPORTING_INTERVAL_SECONDS = 5.0
MAX_LATENCY_SAMPLES = 500_000
MEGABYTE = 1024 * 1024
# Java serializer/deserializer class names have no meaning for a tool that sends bytes.
IGNORED_PROPERTIES = frozenset({"key.serializer", "value.serializer", "key.deserializer", "value.deserializer"})
DEFAULT_PRODUCER_BATCH_SIZE = 16384
DEFAULT_MAX_REQUEST_SIZE = 1_048_576
REQUEST_HEADROOM = 1024  # batch header and the producer's own margin below max.request.size


def client_options(properties: dict[str, str]) -> dict[str, Any]:
    """Kafka-named properties (``linger.ms=5``) as kafka-python options (``linger_ms=5``); the
    security settings with :func:`~kafkalite.tools.common.pop_security_options`."""
    properties = dict(properties)
    options = pop_security_options(properties)
    options.update(property_to_option(name, value) for name, value in properties.items()
                   if name.strip() not in IGNORED_PROPERTIES)
    return options


def build_parser() -> ToolArgumentParser:
    """The command line: Kafka's kafka-producer-perf-test.sh flags plus ``--bulk``."""
    parser = ToolArgumentParser(prog="kafkalite-producer-perf-test.sh",
                                description="Measure producer throughput and send-to-acknowledgement latency "
                                            "(Kafka's kafka-producer-perf-test.sh).")
    parser.add_argument("--topic", required=True, help="REQUIRED: the topic to produce to")
    parser.add_argument("--num-records", type=int, required=True, metavar="NUM-RECORDS",
                        help="REQUIRED: number of records to produce")
    payload = parser.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=int, metavar="RECORD-SIZE",
                         help="record value size in bytes (this or --payload-file is required)")
    payload.add_argument("--payload-file", metavar="PAYLOAD-FILE",
                         help="values are drawn at random from this UTF-8 file, split by --payload-delimiter")
    parser.add_argument("--payload-delimiter", default="\\n", metavar="PAYLOAD-DELIMITER",
                        help="delimiter of the payload file (default \\n)")
    parser.add_argument("--throughput", type=float, required=True, metavar="THROUGHPUT",
                        help="REQUIRED: cap on records/s (-1: no cap)")
    parser.add_argument("--producer-props", nargs="+", metavar="PROP-NAME=PROP-VALUE",
                        help="producer settings, Kafka's names (bootstrap.servers=... acks=... linger.ms=... "
                             "batch.size=... compression.type=...); they override --producer.config")
    parser.add_argument("--producer.config", dest="producer_config", metavar="CONFIG-FILE",
                        help="producer settings properties file")
    parser.add_argument("--print-metrics", action="store_true", help="print the producer's metrics at the end")
    parser.add_argument("--bulk", action="store_true",
                        help="use the bulk API send_batch() (one call per batch.size bytes of records; "
                             "batch latency attributed to its records)")
    return parser


class ThroughputThrottler:
    """Kafka's ThroughputThrottler: keeps a sender at or below ``target`` things per second.

    ``should_throttle(sent, now)`` says whether the average rate since the start is above the
    target; ``throttle(count)`` then adds ``count`` intervals of 1/target s to a sleep deficit
    and sleeps once the deficit reaches 2 ms (so sleeps are never shorter than that). A
    negative target never throttles. Times are ``time.monotonic()`` seconds.
    """

    MIN_SLEEP_SECONDS = 0.002

    def __init__(self, target: float, start: float) -> None:
        self.target = target
        self.start = start
        self.sleep_seconds = 1.0 / target if target > 0 else 0.0
        self.sleep_deficit = 0.0
        self.wakeup = threading.Event()

    def should_throttle(self, sent: int, now: float) -> bool:
        """Whether ``sent`` things since the start at ``now`` are above the target rate."""
        if self.target < 0:
            return False
        elapsed = now - self.start
        return elapsed > 0 and sent / elapsed > self.target

    def throttle(self, count: int = 1) -> None:
        """Account ``count`` more things and sleep once 2 ms of sleep have accumulated."""
        if self.target == 0:
            self.wakeup.wait()
            return
        self.sleep_deficit += self.sleep_seconds * count
        if self.sleep_deficit >= self.MIN_SLEEP_SECONDS:
            began = time.monotonic()
            remaining = self.sleep_deficit
            while remaining > 0 and not self.wakeup.is_set():
                self.wakeup.wait(remaining)
                remaining = self.sleep_deficit - (time.monotonic() - began)
            self.sleep_deficit = 0.0

    def wake(self) -> None:
        """Stop sleeping at once (used on interruption)."""
        self.wakeup.set()


class Stats:
    """Kafka's ProducerPerformance.Stats: totals, a 5-second window, sampled latencies.

    Only one thread calls :meth:`record` (the producer's I/O thread, or the bulk helper thread);
    the totals are read by the main thread after :meth:`wait_for` returned.
    """

    def __init__(self, num_records: int, output: TextIO,
                 reporting_interval: float = REPORTING_INTERVAL_SECONDS) -> None:
        self.start = time.monotonic()
        self.output = output
        self.reporting_interval = reporting_interval
        self.sampling = max(1, num_records // max(1, min(num_records, MAX_LATENCY_SAMPLES)))
        self.latencies: list[float] = []
        self.iteration = 0
        self.count = 0
        self.bytes = 0
        self.total_latency = 0.0
        self.max_latency = 0.0
        self.window_start = self.start
        self.window_count = 0
        self.window_bytes = 0
        self.window_total_latency = 0.0
        self.window_max_latency = 0.0
        self.failed = 0
        self.first_error: BaseException | None = None
        self.expected = num_records
        self.finished = threading.Event()
        if num_records <= 0:
            self.finished.set()

    def acknowledged(self, started: float, size: int, metadata: RecordMetadata) -> None:
        """The ``send()`` callback of one record sent at ``started`` (the common case, inlined)."""
        now = time.monotonic()
        latency_ms = (now - started) * 1000.0
        self.count += 1
        self.bytes += size
        self.total_latency += latency_ms
        if latency_ms > self.max_latency:
            self.max_latency = latency_ms
        self.window_count += 1
        self.window_bytes += size
        self.window_total_latency += latency_ms
        if latency_ms > self.window_max_latency:
            self.window_max_latency = latency_ms
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency_ms)
        self.iteration += 1
        if now - self.window_start >= self.reporting_interval:
            self.print_window(now)
            self.new_window(now)
        if self.count + self.failed >= self.expected:
            self.finished.set()

    def record(self, latency_ms: float, size: int, now: float, records: int = 1) -> None:
        """``records`` acknowledged records of ``size`` bytes in all, each after ``latency_ms``."""
        self.count += records
        self.bytes += size
        self.total_latency += latency_ms * records
        if latency_ms > self.max_latency:
            self.max_latency = latency_ms
        self.window_count += records
        self.window_bytes += size
        self.window_total_latency += latency_ms * records
        if latency_ms > self.window_max_latency:
            self.window_max_latency = latency_ms
        sampling = self.sampling
        if records == 1:
            if self.iteration % sampling == 0:
                self.latencies.append(latency_ms)
        else:
            first = self.iteration
            sampled = -(-(first + records) // sampling) - (-(-first // sampling))
            self.latencies.extend([latency_ms] * sampled)
        self.iteration += records
        if now - self.window_start >= self.reporting_interval:
            self.print_window(now)
            self.new_window(now)
        self._check_finished()

    def fail(self, error: BaseException, records: int = 1) -> None:
        """``records`` records failed with ``error`` (the first error is reported on standard error)."""
        if self.first_error is None:
            self.first_error = error
            print(f"Error: a send failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        self.failed += records
        self._check_finished()

    def _check_finished(self) -> None:
        """Signal :meth:`wait_for` once every expected record is accounted for."""
        if self.count + self.failed >= self.expected:
            self.finished.set()

    def wait_for(self, timeout: float | None) -> bool:
        """Wait until every expected record was acknowledged or failed."""
        return self.finished.wait(timeout)

    def print_window(self, now: float) -> None:
        """Print the 5-second window line (Kafka's printWindow)."""
        elapsed = max(now - self.window_start, 1e-9)
        count = self.window_count
        self.output.write(
            f"{count} records sent, {count / elapsed:.1f} records/sec "
            f"({self.window_bytes / elapsed / MEGABYTE:.2f} MB/sec), "
            f"{self.window_total_latency / max(count, 1):.1f} ms avg latency, "
            f"{self.window_max_latency:.1f} ms max latency.\n")
        self.output.flush()

    def new_window(self, now: float) -> None:
        """Start a new reporting window at ``now``."""
        self.window_start = now
        self.window_count = 0
        self.window_bytes = 0
        self.window_total_latency = 0.0
        self.window_max_latency = 0.0

    def percentiles(self, *fractions: float) -> list[int]:
        """Kafka's percentiles: sort the samples, take ``sorted[int(fraction * size)]``, whole ms."""
        ordered = sorted(self.latencies)
        if not ordered:
            return [0 for _ in fractions]
        return [round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]) for fraction in fractions]

    def total_line(self, now: float) -> str:
        """Kafka's final line (printTotal) for the run so far."""
        elapsed = max(now - self.start, 1e-9)
        count = self.count
        p50, p95, p99, p999 = self.percentiles(0.5, 0.95, 0.99, 0.999)
        megabytes_per_second = self.bytes / elapsed / MEGABYTE
        return (f"{count} records sent, {count / elapsed:f} records/sec ({megabytes_per_second:.2f} MB/sec), "
                f"{self.total_latency / max(count, 1):.2f} ms avg latency, {self.max_latency:.2f} ms max latency, "
                f"{p50} ms 50th, {p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th.")


def producer_settings(arguments: Any) -> dict[str, Any]:
    """The KafkaProducer options of the command line (Kafka's names converted)."""
    raw: dict[str, str] = {}
    if arguments.producer_config:
        raw.update(load_properties(arguments.producer_config))
    raw.update(parse_key_values(arguments.producer_props, "--producer-props"))
    if "bootstrap.servers" not in raw:
        raise UsageError("bootstrap.servers must be given in --producer-props or --producer.config")
    options = client_options(raw)
    options.setdefault("client_id", "perf-producer-client")
    return options


def load_payloads(path: str, delimiter: str) -> list[bytes]:
    """The values of ``--payload-file``: its text split by the delimiter (``\\n`` etc. unescaped)."""
    separator = delimiter.encode("utf-8").decode("unicode_escape")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read payload file {path}: {exc}") from None
    payloads = [item.encode("utf-8") for item in text.split(separator) if item]
    if not payloads:
        raise UsageError(f"payload file {path} has no payload")
    return payloads


def random_payload(size: int) -> bytes:
    """One value of ``size`` random upper-case letters (as Kafka's tool makes it)."""
    generator = random.Random()
    return bytes(generator.randrange(65, 91) for _ in range(size))


class ProducerPerformance:
    """One run of the tool: the producer, the statistics and the send loop."""

    def __init__(self, arguments: Any, output: TextIO) -> None:
        self.arguments = arguments
        self.output = output
        options = producer_settings(arguments)
        self.payloads: list[bytes] | None = None
        if arguments.payload_file:
            self.payloads = load_payloads(arguments.payload_file, arguments.payload_delimiter)
            self.payload = self.payloads[0]
        else:
            self.payload = random_payload(arguments.record_size)
        try:
            self.producer = KafkaProducer(**options)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        # Valid integers now: the producer checked them.
        self.batch_size = int(options.get("batch_size", options.get("max_batch_size", DEFAULT_PRODUCER_BATCH_SIZE)))
        self.max_request_size = int(options.get("max_request_size", DEFAULT_MAX_REQUEST_SIZE))
        self.stats: Stats

    def run(self) -> int:
        """Send everything, print the final line (and metrics), close; the exit code."""
        arguments = self.arguments
        throttler = ThroughputThrottler(arguments.throughput, time.monotonic())
        interrupted = False
        try:
            # Like a warmed-up Kafka client: the topic's metadata is fetched before the clock starts
            # (this also creates the topic when the brokers auto-create topics).
            self.producer.partitions_for(arguments.topic)
            self.stats = Stats(arguments.num_records, self.output)
            throttler.start = self.stats.start
            if arguments.bulk:
                self.send_bulk(throttler)
            else:
                self.send_records(throttler)
            self.producer.flush()
            self.stats.wait_for(60.0)
            now = time.monotonic()
            self.output.write(self.stats.total_line(now) + "\n")
            self.output.flush()
            if arguments.print_metrics:
                self.print_metrics(now)
        except KeyboardInterrupt:
            interrupted = True
            throttler.wake()
            raise
        finally:
            self.producer.close(timeout=0 if interrupted else None)
        if self.stats.failed:
            print(f"Error: {self.stats.failed} of {arguments.num_records} records failed", file=sys.stderr)
            return EXIT_FAILED
        return EXIT_OK

    def send_records(self, throttler: ThroughputThrottler) -> None:
        """The ``send()`` loop: one future and one callback pair per record."""
        topic = self.arguments.topic
        stats = self.stats
        send = self.producer.send
        clock = time.monotonic
        payloads = self.payloads
        payload = self.payload
        size = len(payload)
        choose = random.Random().choice
        throttled = self.arguments.throughput >= 0
        acknowledged = stats.acknowledged
        failed = stats.fail
        partial: Callable[..., Any] = functools.partial
        for number in range(self.arguments.num_records):
            if payloads is not None:
                payload = choose(payloads)
                size = len(payload)
            started = clock()
            if throttled and throttler.should_throttle(number, started):
                throttler.throttle()
            future = send(topic, payload)
            future.add_callback(partial(acknowledged, started, size))
            future.add_errback(failed)

    def send_bulk(self, throttler: ThroughputThrottler) -> None:
        """The ``send_batch()`` loop: one call per batch.size bytes; a helper thread awaits them."""
        arguments = self.arguments
        topic = arguments.topic
        stats = self.stats
        # A call's records must fit one request too, or the producer would split them in two.
        call_bytes = min(self.batch_size, self.max_request_size - REQUEST_HEADROOM)
        per_call = max(1, call_bytes // (len(self.payload) + RECORD_OVERHEAD))
        pending: queue.SimpleQueue[tuple[Any, float, int, int] | None] = queue.SimpleQueue()

        def await_acknowledgements() -> None:
            while True:
                item = pending.get()
                if item is None:
                    return
                future, started, records, size = item
                try:
                    future.get()
                except KafkaliteError as exc:
                    stats.fail(exc, records)
                    continue
                now = time.monotonic()
                stats.record((now - started) * 1000.0, size, now, records)

        waiter = threading.Thread(target=await_acknowledgements, name="perf-test-acknowledgements", daemon=True)
        waiter.start()
        send_batch = self.producer.send_batch
        payloads = self.payloads
        choose = random.Random().choice
        same_values = [self.payload] * per_call
        sent = 0
        total = arguments.num_records
        try:
            while sent < total:
                count = min(per_call, total - sent)
                values = same_values[:count] if payloads is None else [choose(payloads) for _ in range(count)]
                size = len(self.payload) * count if payloads is None else sum(map(len, values))
                started = time.monotonic()
                if throttler.should_throttle(sent, started):
                    throttler.throttle(count)
                pending.put((send_batch(topic, values), started, count, size))
                sent += count
        except BaseException:
            pending.put(None)  # the helper ends once close() has failed what is still pending
            raise
        pending.put(None)
        waiter.join()

    def print_metrics(self, now: float) -> None:
        """Kafka's ``--print-metrics``: the producer's metrics and the run's own, name : value."""
        stats = self.stats
        elapsed = max(now - stats.start, 1e-9)
        metrics: dict[str, Any] = {f"{group}:{name}": value for group, values in self.producer.metrics().items()
                                   for name, value in values.items()}
        metrics.update({
            "perf-test:record-send-total": stats.count,
            "perf-test:record-error-total": stats.failed,
            "perf-test:record-send-rate": stats.count / elapsed,
            "perf-test:byte-total": stats.bytes,
            "perf-test:request-latency-avg": stats.total_latency / max(stats.count, 1),
            "perf-test:request-latency-max": stats.max_latency,
            "perf-test:bulk": self.arguments.bulk,
        })
        width = max(len(name) for name in metrics) + 2
        self.output.write(f"\n{'Metric Name':<{width}}  Value\n")
        for name in sorted(metrics):
            value = metrics[name]
            text = f"{value:.3f}" if isinstance(value, float) else str(value)
            self.output.write(f"{name:<{width}}: {text}\n")
        self.output.flush()


def validate(arguments: Any) -> None:
    """Reject values argparse lets through (negative counts, a NaN rate, no producer settings)."""
    if arguments.num_records < 0:
        raise UsageError("--num-records must not be negative")
    if arguments.record_size is not None and arguments.record_size <= 0:
        raise UsageError("--record-size must be positive")
    if math.isnan(arguments.throughput):
        raise UsageError("--throughput must be a number of records/s (negative: no cap)")
    if not arguments.producer_props and not arguments.producer_config:
        raise UsageError("either --producer-props or --producer.config must be given")


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Run the tool; ``run_cli`` turns errors into exit codes."""
    arguments = build_parser().parse_args(argv)
    validate(arguments)
    return ProducerPerformance(arguments, out or sys.stdout).run()


if __name__ == "__main__":
    sys.exit(run_cli(main))
