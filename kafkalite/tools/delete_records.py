"""``kafkalite-delete-records.sh``: delete a partition's records before an offset (Kafka's
DeleteRecords, KIP-107), like Kafka's ``kafka-delete-records.sh``.

``--offset-json-file F`` holds Kafka's document::

    {"partitions": [{"topic": "orders", "partition": 0, "offset": 40}], "version": 1}

``offset`` -1 means the partition's high watermark (delete everything consumers can read).
Each partition's log start offset moves to its offset on the leader and on every replica of
the ISR; whole segments below it are deleted.

Output, as in Kafka (partitions written ``topic-partition``, sorted)::

    Executing records delete operation
    Records delete operation completed:
    partition: orders-0	low_watermark: 40

A partition that failed gets ``partition: t-p	error: NAME: message`` instead, and the tool
exits 1 ("N partition(s) ...").

Exit codes: 0 done, 1 a partition failed (offset beyond the high watermark, unknown partition,
no leader, no broker reachable), 2 bad arguments or a bad offset file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kafkalite.client import KafkaAdminClient, TopicPartition
from kafkalite.tools.common import ToolArgumentParser, UsageError, command_config_options, run_cli

_EXAMPLE = '{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}'


def build_parser() -> ToolArgumentParser:
    """The command line, with kafka-delete-records.sh's flag names."""
    parser = ToolArgumentParser(prog="kafkalite-delete-records.sh",
                                description="Delete records of the given partitions down to the specified offset.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the broker(s) to connect to, e.g. localhost:9092")
    parser.add_argument("--offset-json-file", metavar="FILE",
                        help=f"REQUIRED: the JSON file with the offset per partition, e.g. {_EXAMPLE}")
    parser.add_argument("--timeout-ms", type=int, default=30_000, metavar="MS",
                        help="how long to wait for the replicas of each partition (default 30000)")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties file: security.protocol, ssl.*, sasl.*")
    return parser


def load_offsets_file(path: str) -> dict[TopicPartition, int]:
    """The offsets of an ``--offset-json-file`` document; usage errors for bad files."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read --offset-json-file {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"--offset-json-file {path} is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise UsageError(f"--offset-json-file {path} must hold an object like {_EXAMPLE}")
    version = document.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise UsageError(f"--offset-json-file {path}: not supported version field value {version!r} (only 1 is)")
    items = document.get("partitions")
    if not isinstance(items, list):
        raise UsageError(f"--offset-json-file {path} must list \"partitions\", like {_EXAMPLE}")
    offsets: dict[TopicPartition, int] = {}
    duplicates: list[TopicPartition] = []
    for index, item in enumerate(items):
        fields = [item.get(name) if isinstance(item, dict) else None for name in ("topic", "partition", "offset")]
        topic, number, offset = fields
        if not isinstance(topic, str) or not topic or not isinstance(number, int) or not isinstance(offset, int) \
                or isinstance(number, bool) or isinstance(offset, bool):
            raise UsageError(f"--offset-json-file {path}: entry {index} needs a string \"topic\" and integer "
                             f"\"partition\" and \"offset\", got {item!r}")
        if number < 0:
            raise UsageError(f"--offset-json-file {path}: entry {index} has a negative partition {number}")
        if offset < -1:
            raise UsageError(f"--offset-json-file {path}: entry {index} has offset {offset}; an offset is >= 0, "
                             f"or -1 for the high watermark")
        tp = TopicPartition(topic, number)
        if tp in offsets:
            duplicates.append(tp)
        offsets[tp] = offset
    if duplicates:
        raise UsageError("Offset json file contains duplicate topic partitions: "
                         + ", ".join(_name(tp) for tp in sorted(set(duplicates))))
    if not offsets:
        raise UsageError(f"--offset-json-file {path} lists no partitions")
    return offsets


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def main(argv: list[str] | None = None) -> int:
    """Run the tool; returns the exit code."""
    arguments = build_parser().parse_args(argv)
    missing = [flag for flag, value in (("--bootstrap-server", arguments.bootstrap_server),
                                        ("--offset-json-file", arguments.offset_json_file)) if not value]
    if missing:
        raise UsageError(f"Missing required option(s): {', '.join(missing)}")
    if arguments.timeout_ms < 0:
        raise UsageError(f"--timeout-ms must not be negative, got {arguments.timeout_ms}")
    offsets = load_offsets_file(arguments.offset_json_file)
    admin = KafkaAdminClient(bootstrap_servers=arguments.bootstrap_server, client_id="kafkalite-delete-records",
                             **command_config_options(arguments.command_config))
    try:
        print("Executing records delete operation", flush=True)
        results = admin.delete_records(offsets, timeout_ms=arguments.timeout_ms, raise_errors=False)
    finally:
        admin.close()
    return report(results)


def report(results: dict[TopicPartition, dict[str, Any]]) -> int:
    """Print Kafka's result lines; 1 when any partition failed."""
    print("Records delete operation completed:")
    failed = 0
    for tp, result in sorted(results.items()):
        error = result.get("error")
        if error is None:
            print(f"partition: {_name(tp)}\tlow_watermark: {result['low_watermark']}")
        else:
            failed += 1
            print(f"partition: {_name(tp)}\terror: {error.message}: {error}")
    if failed:
        print(f"Error: records of {failed} partition(s) could not be deleted", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
