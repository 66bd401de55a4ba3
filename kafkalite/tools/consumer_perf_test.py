"""``kafkalite-consumer-perf-test.sh``: consumer throughput, like Kafka's
``kafka-consumer-perf-test.sh`` (ConsumerPerformance), with its flags and its output.

It subscribes to ``--topic`` in a consumer group (``--group``, default ``perf-consumer-<n>``),
reads from the earliest offset (``--from-latest``: the latest) until ``--messages`` records were
read or no record came for ``--timeout`` ms, and prints Kafka's header and one row::

    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    2024-05-01 10:00:00:000, 2024-05-01 10:00:04:250, 95.3674, 22.4394, 1000000, 235294.1176, 180, 4070, 23.4318, 245700.2457

Columns as in Kafka: times ``yyyy-MM-dd HH:mm:ss:SSS`` (local time); MB = 1024 × 1024 bytes of
keys and values; the rates over the whole run, and the ``fetch.*`` rates over the run minus the
time spent joining the group (``rebalance.time.ms``, from the start until the partitions were
assigned). Like Kafka, the count is checked after each poll, so it may exceed ``--messages``,
and when the timeout ends the run a ``WARNING`` line is printed first (exit code still 0).
``--show-detailed-stats`` prints, every ``--reporting-interval`` ms, a row per interval under
the header ``time, threadId, ...`` instead of the final row.

``--bulk`` reads with the bulk API ``poll_batches()`` and decodes the values of each batch
(``FetchedBatch.values()``) instead of ``poll()`` building one ConsumerRecord per record; only
value bytes are counted then (keys are not decoded).

The consumer runs with Kafka's perf-test settings: ``check.crcs=false``,
``max.partition.fetch.bytes`` from ``--fetch-size`` (default 1 MiB), auto-commit as configured
(default on); ``--consumer.config FILE`` adds settings (Kafka's names).

Exit codes: 0 done, 1 a broker error, 2 bad arguments, 130 interrupted.

Concurrency: single-threaded; the consumer runs its own I/O thread, and the rebalance
listener is called from ``poll()`` on the calling thread.
"""

from __future__ import annotations

import datetime
import random
import sys
import time
from typing import Any, TextIO

from kafkalite.client import KafkaConsumer, TopicPartition
from kafkalite.config import load_properties
from kafkalite.errors import ConfigError
from kafkalite.tools.common import EXIT_OK, ToolArgumentParser, UsageError, run_cli
from kafkalite.tools.producer_perf_test import MEGABYTE, client_options

HEADER_FIELDS = ("data.consumed.in.MB", "MB.sec", "data.consumed.in.nMsg", "nMsg.sec", "rebalance.time.ms",
                 "fetch.time.ms", "fetch.MB.sec", "fetch.nMsg.sec")
SUMMARY_HEADER = ", ".join(("start.time", "end.time", *HEADER_FIELDS))
DETAILED_HEADER = ", ".join(("time", "threadId", *HEADER_FIELDS))
POLL_TIMEOUT_MS = 100


def format_time(epoch_ms: int) -> str:
    """Kafka's default ``yyyy-MM-dd HH:mm:ss:SSS`` in local time."""
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000)
    return f"{moment:%Y-%m-%d %H:%M:%S}:{epoch_ms % 1000:03d}"


def now_ms() -> int:
    """Wall-clock milliseconds (the times printed are wall-clock, as in Kafka)."""
    return time.time_ns() // 1_000_000


def build_parser() -> ToolArgumentParser:
    """The command line: Kafka's kafka-consumer-perf-test.sh flags plus ``--bulk``."""
    parser = ToolArgumentParser(prog="kafkalite-consumer-perf-test.sh",
                                description="Measure consumer throughput (Kafka's kafka-consumer-perf-test.sh).")
    parser.add_argument("--bootstrap-server", "--broker-list", dest="bootstrap_server", required=True,
                        metavar="HOST:PORT", help="REQUIRED: the broker(s) to connect to")
    parser.add_argument("--topic", required=True, help="REQUIRED: the topic to consume")
    parser.add_argument("--messages", type=int, required=True, help="REQUIRED: number of records to consume")
    parser.add_argument("--group", default=None,
                        help="consumer group id (default perf-consumer-<random number>)")
    parser.add_argument("--fetch-size", type=int, default=MEGABYTE,
                        help="max.partition.fetch.bytes: bytes fetched per partition and request (default 1048576)")
    parser.add_argument("--from-latest", action="store_true",
                        help="start at the latest offset when the group has none (default: earliest)")
    parser.add_argument("--timeout", type=int, default=10_000,
                        help="stop when no record came for this many ms (default 10000)")
    parser.add_argument("--show-detailed-stats", action="store_true",
                        help="print a row every --reporting-interval ms instead of one final row")
    parser.add_argument("--reporting-interval", type=int, default=5000, metavar="MS",
                        help="interval of the detailed rows (default 5000)")
    parser.add_argument("--hide-header", action="store_true", help="do not print the header line")
    parser.add_argument("--print-metrics", action="store_true", help="print the consumer's metrics at the end")
    parser.add_argument("--consumer.config", dest="consumer_config", metavar="CONFIG-FILE",
                        help="consumer settings properties file (Kafka's names)")
    parser.add_argument("--bulk", action="store_true",
                        help="read with the bulk API poll_batches() + values() (value bytes only)")
    return parser


def consumer_settings(arguments: Any) -> dict[str, Any]:
    """The KafkaConsumer options of the command line (Kafka perf-test defaults, then the file)."""
    options: dict[str, Any] = {"client_id": "perf-consumer-client", "check_crcs": False}
    if arguments.consumer_config:
        options.update(client_options(load_properties(arguments.consumer_config)))
    options["bootstrap_servers"] = arguments.bootstrap_server
    options["group_id"] = arguments.group or f"perf-consumer-{random.randrange(100_000)}"
    options["max_partition_fetch_bytes"] = arguments.fetch_size
    options["auto_offset_reset"] = "latest" if arguments.from_latest else "earliest"
    return options


class RebalanceTimer:
    """The rebalance listener that times group joins as Kafka's tool does: from the start (or
    the last revocation) until partitions are assigned."""

    def __init__(self, start_ms: int) -> None:
        self.join_start = start_ms
        self.total_ms = 0
        self.round_ms = 0

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.join_start = now_ms()

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        elapsed = now_ms() - self.join_start
        self.total_ms += elapsed
        self.round_ms += elapsed

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.join_start = now_ms()


def summary_row(start_ms: int, end_ms: int, total_bytes: int, messages: int, rebalance_ms: int) -> str:
    """Kafka's final row (one line, the header's ten columns)."""
    elapsed_seconds = (end_ms - start_ms) / 1000.0
    megabytes = total_bytes / MEGABYTE
    fetch_ms = end_ms - start_ms - rebalance_ms
    fetch_seconds = fetch_ms / 1000.0
    return (f"{format_time(start_ms)}, {format_time(end_ms)}, {megabytes:.4f}, "
            f"{_ratio(megabytes, elapsed_seconds):.4f}, "
            f"{messages}, {_ratio(messages, elapsed_seconds):.4f}, {rebalance_ms}, {fetch_ms}, "
            f"{_ratio(megabytes, fetch_seconds):.4f}, {_ratio(messages, fetch_seconds):.4f}")


def detailed_row(bytes_read: int, last_bytes: int, messages: int, last_messages: int, start_ms: int, end_ms: int,
                 rebalance_ms: int) -> str:
    """Kafka's periodic row: totals so far and the interval's rates."""
    elapsed_ms = float(end_ms - start_ms)
    interval_megabytes = (bytes_read - last_bytes) / MEGABYTE
    fetch_ms = end_ms - start_ms - rebalance_ms
    interval_messages = messages - last_messages
    fetch_megabytes_rate = 1000.0 * interval_megabytes / fetch_ms if fetch_ms > 0 else 0.0
    fetch_messages_rate = 1000.0 * interval_messages / fetch_ms if fetch_ms > 0 else 0.0
    return (f"{format_time(end_ms)}, 0, {bytes_read / MEGABYTE:.4f}, "
            f"{_ratio(1000.0 * interval_megabytes, elapsed_ms):.4f}, "
            f"{messages}, {_ratio(1000.0 * interval_messages, elapsed_ms):.4f}, {rebalance_ms}, {fetch_ms}, "
            f"{fetch_megabytes_rate:.4f}, {fetch_messages_rate:.4f}")


def _ratio(amount: float, seconds: float) -> float:
    """``amount / seconds``, infinite for a positive amount in no time, 0 for nothing."""
    if seconds > 0:
        return amount / seconds
    return float("inf") if amount > 0 else 0.0


class ConsumerPerformance:
    """One run of the tool: the consumer, the counters and the read loop."""

    def __init__(self, arguments: Any, output: TextIO) -> None:
        self.arguments = arguments
        self.output = output
        self.messages = 0
        self.bytes = 0
        try:
            self.consumer = KafkaConsumer(**consumer_settings(arguments))
        except ConfigError as exc:
            raise UsageError(str(exc)) from None

    def write(self, line: str) -> None:
        """One line of output, flushed (the suite and tests read it as it comes)."""
        self.output.write(line + "\n")
        self.output.flush()

    def run(self) -> int:
        """Subscribe, consume, print the header and row (or the detailed rows); the exit code."""
        arguments = self.arguments
        try:
            if not arguments.hide_header:
                self.write(DETAILED_HEADER if arguments.show_detailed_stats else SUMMARY_HEADER)
            start_ms = now_ms()
            timer = RebalanceTimer(start_ms)
            self.consumer.subscribe([arguments.topic], listener=timer)
            self.consume(timer)
            end_ms = now_ms()
            if not arguments.show_detailed_stats:
                self.write(summary_row(start_ms, end_ms, self.bytes, self.messages, timer.total_ms))
            if arguments.print_metrics:
                self.print_metrics(end_ms - start_ms)
        finally:
            self.consumer.close()
        return EXIT_OK

    def consume(self, timer: RebalanceTimer) -> None:
        """Kafka's loop: poll every 100 ms until enough records or ``--timeout`` ms without any."""
        arguments = self.arguments
        target = arguments.messages
        timeout_ms = arguments.timeout
        interval = arguments.reporting_interval
        detailed = arguments.show_detailed_stats
        consumer = self.consumer
        bulk = arguments.bulk
        current = now_ms()
        last_report = last_consumed = current
        last_messages = last_bytes = 0
        messages = bytes_read = 0
        while messages < target and current - last_consumed <= timeout_ms:
            got = 0
            if bulk:
                for batch in consumer.poll_batches(timeout_ms=POLL_TIMEOUT_MS):
                    values = batch.values()
                    got += len(values)
                    try:
                        bytes_read += sum(map(len, values))
                    except TypeError:  # a tombstone (None value) in the batch
                        bytes_read += sum(len(value) for value in values if value is not None)
            else:
                for records in consumer.poll(timeout_ms=POLL_TIMEOUT_MS).values():
                    got += len(records)
                    for record in records:
                        if record.key is not None:
                            bytes_read += len(record.key)
                        if record.value is not None:
                            bytes_read += len(record.value)
            current = now_ms()
            if got:
                last_consumed = current
                messages += got
                if current - last_report >= interval:
                    if detailed:
                        self.write(detailed_row(bytes_read, last_bytes, messages, last_messages, last_report,
                                                current, timer.round_ms))
                    timer.round_ms = 0
                    last_report = current
                    last_messages = messages
                    last_bytes = bytes_read
        self.messages = messages
        self.bytes = bytes_read
        if messages < target:
            self.write(f"WARNING: Exiting before consuming the expected number of messages: timeout ({timeout_ms} ms) "
                       "exceeded. You can use the --timeout option to increase the timeout.")

    def print_metrics(self, elapsed_ms: int) -> None:
        """``--print-metrics``: the consumer's metrics and the run's own, name : value."""
        metrics: dict[str, Any] = {f"{group}:{name}": value for group, values in self.consumer.metrics().items()
                                   for name, value in values.items()}
        metrics.update({
            "perf-test:records-consumed-total": self.messages,
            "perf-test:bytes-consumed-total": self.bytes,
            "perf-test:elapsed-ms": elapsed_ms,
            "perf-test:bulk": self.arguments.bulk,
        })
        width = max(len(name) for name in metrics) + 2
        self.write(f"\n{'Metric Name':<{width}}  Value")
        for name in sorted(metrics):
            value = metrics[name]
            self.write(f"{name:<{width}}: {value:.3f}" if isinstance(value, float) else f"{name:<{width}}: {value}")


def validate(arguments: Any) -> None:
    """Reject values argparse lets through (negative counts, a zero fetch size)."""
    if arguments.messages < 0:
        raise UsageError("--messages must not be negative")
    if arguments.fetch_size <= 0:
        raise UsageError("--fetch-size must be positive")
    if arguments.timeout < 0:
        raise UsageError("--timeout must not be negative")
    if arguments.reporting_interval <= 0:
        raise UsageError("--reporting-interval must be positive")


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Run the tool; ``run_cli`` turns errors into exit codes."""
    arguments = build_parser().parse_args(argv)
    validate(arguments)
    return ConsumerPerformance(arguments, out or sys.stdout).run()


if __name__ == "__main__":
    sys.exit(run_cli(main))
