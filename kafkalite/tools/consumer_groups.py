"""``kafkalite-consumer-groups.sh``: list, describe, reset the offsets of and delete consumer
groups, like Kafka's ``kafka-consumer-groups.sh`` (same flags, columns and messages).

* ``--list`` — every group id (asked of every broker);
* ``--describe --group G | --all-groups`` — per partition ``GROUP TOPIC PARTITION CURRENT-OFFSET
  LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID`` (LOG-END-OFFSET is the high watermark, LAG
  = high watermark − committed offset); ``--members`` (``--verbose`` adds each member's
  partitions) and ``--state`` variants;
* ``--reset-offsets --group G (--topic T[:P,P...] ... | --all-topics)`` with one of
  ``--to-earliest``, ``--to-latest``, ``--to-current``, ``--to-offset N``, ``--shift-by N``,
  ``--to-datetime YYYY-MM-DDTHH:mm:SS[.sss][Z|±hh:mm]`` (local time without a zone) — printed
  only (``--dry-run``, the default) or committed with ``--execute``. Offsets are kept within
  [log start, log end], as Kafka does. A group with active members is refused;
* ``--delete --group G [--group G2...]``.

Exit codes: 0 done, 1 the operation failed (a message says why), 2 bad arguments. No tracebacks.
The pure parts (argument checks, reset computation, table layout) are plain functions.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kafkalite import protocol
from kafkalite.client import GroupInformation, KafkaAdminClient, OffsetAndMetadata, TopicPartition
from kafkalite.tools.common import (
    EXIT_FAILED,
    EXIT_OK,
    ToolArgumentParser,
    UsageError,
    command_config_options,
    run_cli,
)

SCENARIOS = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime")
INACTIVE_STATES = ("Empty", "Dead")


def build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(prog="kafkalite-consumer-groups.sh",
                                description="List all consumer groups, describe a consumer group, delete consumer "
                                            "group info, or reset consumer group offsets.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the server(s) to connect to, e.g. localhost:9092")
    actions = parser.add_mutually_exclusive_group()
    actions.add_argument("--list", action="store_true", help="list all consumer groups")
    actions.add_argument("--describe", action="store_true", help="describe consumer group(s): offsets and lag")
    actions.add_argument("--reset-offsets", action="store_true",
                         help="reset the offsets of a consumer group (dry run unless --execute)")
    actions.add_argument("--delete", action="store_true", help="delete consumer group(s)")
    parser.add_argument("--group", action="append", metavar="GROUP", help="the consumer group (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="apply to all consumer groups")
    parser.add_argument("--topic", action="append", metavar="TOPIC[:PARTITIONS]",
                        help="with --reset-offsets: a topic, optionally with partitions 'topic:0,1,2' (repeatable)")
    parser.add_argument("--all-topics", action="store_true", help="with --reset-offsets: every topic of the group")
    parser.add_argument("--members", action="store_true", help="with --describe: the group's members")
    parser.add_argument("--verbose", action="store_true", help="with --describe --members: their partitions")
    parser.add_argument("--state", action="store_true", help="with --describe: the group's state; with --list too")
    parser.add_argument("--offsets", action="store_true", help="with --describe: offsets and lag (the default)")
    parser.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"],
                        default="read_uncommitted",
                        help="with --describe: the log end of the lag: the high watermark (read_uncommitted, "
                             "Kafka's) or the last stable offset (read_committed: what such consumers can read)")
    parser.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    parser.add_argument("--to-latest", action="store_true", help="reset to the latest offset")
    parser.add_argument("--to-current", action="store_true", help="reset to the current committed offset")
    parser.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N")
    parser.add_argument("--shift-by", type=int, metavar="N", help="shift the committed offset by N (may be negative)")
    parser.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                        help="reset to the first offset whose timestamp is at or after this time")
    parser.add_argument("--dry-run", action="store_true", help="only show the result (the default)")
    parser.add_argument("--execute", action="store_true", help="commit the new offsets")
    parser.add_argument("--timeout", type=int, default=5000, metavar="MS", help="accepted for compatibility")
    parser.add_argument("--command-config", help="client properties file: security.protocol, ssl.*, sasl.*")
    return parser


# --- pure helpers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicSelection:
    topic: str
    partitions: tuple[int, ...] | None  # None: every partition


def parse_topic_argument(text: str) -> TopicSelection:
    """``orders`` or ``orders:0,2``."""
    topic, separator, rest = text.partition(":")
    if not topic:
        raise UsageError(f"--topic needs a topic name, got {text!r}")
    if not separator:
        return TopicSelection(topic, None)
    try:
        numbers = tuple(sorted({int(part) for part in rest.split(",") if part.strip()}))
    except ValueError:
        raise UsageError(f"--topic partitions must be numbers: 'topic:0,1,2', got {text!r}") from None
    if not numbers or any(number < 0 for number in numbers):
        raise UsageError(f"--topic partitions must be non-negative numbers: 'topic:0,1,2', got {text!r}")
    return TopicSelection(topic, numbers)


_DATETIME = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d{1,3})?(Z|[+-]\d{2}:?\d{2})?$")


def parse_datetime_ms(text: str) -> int:
    """``YYYY-MM-DDTHH:mm:SS[.sss][Z|±hh:mm]`` → epoch milliseconds (local time without a zone)."""
    match = _DATETIME.match(text.strip())
    if match is None:
        raise UsageError(f"--to-datetime expects YYYY-MM-DDTHH:mm:SS.sss, got {text!r}")
    base, fraction, zone = match.groups()
    normalized = base + (fraction or ".000").ljust(4, "0")
    if zone == "Z":
        normalized += "+00:00"
    elif zone:
        normalized += zone if ":" in zone else f"{zone[:3]}:{zone[3:]}"
    try:
        moment = datetime.fromisoformat(normalized)
    except ValueError:
        raise UsageError(f"--to-datetime is not a valid time: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as Kafka's tool reads it
    return round(moment.timestamp() * 1000)


def scenario_of(arguments: Any) -> tuple[str, Any]:
    chosen = [(name, getattr(arguments, name)) for name in SCENARIOS
              if getattr(arguments, name) not in (None, False)]
    if len(chosen) != 1:
        raise UsageError("--reset-offsets needs exactly one of --to-earliest, --to-latest, --to-current, "
                         "--to-offset, --shift-by, --to-datetime")
    return chosen[0]


def reset_offsets(scenario: str, value: Any, partitions: Iterable[TopicPartition],
                  committed: dict[TopicPartition, int], earliest: dict[TopicPartition, int],
                  latest: dict[TopicPartition, int], by_time: dict[TopicPartition, int | None] | None = None
                  ) -> dict[TopicPartition, int]:
    """The new offset of each partition for a reset scenario, kept within [earliest, latest]."""
    result: dict[TopicPartition, int] = {}
    for tp in sorted(partitions):
        low, high = earliest[tp], latest[tp]
        if scenario == "to_earliest":
            target = low
        elif scenario == "to_latest":
            target = high
        elif scenario == "to_current":
            target = committed[tp] if committed.get(tp, -1) >= 0 else high
        elif scenario == "to_offset":
            target = int(value)
        elif scenario == "shift_by":
            current = committed.get(tp, -1)
            if current < 0:
                raise UsageError(f"Cannot shift offset for partition {tp.topic}-{tp.partition} since there is no "
                                 "current committed offset")
            target = current + int(value)
        elif scenario == "to_datetime":
            found = (by_time or {}).get(tp)
            target = high if found is None or found < 0 else found
        else:
            raise UsageError(f"unknown reset scenario {scenario!r}")
        result[tp] = min(max(target, low), high)
    return result


def format_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned columns as wide as their widest cell, separated by spaces (Kafka's layout)."""
    cells = [list(header)] + [["-" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [max(len(row[index]) for row in cells) for index in range(len(header))]
    return "\n".join(" ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in cells)


OFFSET_HEADER = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                 "CLIENT-ID")


# --- commands ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    if not (arguments.list or arguments.describe or arguments.reset_offsets or arguments.delete):
        raise UsageError("one of --list, --describe, --reset-offsets or --delete is required")
    if not arguments.bootstrap_server:
        raise UsageError("--bootstrap-server is required")
    groups = arguments.group or []
    if (arguments.describe or arguments.reset_offsets or arguments.delete) and not groups and not arguments.all_groups:
        raise UsageError("--group or --all-groups is required")
    if groups and arguments.all_groups:
        raise UsageError("--group and --all-groups cannot be combined")
    if arguments.reset_offsets:
        scenario_of(arguments)
        if arguments.dry_run and arguments.execute:
            raise UsageError("--dry-run and --execute cannot be combined")
        if not arguments.topic and not arguments.all_topics:
            raise UsageError("--reset-offsets needs --topic or --all-topics")
        if arguments.topic and arguments.all_topics:
            raise UsageError("--topic and --all-topics cannot be combined")
        for text in arguments.topic or []:
            parse_topic_argument(text)
        if arguments.to_datetime is not None:
            parse_datetime_ms(arguments.to_datetime)
    elif arguments.topic or arguments.all_topics:
        if not arguments.delete:
            raise UsageError("--topic and --all-topics only go with --reset-offsets")
        raise UsageError("--delete --topic (deleting a group's offsets of a topic) is not supported")
    if arguments.describe and sum(bool(flag) for flag in (arguments.members, arguments.state, arguments.offsets)) > 1:
        raise UsageError("--members, --state and --offsets cannot be combined")
    admin = KafkaAdminClient(bootstrap_servers=arguments.bootstrap_server, client_id="kafkalite-consumer-groups",
                             **command_config_options(arguments.command_config))
    try:
        if arguments.list:
            return _list(admin, arguments)
        if arguments.all_groups:
            groups = [group for group, _ in admin.list_consumer_groups()]
        if arguments.describe:
            return _describe(admin, groups, arguments)
        if arguments.reset_offsets:
            return _reset(admin, groups, arguments)
        return _delete(admin, groups)
    finally:
        admin.close()


def _list(admin: KafkaAdminClient, arguments: Any) -> int:
    listed = admin.list_consumer_groups()
    if not arguments.state:
        for group, _ in listed:
            print(group)
        return EXIT_OK
    descriptions = admin.describe_consumer_groups([group for group, _ in listed]) if listed else []
    print(format_table(("GROUP", "STATE"), [(item.group, item.state) for item in descriptions]))
    return EXIT_OK


def _missing(description: GroupInformation) -> bool:
    return description.state == "Dead" and not description.members and description.generation_id < 0


def _describe(admin: KafkaAdminClient, groups: list[str], arguments: Any) -> int:
    status = EXIT_OK
    for index, description in enumerate(admin.describe_consumer_groups(groups)):
        if index:
            print()
        group = description.group
        if description.error_code:
            error = protocol.error_for(description.error_code)
            print(f"Error: Consumer group '{group}' could not be described: {error.message}", file=sys.stderr)
            status = EXIT_FAILED
            continue
        if _missing(description):
            print(f"Error: Consumer group '{group}' does not exist.", file=sys.stderr)
            status = EXIT_FAILED
            continue
        if arguments.state:
            _print_state(description)
        elif arguments.members:
            _print_members(description, arguments.verbose)
        else:
            _print_offsets(admin, description, arguments.isolation_level)
    return status


def _coordinator(description: GroupInformation) -> str:
    coordinator = description.coordinator
    return f"{coordinator.host}:{coordinator.port} ({coordinator.broker_id})" if coordinator else "-"


def _print_state(description: GroupInformation) -> None:
    print(format_table(("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                       [(description.group, _coordinator(description), description.protocol or "",
                         description.state, len(description.members))]))


def _no_members(description: GroupInformation) -> bool:
    if description.members:
        return False
    print(f"\nConsumer group '{description.group}' has no active members.\n")
    return True


def _host(member: Any) -> str:
    return f"/{member.client_host}" if member.client_host and not member.client_host.startswith("/") else (
        member.client_host or "-")


def _print_members(description: GroupInformation, verbose: bool) -> None:
    if _no_members(description):
        return
    header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        header.append("ASSIGNMENT")
    rows = []
    for member in sorted(description.members, key=lambda item: item.member_id):
        row: list[Any] = [description.group, member.member_id, _host(member), member.client_id,
                          len(member.partitions)]
        if verbose:
            by_topic: dict[str, list[int]] = {}
            for tp in member.partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            row.append(",".join(f"{topic}({','.join(str(number) for number in numbers)})"
                                for topic, numbers in sorted(by_topic.items())) or "-")
        rows.append(row)
    print(format_table(header, rows))


def _print_offsets(admin: KafkaAdminClient, description: GroupInformation,
                   isolation_level: str = "read_uncommitted") -> None:
    owners: dict[TopicPartition, Any] = {}
    for member in description.members:
        for tp in member.partitions:
            owners[tp] = member
    lag = admin.consumer_group_lag(description.group, sorted(owners), isolation_level)
    _no_members(description)
    rows: list[tuple[Any, ...]] = []
    for tp in sorted(set(lag) | set(owners)):
        entry = lag.get(tp)
        owner = owners.get(tp)
        rows.append((description.group, tp.topic, tp.partition, entry.committed if entry else None,
                     entry.log_end_offset if entry else None, entry.lag if entry else None,
                     owner.member_id if owner else None, _host(owner) if owner else None,
                     owner.client_id if owner else None))
    idle = [member for member in description.members if not member.partitions]
    for member in sorted(idle, key=lambda item: item.member_id):
        rows.append((description.group, None, None, None, None, None, member.member_id, _host(member),
                     member.client_id))
    print(format_table(OFFSET_HEADER, rows))


def _partitions_to_reset(admin: KafkaAdminClient, group: str, arguments: Any,
                         committed: dict[TopicPartition, OffsetAndMetadata]) -> list[TopicPartition]:
    if arguments.all_topics:
        return sorted(tp for tp, value in committed.items() if value.offset >= 0)
    selections = [parse_topic_argument(text) for text in arguments.topic]
    chosen: list[TopicPartition] = []
    described = {item["name"]: item for item in admin.describe_topics([item.topic for item in selections])}
    for selection in selections:
        topic = described.get(selection.topic)
        if topic is None or topic.get("error_code") or not topic.get("partitions"):
            raise UsageError(f"Topic '{selection.topic}' does not exist")
        existing = {item["partition_index"] for item in topic["partitions"]}
        numbers = selection.partitions if selection.partitions is not None else tuple(sorted(existing))
        unknown = sorted(set(numbers) - existing)
        if unknown:
            raise UsageError(f"Topic '{selection.topic}' has no partition {unknown[0]}")
        chosen.extend(TopicPartition(selection.topic, number) for number in numbers)
    return sorted(set(chosen))


def _reset(admin: KafkaAdminClient, groups: list[str], arguments: Any) -> int:
    scenario, value = scenario_of(arguments)
    by_time_ms = parse_datetime_ms(value) if scenario == "to_datetime" else None
    if not arguments.execute and not arguments.dry_run:
        print("WARN: No action will be performed as the --execute option is missing. Add --dry-run to keep this "
              "behaviour explicitly, or --execute to commit the new offsets.", file=sys.stderr)
    rows: list[tuple[str, str, int, int]] = []
    for description in admin.describe_consumer_groups(groups):
        group = description.group
        if description.state not in INACTIVE_STATES:
            print(f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state "
                  f"is {description.state}.", file=sys.stderr)
            return EXIT_FAILED
        committed = admin.list_consumer_group_offsets(group)
        partitions = _partitions_to_reset(admin, group, arguments, committed)
        if not partitions:
            continue
        earliest = admin.beginning_offsets(partitions)
        latest = admin.end_offsets(partitions)
        by_time: dict[TopicPartition, int | None] | None = None
        if by_time_ms is not None:
            found = admin.list_offsets(dict.fromkeys(partitions, by_time_ms))
            by_time = {tp: answer.offset for tp, answer in found.items()}
        current = {tp: item.offset for tp, item in committed.items()}
        new = reset_offsets(scenario, value, partitions, current, earliest, latest, by_time)
        if arguments.execute:
            admin.alter_consumer_group_offsets(group, {tp: OffsetAndMetadata(offset) for tp, offset in new.items()})
        rows.extend((group, tp.topic, tp.partition, offset) for tp, offset in sorted(new.items()))
    print(format_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows))
    return EXIT_OK


def _delete(admin: KafkaAdminClient, groups: list[str]) -> int:
    results = admin.delete_consumer_groups(groups)
    done = [group for group, error in results if error is None]
    failed = [(group, error) for group, error in results if error is not None]
    if done:
        listed = ", ".join(f"'{group}'" for group in done)
        print(f"Deletion of requested consumer groups ({listed}) was successful.")
    if failed:
        print("Error: Deletion of some consumer groups failed:", file=sys.stderr)
        for group, error in failed:
            assert error is not None
            reason = error.args[0] if error.args else error.description
            print(f"* Group '{group}' could not be deleted due to: {error.message}: {reason}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(run_cli(main))
