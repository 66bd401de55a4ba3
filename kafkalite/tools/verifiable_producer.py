"""``kafkalite-verifiable-producer.sh``: produce unique, numbered values at a bounded rate and
report every outcome as one JSON line, like Kafka's VerifiableProducer used by its system tests.

Standard output carries only JSON events, one per line:

* ``{"name": "startup_complete"}`` once the producer is connected;
* ``{"name": "producer_send_success", "topic", "partition", "offset", "key", "value", "time_ms"}``
  for each acknowledged record;
* ``{"name": "producer_send_error", "exception", "message", "topic", "key", "value", "time_ms"}``
  for each record that failed;
* ``{"name": "shutdown_complete"}`` and then ``{"name": "tool_data", "sent", "acked", "errors",
  "target_throughput", "avg_throughput"}`` at the end.

Values are ``<prefix>.<sequence>`` (or the bare sequence number without ``--value-prefix``), so
each is unique and a checker can tell loss from duplication. The tool ends after
``--max-messages`` records (or never, with -1) or on SIGTERM/SIGINT; either way it first waits
for the outstanding sends and then prints ``tool_data``. The wait is bounded, as Kafka's tool
closes its producer with a timeout: by the producer's ``delivery.timeout.ms`` after
``--max-messages``, by ``SIGNALLED_CLOSE_TIMEOUT_S`` (30 s, or ``delivery.timeout.ms`` when
shorter) after a signal; records still unacknowledged then are reported as
``producer_send_error`` events and what was pending is described on stderr. Exit code 0 when
every record was acknowledged, 1 when any failed.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

from kafkalite.client import KafkaProducer, RecordMetadata
from kafkalite.config import load_properties
from kafkalite.tools.common import (
    ToolArgumentParser,
    UsageError,
    parse_key_values,
    pop_security_options,
    run_cli,
    run_until_signalled,
)

EXIT_OK = 0
EXIT_SEND_FAILED = 1
SIGNALLED_CLOSE_TIMEOUT_S = 30.0
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000


def build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(prog="kafkalite-verifiable-producer.sh",
                                description="Produce numbered values and print each acknowledgement or "
                                            "error as a JSON line (for correctness tests).")
    parser.add_argument("--bootstrap-server", "--broker-list", dest="bootstrap_server", required=True,
                        metavar="HOST:PORT", help="REQUIRED: the broker(s) to connect to")
    parser.add_argument("--topic", required=True, help="REQUIRED: the topic to produce to")
    parser.add_argument("--max-messages", type=int, default=-1,
                        help="produce this many records, then stop (-1: until SIGTERM; default -1)")
    parser.add_argument("--throughput", type=float, default=-1.0,
                        help="at most this many records per second (-1: unthrottled; default -1)")
    parser.add_argument("--acks", default="all", choices=["all", "-1", "0", "1"],
                        help="acknowledgements the producer requires (default all)")
    parser.add_argument("--value-prefix", default=None,
                        help="values are <prefix>.<sequence> instead of the bare sequence number")
    parser.add_argument("--repeating-keys", type=int, default=None, metavar="N",
                        help="key each record with <sequence mod N> (default: no key)")
    parser.add_argument("--producer-property", action="append", metavar="NAME=VALUE",
                        help="a producer config, Kafka's name (retries, linger.ms, enable.idempotence, ...)")
    parser.add_argument("--producer.config", dest="producer_config", help="producer config properties file")
    return parser


def property_to_option(name: str, value: str) -> tuple[str, Any]:
    """Kafka's ``linger.ms=5`` → kafka-python's ``("linger_ms", 5)`` (ints and booleans typed)."""
    option = name.strip().replace(".", "_").replace("-", "_")
    text = value.strip()
    if text.lower() in ("true", "false"):
        return option, text.lower() == "true"
    try:
        return option, int(text)
    except ValueError:
        return option, text


def producer_options(arguments: Any) -> dict[str, Any]:
    """The KafkaProducer options the command line asks for."""
    raw: dict[str, str] = {}
    if arguments.producer_config:
        raw.update(load_properties(arguments.producer_config))
    raw.update(parse_key_values(arguments.producer_property, "--producer-property"))
    options: dict[str, Any] = pop_security_options(raw)
    options.update(property_to_option(name, value) for name, value in raw.items())
    options["acks"] = "all" if arguments.acks in ("all", "-1") else int(arguments.acks)
    options["bootstrap_servers"] = arguments.bootstrap_server
    options.setdefault("client_id", "verifiable-producer")
    return options


class EventPrinter:
    """Writes one JSON object per line to the output, from any thread, flushing each line."""

    def __init__(self, output: TextIO) -> None:
        self.output = output
        self.lock = threading.Lock()

    def emit(self, name: str, **fields: Any) -> None:
        line = json.dumps({"name": name, **fields}, separators=(",", ":"))
        with self.lock:
            try:
                self.output.write(line + "\n")
                self.output.flush()
            except (BrokenPipeError, ValueError):
                pass  # nobody reads any more; the counts still decide the exit code


class Throttler:
    """Keeps the send rate at or below ``target`` records per second (Kafka's ThroughputThrottler)."""

    def __init__(self, target: float, stop: threading.Event) -> None:
        self.target = target
        self.stop = stop
        self.started = time.monotonic()

    def wait_before(self, sent: int) -> None:
        """Block until record number ``sent`` (0-based) may go, or the tool is asked to stop."""
        if self.target <= 0:
            return
        delay = self.started + sent / self.target - time.monotonic()
        if delay > 0:
            self.stop.wait(delay)


class VerifiableProducer:
    """One run of the tool: owns the producer, the counters and the event stream."""

    def __init__(self, arguments: Any, printer: EventPrinter) -> None:
        self.arguments = arguments
        self.printer = printer
        self.topic: str = arguments.topic
        self.stop = threading.Event()
        self.counts_lock = threading.Lock()
        self.sent = 0
        self.acked = 0
        self.errors = 0
        options = producer_options(arguments)
        self.delivery_timeout_s = float(options.get("delivery_timeout_ms", DEFAULT_DELIVERY_TIMEOUT_MS)) / 1000
        self.producer = KafkaProducer(**options)

    def close_timeout(self) -> float:
        """How long closing may wait for outstanding sends (see the module docstring)."""
        if self.stop.is_set():
            return min(SIGNALLED_CLOSE_TIMEOUT_S, self.delivery_timeout_s)
        return self.delivery_timeout_s

    def value_for(self, sequence: int) -> str:
        prefix = self.arguments.value_prefix
        return f"{prefix}.{sequence}" if prefix is not None else str(sequence)

    def key_for(self, sequence: int) -> str | None:
        modulus = self.arguments.repeating_keys
        return str(sequence % modulus) if modulus else None

    def on_success(self, key: str | None, value: str, metadata: RecordMetadata) -> None:
        with self.counts_lock:
            self.acked += 1
        self.printer.emit("producer_send_success", topic=metadata.topic, partition=metadata.partition,
                          offset=metadata.offset, key=key, value=value, time_ms=int(time.time() * 1000))

    def on_error(self, key: str | None, value: str, error: BaseException) -> None:
        with self.counts_lock:
            self.errors += 1
        self.printer.emit("producer_send_error", exception=type(error).__name__, message=str(error),
                          topic=self.topic, key=key, value=value, time_ms=int(time.time() * 1000))

    def run(self) -> int:
        """Produce until done or stopped; print tool_data; 0 if every record was acknowledged."""
        maximum = self.arguments.max_messages
        throttler = Throttler(self.arguments.throughput, self.stop)
        started = time.monotonic()
        sequence = 0
        try:
            self.producer.partitions_for(self.topic)  # fail early on a topic that cannot be found
            self.printer.emit("startup_complete")
            started = time.monotonic()
            while (maximum < 0 or sequence < maximum) and not self.stop.is_set():
                throttler.wait_before(sequence)
                if self.stop.is_set():
                    break
                key, value = self.key_for(sequence), self.value_for(sequence)
                try:
                    future = self.producer.send(self.topic, value=value.encode("utf-8"),
                                                key=key.encode("utf-8") if key is not None else None)
                except Exception as exc:  # a send refused before it was queued is one failed record
                    with self.counts_lock:
                        self.sent += 1
                    self.on_error(key, value, exc)
                else:
                    with self.counts_lock:
                        self.sent += 1
                    future.add_callback(self.on_success, key, value)
                    future.add_errback(self.on_error, key, value)
                sequence += 1
        finally:
            self.producer.close(self.close_timeout())
            elapsed = max(time.monotonic() - started, 1e-9)
            with self.counts_lock:
                sent, acked, errors = self.sent, self.acked, self.errors
            self.printer.emit("shutdown_complete")
            self.printer.emit("tool_data", sent=sent, acked=acked, errors=errors,
                              target_throughput=self.arguments.throughput,
                              avg_throughput=round(acked / elapsed, 3))
        return EXIT_OK if errors == 0 and acked == sent else EXIT_SEND_FAILED


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    if arguments.max_messages < -1:
        raise UsageError("--max-messages must be -1 (no limit) or a count")
    if arguments.repeating_keys is not None and arguments.repeating_keys <= 0:
        raise UsageError("--repeating-keys must be positive")
    output = out or sys.stdout
    tool = VerifiableProducer(arguments, EventPrinter(output))
    return run_until_signalled(tool.run, tool.stop)


if __name__ == "__main__":
    sys.exit(run_cli(main))
