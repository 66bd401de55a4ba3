"""``kafkalite-verifiable-consumer.sh``: consume a topic and report every record as JSON lines,
like Kafka's VerifiableConsumer used by its system tests (with the records themselves included,
so a checker can verify each acknowledged value).

Standard output carries only JSON events, one per line:

* ``{"name": "startup_complete"}`` once the consumer is subscribed;
* ``{"name": "partitions_assigned" | "partitions_revoked", "partitions": [{"topic", "partition"}]}``
  when the assignment changes;
* ``{"name": "records_consumed", "count", "partitions": [{"topic", "partition", "count",
  "minOffset", "maxOffset"}], "records": [{"partition", "offset", "key", "value"}]}`` per poll
  that returned records (keys and values as UTF-8 text, undecodable bytes backslash-escaped);
* ``{"name": "offsets_committed", "offsets": [{"topic", "partition", "offset"}], "success",
  "error"?}`` after each synchronous commit (only with ``--group-id``);
* ``{"name": "shutdown_complete"}`` at the end.

Without ``--group-id`` the consumer subscribes standalone and reads every partition from
``--reset-policy``. With ``--group-id`` it joins the group and, unless ``--enable-autocommit``,
commits the consumed offsets after every poll; if the client has no consumer-group support yet
the tool says so on standard error and exits 1 before consuming anything. It ends after
``--max-messages`` records, after ``--timeout-ms`` without a record, or on SIGTERM/SIGINT.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable
from typing import Any, TextIO

from kafkalite.client import ConsumerRecord, KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafkalite.config import load_properties
from kafkalite.errors import GroupCoordinatorUnsupportedError, KafkaliteError
from kafkalite.tools.common import (
    EXIT_FAILED,
    EXIT_OK,
    ToolArgumentParser,
    UsageError,
    parse_key_values,
    pop_security_options,
    run_cli,
    run_until_signalled,
)
from kafkalite.tools.verifiable_producer import EventPrinter, property_to_option

POLL_INTERVAL_MS = 200


def build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(prog="kafkalite-verifiable-consumer.sh",
                                description="Consume a topic and print every record as JSON lines "
                                            "(for correctness tests).")
    parser.add_argument("--bootstrap-server", "--broker-list", dest="bootstrap_server", required=True,
                        metavar="HOST:PORT", help="REQUIRED: the broker(s) to connect to")
    parser.add_argument("--topic", required=True, help="REQUIRED: the topic to consume")
    parser.add_argument("--group-id", default=None,
                        help="join this consumer group and commit offsets (default: standalone, every partition)")
    parser.add_argument("--max-messages", type=int, default=-1,
                        help="stop after this many records (-1: no limit; default -1)")
    parser.add_argument("--timeout-ms", type=int, default=None,
                        help="stop when no record has arrived for this long (default: never)")
    parser.add_argument("--reset-policy", choices=["earliest", "latest"], default="earliest",
                        help="where to start without a committed offset (default earliest)")
    parser.add_argument("--enable-autocommit", action="store_true",
                        help="with --group-id: let the consumer commit on its own instead of after each poll")
    parser.add_argument("--consumer-property", action="append", metavar="NAME=VALUE",
                        help="a consumer config, Kafka's name (fetch.max.wait.ms, max.poll.records, ...)")
    parser.add_argument("--consumer.config", dest="consumer_config", help="consumer config properties file")
    return parser


def consumer_options(arguments: Any) -> dict[str, Any]:
    """The KafkaConsumer options the command line asks for."""
    raw: dict[str, str] = {}
    if arguments.consumer_config:
        raw.update(load_properties(arguments.consumer_config))
    raw.update(parse_key_values(arguments.consumer_property, "--consumer-property"))
    options: dict[str, Any] = pop_security_options(raw)
    options.update(property_to_option(name, value) for name, value in raw.items())
    options["bootstrap_servers"] = arguments.bootstrap_server
    options["auto_offset_reset"] = arguments.reset_policy
    options["enable_auto_commit"] = bool(arguments.enable_autocommit)
    if arguments.group_id is not None:
        options["group_id"] = arguments.group_id
    options.setdefault("client_id", "verifiable-consumer")
    return options


def render(data: Any) -> str | None:
    """A key or value as JSON-friendly text (None stays None)."""
    if data is None:
        return None
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data).decode("utf-8", errors="backslashreplace")
    return str(data)


def partition_list(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(partitions)]


class AssignmentReporter:
    """Rebalance listener that reports assignment changes as events."""

    def __init__(self, printer: EventPrinter) -> None:
        self.printer = printer

    def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        self.printer.emit("partitions_revoked", partitions=partition_list(revoked))

    def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.printer.emit("partitions_assigned", partitions=partition_list(assigned))


def records_event(batch: dict[TopicPartition, list[ConsumerRecord]]) -> dict[str, Any]:
    """The fields of one records_consumed event, for every record of one poll."""
    summaries: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    for tp in sorted(batch):
        items = batch[tp]
        if not items:
            continue
        summaries.append({"topic": tp.topic, "partition": tp.partition, "count": len(items),
                          "minOffset": items[0].offset, "maxOffset": items[-1].offset})
        records.extend({"partition": record.partition, "offset": record.offset, "key": render(record.key),
                        "value": render(record.value)} for record in items)
    return {"count": len(records), "partitions": summaries, "records": records}


class VerifiableConsumer:
    """One run of the tool: owns the consumer, the stop flag and the event stream."""

    def __init__(self, arguments: Any, printer: EventPrinter) -> None:
        self.arguments = arguments
        self.printer = printer
        self.stop = threading.Event()
        self.in_group = arguments.group_id is not None
        self.commit_each_poll = self.in_group and not arguments.enable_autocommit
        self.consumed = 0
        self.consumer = KafkaConsumer(**consumer_options(arguments))

    def check_group_support(self) -> bool:
        """With a group id: False (after saying why on standard error) when the client cannot
        use consumer groups yet."""
        if not self.in_group:
            return True
        try:
            self.consumer.committed(TopicPartition(self.arguments.topic, 0))
        except GroupCoordinatorUnsupportedError as exc:
            print(f"Error: --group-id needs consumer groups, which this client does not support yet ({exc}); "
                  "run without --group-id to consume standalone", file=sys.stderr)
            return False
        return True

    def commit(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        offsets = {tp: OffsetAndMetadata(items[-1].offset + 1) for tp, items in batch.items() if items}
        listed = [{"topic": tp.topic, "partition": tp.partition, "offset": meta.offset}
                  for tp, meta in sorted(offsets.items())]
        try:
            self.consumer.commit(offsets)
        except KafkaliteError as exc:
            self.printer.emit("offsets_committed", offsets=listed, success=False,
                              error=f"{type(exc).__name__}: {exc}")
        else:
            self.printer.emit("offsets_committed", offsets=listed, success=True)

    def run(self) -> int:
        """Consume until a stop condition; always prints shutdown_complete."""
        arguments = self.arguments
        maximum = arguments.max_messages
        try:
            if not self.check_group_support():
                return EXIT_FAILED
            self.consumer.subscribe([arguments.topic], listener=AssignmentReporter(self.printer))
            self.printer.emit("startup_complete")
            last_record = time.monotonic()
            while not self.stop.is_set() and (maximum < 0 or self.consumed < maximum):
                wait_ms = POLL_INTERVAL_MS
                if arguments.timeout_ms is not None:
                    remaining_ms = arguments.timeout_ms - (time.monotonic() - last_record) * 1000
                    if remaining_ms <= 0:
                        break
                    wait_ms = int(max(1, min(wait_ms, remaining_ms)))
                limit = None if maximum < 0 else maximum - self.consumed
                batch = self.consumer.poll(timeout_ms=wait_ms, max_records=limit)
                if not batch:
                    continue
                last_record = time.monotonic()
                event = records_event(batch)
                self.consumed += event["count"]
                self.printer.emit("records_consumed", **event)
                if self.commit_each_poll:
                    self.commit(batch)
            return EXIT_OK
        finally:
            try:
                self.consumer.close()
            finally:
                self.printer.emit("shutdown_complete")


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    if arguments.max_messages < -1:
        raise UsageError("--max-messages must be -1 (no limit) or a count")
    if arguments.timeout_ms is not None and arguments.timeout_ms < 0:
        raise UsageError("--timeout-ms must not be negative")
    if arguments.enable_autocommit and arguments.group_id is None:
        raise UsageError("--enable-autocommit needs --group-id")
    tool = VerifiableConsumer(arguments, EventPrinter(out or sys.stdout))
    return run_until_signalled(tool.run, tool.stop)


if __name__ == "__main__":
    sys.exit(run_cli(main))
