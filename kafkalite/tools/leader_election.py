"""``kafkalite-leader-election.sh``: move partition leadership back to the preferred replicas,
like Kafka's ``kafka-leader-election.sh``.

Which partitions: ``--topic T --partition P``, ``--all-topic-partitions``, or
``--path-to-json-file F`` holding ``{"partitions": [{"topic": "t", "partition": 0}, ...]}``.
Only ``--election-type preferred`` exists in kafkalite (unclean elections are not offered).

Output, as in Kafka (partitions written ``topic-partition``, sorted)::

    Successfully completed leader election (PREFERRED) for partitions orders-0, orders-3
    Valid replica already elected for partitions orders-1, orders-2

A partition that could not be elected gets an "Error completing leader election (PREFERRED)
for partition: t-p: ..." line and the tool exits 1 ("N replica(s) could not be elected").

Exit codes: 0 done, 1 an election failed (unknown partition, preferred replica not in sync or
down, no broker reachable), 2 bad arguments.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kafkalite import errors
from kafkalite.client import KafkaAdminClient, TopicPartition
from kafkalite.tools.common import ToolArgumentParser, UsageError, command_config_options, run_cli

_SUCCESS = "NONE"
_NOT_NEEDED = "ELECTION_NOT_NEEDED"
# Election outcomes that have no class in kafkalite.errors (Kafka's texts where Kafka has them).
_DESCRIPTIONS = {
    "PREFERRED_LEADER_NOT_AVAILABLE": "The preferred leader was not available.",
    "ELIGIBLE_LEADERS_NOT_AVAILABLE": "Eligible topic partition leaders are not available.",
    "ELECTION_FAILED": "The partition state changed while the controller was electing; try again.",
}


def build_parser() -> ToolArgumentParser:
    """The command line, with kafka-leader-election.sh's flag names."""
    parser = ToolArgumentParser(prog="kafkalite-leader-election.sh",
                                description="Start a preferred leader election for topic partitions.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the broker(s) to connect to, e.g. localhost:9092")
    parser.add_argument("--election-type", metavar="TYPE", type=str.lower, choices=["preferred"],
                        help="REQUIRED: the type of election: preferred (kafkalite offers no unclean election)")
    parser.add_argument("--topic", help="the topic of the partition to elect (with --partition)")
    parser.add_argument("--partition", type=int, help="the partition to elect (with --topic)")
    parser.add_argument("--all-topic-partitions", action="store_true",
                        help="elect every partition of every topic")
    parser.add_argument("--path-to-json-file", metavar="FILE",
                        help='a JSON file: {"partitions": [{"topic": "foo", "partition": 1}, ...]}')
    parser.add_argument("--admin.config", dest="admin_config", metavar="CONFIG-FILE",
                        help="client properties file: security.protocol, ssl.*, sasl.*")
    return parser


def load_partitions_file(path: str) -> list[TopicPartition]:
    """The partitions listed in a ``--path-to-json-file`` document; usage errors for bad files."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read --path-to-json-file {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"--path-to-json-file {path} is not valid JSON: {exc}") from None
    items = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise UsageError(f'--path-to-json-file {path} must hold {{"partitions": [{{"topic": ..., "partition": ...}}]}}')
    partitions: list[TopicPartition] = []
    for index, item in enumerate(items):
        topic = item.get("topic") if isinstance(item, dict) else None
        number = item.get("partition") if isinstance(item, dict) else None
        if not isinstance(topic, str) or not topic or isinstance(number, bool) or not isinstance(number, int):
            raise UsageError(f"--path-to-json-file {path}: entry {index} needs a string \"topic\" and an "
                             f"integer \"partition\", got {item!r}")
        partitions.append(TopicPartition(topic, number))
    duplicates = sorted({tp for tp in partitions if partitions.count(tp) > 1})
    if duplicates:
        raise UsageError("Replica election data contains duplicate partitions: "
                         + ", ".join(_name(tp) for tp in duplicates))
    if not partitions:
        raise UsageError(f"--path-to-json-file {path} lists no partitions")
    return partitions


def describe_outcome(outcome: str) -> str:
    """A sentence for an election outcome name such as ``UNKNOWN_TOPIC_OR_PARTITION``."""
    known = errors.for_name(outcome)
    if known.message == outcome:
        return known.description
    return _DESCRIPTIONS.get(outcome, "the election failed")


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def _selected(arguments: Any) -> list[TopicPartition] | None:
    """The partitions to elect; None means all of them."""
    chosen = [flag for flag, given in (("--topic", arguments.topic is not None),
                                       ("--all-topic-partitions", arguments.all_topic_partitions),
                                       ("--path-to-json-file", arguments.path_to_json_file is not None)) if given]
    if len(chosen) != 1:
        raise UsageError("One and only one of the following options is required: "
                         "--all-topic-partitions, --topic, --path-to-json-file")
    if arguments.partition is not None and arguments.topic is None:
        raise UsageError("--partition needs --topic")
    if arguments.all_topic_partitions:
        return None
    if arguments.path_to_json_file is not None:
        return load_partitions_file(arguments.path_to_json_file)
    if arguments.partition is None:
        raise UsageError("Missing required option(s): --partition (with --topic)")
    if arguments.partition < 0:
        raise UsageError(f"--partition must not be negative, got {arguments.partition}")
    return [TopicPartition(arguments.topic, arguments.partition)]


def main(argv: list[str] | None = None) -> int:
    """Run the tool; returns the exit code."""
    arguments = build_parser().parse_args(argv)
    if not arguments.bootstrap_server:
        raise UsageError("--bootstrap-server is required")
    if arguments.election_type is None:
        raise UsageError("Missing required option(s): --election-type")
    partitions = _selected(arguments)
    admin = KafkaAdminClient(bootstrap_servers=arguments.bootstrap_server, client_id="kafkalite-leader-election",
                             **command_config_options(arguments.admin_config))
    try:
        results = admin.elect_leaders("preferred", partitions, raise_errors=False)
    finally:
        admin.close()
    return report(results)


def report(results: dict[TopicPartition, str]) -> int:
    """Print Kafka's summary lines for election results; 1 when any partition failed."""
    election = "PREFERRED"
    succeeded = sorted(tp for tp, outcome in results.items() if outcome == _SUCCESS)
    not_needed = sorted(tp for tp, outcome in results.items() if outcome == _NOT_NEEDED)
    failed = sorted((tp, outcome) for tp, outcome in results.items() if outcome not in (_SUCCESS, _NOT_NEEDED))
    if succeeded:
        print(f"Successfully completed leader election ({election}) for partitions "
              + ", ".join(_name(tp) for tp in succeeded))
    if not_needed:
        print("Valid replica already elected for partitions " + ", ".join(_name(tp) for tp in not_needed))
    if not failed:
        return 0
    for tp, outcome in failed:
        print(f"Error completing leader election ({election}) for partition: {_name(tp)}: {outcome}: "
              f"{describe_outcome(outcome)}")
    print(f"Error: {len(failed)} replica(s) could not be elected", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(run_cli(main))
