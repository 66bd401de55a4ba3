"""``kafkalite-console-consumer.sh``: print a topic's records to standard output, like Kafka's
console consumer (``--from-beginning``, ``--max-messages``, ``--timeout-ms``, ``--partition`` /
``--offset``, ``--group``, ``--isolation-level read_committed`` for the records of committed
transactions only, ``--property print.key/print.timestamp/print.partition/print.offset/
print.headers``, ``key.separator``). It ends after ``--max-messages`` records, after
``--timeout-ms`` without a record, or on Ctrl-C, and reports the count on standard error."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from kafkalite.client import KafkaConsumer, TopicPartition
from kafkalite.config import load_properties
from kafkalite.tools.common import (
    ToolArgumentParser,
    UsageError,
    parse_bool_property,
    parse_key_values,
    pop_security_options,
    run_cli,
)

_CONSUMER_OPTIONS = {
    "auto.offset.reset": "auto_offset_reset", "enable.auto.commit": "enable_auto_commit",
    "fetch.min.bytes": "fetch_min_bytes", "fetch.max.wait.ms": "fetch_max_wait_ms",
    "max.partition.fetch.bytes": "max_partition_fetch_bytes", "fetch.max.bytes": "fetch_max_bytes",
    "max.poll.records": "max_poll_records", "client.id": "client_id", "group.id": "group_id",
    "session.timeout.ms": "session_timeout_ms", "heartbeat.interval.ms": "heartbeat_interval_ms",
    "check.crcs": "check_crcs", "isolation.level": "isolation_level",
    "group.instance.id": "group_instance_id", "max.poll.interval.ms": "max_poll_interval_ms",
    "partition.assignment.strategy": "partition_assignment_strategy",
}
_INTEGER_OPTIONS = {"fetch_min_bytes", "fetch_max_wait_ms", "max_partition_fetch_bytes", "fetch_max_bytes",
                    "max_poll_records", "session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms"}


def build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(prog="kafkalite-console-consumer.sh",
                                description="Consume records from a topic and print them.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="REQUIRED: the broker(s) to connect to")
    parser.add_argument("--topic", required=True, help="REQUIRED: the topic to consume")
    parser.add_argument("--group", help="the consumer group id (committed offsets, shared partitions)")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start with the earliest record when there is no committed offset")
    parser.add_argument("--partition", type=int, help="consume only this partition")
    parser.add_argument("--offset", default=None,
                        help="with --partition: an offset, 'earliest' or 'latest' (default latest)")
    parser.add_argument("--max-messages", type=int, help="exit after this many records")
    parser.add_argument("--timeout-ms", type=int, help="exit if no record arrives for this long")
    parser.add_argument("--property", action="append", metavar="NAME=VALUE",
                        help="formatter properties: print.key, print.value, print.timestamp, print.partition, "
                             "print.offset, print.headers (true/false), key.separator, line.separator, "
                             "headers.separator")
    parser.add_argument("--consumer-property", action="append", metavar="NAME=VALUE",
                        help="a consumer config (Kafka's names)")
    parser.add_argument("--consumer.config", dest="consumer_config", help="consumer config properties file")
    parser.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"],
                        help="read_uncommitted (default) shows every record; read_committed only those of "
                             "committed transactions, up to the last stable offset (overrides isolation.level)")
    parser.add_argument("--skip-message-on-error", action="store_true", help="accepted for compatibility")
    return parser


def _render(data: Any) -> str:
    if data is None:
        return "null"
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return str(data)


class Formatter:
    """Kafka's DefaultMessageFormatter."""

    def __init__(self, properties: dict[str, str]) -> None:
        self.print_key = parse_bool_property(properties, "print.key")
        self.print_value = parse_bool_property(properties, "print.value", True)
        self.print_timestamp = parse_bool_property(properties, "print.timestamp")
        self.print_partition = parse_bool_property(properties, "print.partition")
        self.print_offset = parse_bool_property(properties, "print.offset")
        self.print_headers = parse_bool_property(properties, "print.headers")
        self.key_separator = _unescape(properties.get("key.separator", "\t"))
        self.line_separator = _unescape(properties.get("line.separator", "\n"))
        self.headers_separator = _unescape(properties.get("headers.separator", ","))

    def format(self, record: Any) -> str:
        parts = []
        if self.print_timestamp:
            kind = "LogAppendTime" if record.timestamp_type == 1 else "CreateTime"
            parts.append(f"{kind}:{record.timestamp}{self.key_separator}")
        if self.print_partition:
            parts.append(f"Partition:{record.partition}{self.key_separator}")
        if self.print_offset:
            parts.append(f"Offset:{record.offset}{self.key_separator}")
        if self.print_headers:
            headers = self.headers_separator.join(f"{name}:{_render(value)}" for name, value in record.headers)
            parts.append((headers or "NO_HEADERS") + self.key_separator)
        if self.print_key:
            parts.append(_render(record.key) + self.key_separator)
        if self.print_value:
            parts.append(_render(record.value))
        return "".join(parts) + self.line_separator


def _unescape(text: str) -> str:
    return text.encode("utf-8").decode("unicode_escape")


def _consumer_options(arguments: Any) -> dict[str, Any]:
    raw: dict[str, str] = {}
    if arguments.consumer_config:
        raw.update(load_properties(arguments.consumer_config))
    raw.update(parse_key_values(arguments.consumer_property, "--consumer-property"))
    options: dict[str, Any] = pop_security_options(raw)
    for name, value in raw.items():
        option = _CONSUMER_OPTIONS.get(name)
        if option is None:
            raise UsageError(f"unknown consumer property {name!r}; known: {', '.join(sorted(_CONSUMER_OPTIONS))}")
        options[option] = value
    for option in _INTEGER_OPTIONS & set(options):
        try:
            options[option] = int(options[option])
        except ValueError:
            raise UsageError(f"consumer property for {option} must be an integer") from None
    for option in ("enable_auto_commit", "check_crcs"):
        if option in options:
            options[option] = str(options[option]).lower() == "true"
    if arguments.isolation_level is not None:
        options["isolation_level"] = arguments.isolation_level
    if arguments.group:
        options["group_id"] = arguments.group
    options.setdefault("auto_offset_reset", "earliest" if arguments.from_beginning else "latest")
    options["bootstrap_servers"] = arguments.bootstrap_server
    options.setdefault("client_id", "console-consumer")
    return options


#: Given the ``--property`` values and the consumer's options (which it may extend, e.g. with
#: deserializers), the formatter to print records with (the Avro console consumer passes one).
FormatterFactory = Callable[[dict[str, str], dict[str, Any]], Formatter]


def main(argv: list[str] | None = None, out: TextIO | None = None, *, prog: str | None = None,
         description: str | None = None, formatter_factory: FormatterFactory | None = None) -> int:
    parser = build_parser()
    if prog is not None:
        parser.prog = prog
    if description is not None:
        parser.description = description
    arguments = parser.parse_args(argv)
    properties = parse_key_values(arguments.property, "--property")
    options = _consumer_options(arguments)
    formatter = formatter_factory(properties, options) if formatter_factory is not None else Formatter(properties)
    if arguments.offset is not None and arguments.partition is None:
        raise UsageError("--offset needs --partition")
    if arguments.partition is not None and arguments.group:
        raise UsageError("--partition cannot be used with --group")
    if arguments.max_messages is not None and arguments.max_messages < 0:
        raise UsageError("--max-messages must not be negative")
    output = out or sys.stdout
    consumer = KafkaConsumer(**options)
    count = 0
    try:
        if arguments.partition is not None:
            partition = TopicPartition(arguments.topic, arguments.partition)
            consumer.assign([partition])
            if arguments.offset in (None, "latest"):
                if not arguments.from_beginning:
                    consumer.seek_to_end(partition)
                else:
                    consumer.seek_to_beginning(partition)
            elif arguments.offset == "earliest":
                consumer.seek_to_beginning(partition)
            else:
                try:
                    consumer.seek(partition, int(arguments.offset))
                except ValueError:
                    raise UsageError(f"--offset must be a number, earliest or latest, got {arguments.offset!r}") \
                        from None
        else:
            consumer.subscribe([arguments.topic])
        last_record = time.monotonic()
        while arguments.max_messages is None or count < arguments.max_messages:
            batch = consumer.poll(timeout_ms=200)
            if not batch:
                if arguments.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= arguments.timeout_ms:
                    break
                continue
            last_record = time.monotonic()
            for records in batch.values():
                for record in records:
                    output.write(formatter.format(record))
                    count += 1
                    if arguments.max_messages is not None and count >= arguments.max_messages:
                        break
                if arguments.max_messages is not None and count >= arguments.max_messages:
                    break
            output.flush()
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
