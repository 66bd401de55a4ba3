"""``kafkalite-get-offsets.sh``: print partition offsets, like Kafka's ``GetOffsetShell``
(``kafka-run-class kafka.tools.GetOffsetShell`` / ``kafka-get-offsets.sh``).

One line per partition, sorted by topic then partition::

    topic:partition:offset

``--time`` picks which offset: ``-1`` / ``latest`` (the log end, the default), ``-2`` /
``earliest`` (the log start), ``-3`` / ``max-timestamp`` (the record with the largest
timestamp), or a timestamp in epoch milliseconds (the first offset whose timestamp is at or
after it). As in Kafka, a partition with no such offset (no record at or after the
timestamp; ``max-timestamp`` on an empty partition) is left out. A partition without a
leader is reported on stderr ("Skip getting offsets for topic-partition ...") and the others
are still printed.

Exit codes: 0 done, 1 the lookup failed (no partition matched, no broker answered), 2 bad
arguments.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kafkalite.client import KafkaAdminClient, TopicPartition
from kafkalite.tools.common import ToolArgumentParser, UsageError, command_config_options, run_cli

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
_NAMED_TIMES = {"latest": LATEST, "earliest": EARLIEST, "max-timestamp": MAX_TIMESTAMP}
_NO_OFFSET = -1


def build_parser() -> ToolArgumentParser:
    """The command line, with GetOffsetShell's flag names."""
    parser = ToolArgumentParser(
        prog="kafkalite-get-offsets.sh",
        description="An interactive shell for getting topic-partition offsets. Prints topic:partition:offset lines.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED (or --broker-list): the broker(s) to connect to, e.g. localhost:9092")
    parser.add_argument("--broker-list", metavar="HOST:PORT",
                        help="the older name of --bootstrap-server")
    parser.add_argument("--topic", metavar="TOPIC",
                        help="the topic(s) to get offsets for: a topic name or a regular expression "
                             "(default: all topics)")
    parser.add_argument("--partitions", metavar="P[,P...]",
                        help="comma separated list of partition ids (default: all partitions)")
    parser.add_argument("--topic-partitions", metavar="SPEC",
                        help="comma separated topic:partitions filters, e.g. 'orders:0-2,logs.*:1,audit' "
                             "(partitions N, N-M, N-, -M or nothing for all); not with --topic/--partitions")
    parser.add_argument("--time", default="-1", metavar="TIME",
                        help="-1 or latest (default), -2 or earliest, -3 or max-timestamp, or a timestamp in ms")
    parser.add_argument("--exclude-internal-topics", action="store_true",
                        help="leave out internal topics such as __consumer_offsets")
    parser.add_argument("--command-config", help="client properties file: security.protocol, ssl.*, sasl.*")
    parser.add_argument("--offsets", help="accepted for compatibility (Kafka ignores it too)")
    parser.add_argument("--max-wait-ms", help="accepted for compatibility (Kafka ignores it too)")
    return parser


@dataclass(frozen=True)
class PartitionFilter:
    """One topic pattern with a partition range (``end`` is exclusive, None for unbounded)."""

    topic: re.Pattern[str]
    start: int = 0
    end: int | None = None

    def matches(self, topic: str, partition: int) -> bool:
        """Whether this filter selects ``topic``-``partition``."""
        if not self.topic.fullmatch(topic):
            return False
        return partition >= self.start and (self.end is None or partition < self.end)


def _compile_topic(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"invalid topic regular expression {pattern!r}: {exc}") from None


def parse_time(text: str) -> int:
    """``--time``: a named position, -1/-2/-3, or a non-negative timestamp in milliseconds."""
    named = _NAMED_TIMES.get(text.strip().lower())
    if named is not None:
        return named
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"--time must be -1 (latest), -2 (earliest), -3 (max-timestamp) or a timestamp in ms, "
                         f"got {text!r}") from None
    if value < MAX_TIMESTAMP:
        raise UsageError(f"--time must be -1, -2, -3 or a timestamp in ms, got {value}")
    return value


def parse_partition_ids(text: str) -> set[int]:
    """``--partitions 0,1`` → {0, 1}."""
    try:
        values = {int(item) for item in text.split(",") if item.strip()}
    except ValueError:
        raise UsageError(f"--partitions expects a comma separated list of numeric partition ids, "
                         f"but received: {text}") from None
    if not values or any(value < 0 for value in values):
        raise UsageError(f"--partitions expects a comma separated list of numeric partition ids, "
                         f"but received: {text}")
    return values


def parse_topic_partitions(text: str) -> list[PartitionFilter]:
    """``--topic-partitions``: ``pattern[:N|N-M|N-|-M]`` items separated by commas."""
    filters = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        pattern, separator, spec = item.rpartition(":") if ":" in item else (item, "", "")
        spec = spec.strip()
        if not pattern:
            raise UsageError(f"--topic-partitions: missing topic in {item!r}")
        start, end = 0, None
        match = re.fullmatch(r"(\d*)(-?)(\d*)", spec) if separator else None
        if separator and spec:
            if match is None or (not match.group(1) and not match.group(3)):
                raise UsageError(f"--topic-partitions: invalid partition range {spec!r} in {item!r}")
            low, dash, high = match.groups()
            if not dash:
                start, end = int(low), int(low) + 1
            else:
                start = int(low) if low else 0
                end = int(high) if high else None
                if end is not None and end <= start:
                    raise UsageError(f"--topic-partitions: empty partition range {spec!r} in {item!r}")
        filters.append(PartitionFilter(_compile_topic(pattern), start, end))
    if not filters:
        raise UsageError("--topic-partitions needs at least one topic")
    return filters


def _filters(arguments: Any) -> list[PartitionFilter]:
    if arguments.topic_partitions is not None:
        if arguments.topic is not None or arguments.partitions is not None:
            raise UsageError("--topic-partitions cannot be used with --topic or --partitions")
        return parse_topic_partitions(arguments.topic_partitions)
    topic = _compile_topic(arguments.topic if arguments.topic is not None else ".*")
    if arguments.partitions is None:
        return [PartitionFilter(topic)]
    return [PartitionFilter(topic, number, number + 1) for number in sorted(parse_partition_ids(arguments.partitions))]


def main(argv: list[str] | None = None) -> int:
    """Run the tool; returns the exit code."""
    arguments = build_parser().parse_args(argv)
    bootstrap = arguments.bootstrap_server or arguments.broker_list
    if not bootstrap:
        raise UsageError("--bootstrap-server is required")
    timestamp = parse_time(arguments.time)
    filters = _filters(arguments)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kafkalite-get-offsets",
                             **command_config_options(arguments.command_config))
    try:
        return _print_offsets(admin, filters, timestamp, arguments.exclude_internal_topics)
    finally:
        admin.close()


def _print_offsets(admin: KafkaAdminClient, filters: Sequence[PartitionFilter], timestamp: int,
                   exclude_internal: bool) -> int:
    names = [name for name in admin.list_topics() if any(item.topic.fullmatch(name) for item in filters)]
    descriptions = admin.describe_topics(names) if names else []
    with_leader: list[TopicPartition] = []
    without_leader: list[TopicPartition] = []
    for description in descriptions:
        if exclude_internal and description["is_internal"]:
            continue
        for partition in description["partitions"]:
            number = partition["partition_index"]
            if not any(item.matches(description["name"], number) for item in filters):
                continue
            tp = TopicPartition(description["name"], number)
            (with_leader if partition["leader_id"] >= 0 else without_leader).append(tp)
    if not with_leader and not without_leader:
        print("Error: Could not match any topic-partitions with the specified filters", file=sys.stderr)
        return 1
    for tp in sorted(without_leader):
        print(f"Skip getting offsets for topic-partition {tp.topic}:{tp.partition} due to error: "
              f"LEADER_NOT_AVAILABLE: the partition has no leader", file=sys.stderr)
    answers = admin.list_offsets(dict.fromkeys(with_leader, timestamp)) if with_leader else {}
    for tp in sorted(answers):
        offset = answers[tp].offset
        if offset == _NO_OFFSET:
            continue
        print(f"{tp.topic}:{tp.partition}:{offset}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
