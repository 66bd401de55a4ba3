"""``kafkalite-reassign-partitions.sh``: move partition replicas between brokers, like Kafka's
``kafka-reassign-partitions.sh`` (``--generate``, ``--execute [--throttle B]``, ``--verify``).

The JSON files are Kafka's: ``{"version":1,"topics":[{"topic":"foo"}]}`` to generate a plan,
``{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[2,3]}]}`` to execute one.
``--throttle`` caps the copy rate of the new replicas (a cluster-wide dynamic broker config)
until ``--verify`` sees every partition done and removes it. ``--wait`` (with ``--execute`` or
``--verify``) follows the reassignment and prints its progress until it completes.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from kafkalite.assignment import assign_replicas
from kafkalite.client import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafkalite.errors import BrokerResponseError
from kafkalite.tools.common import ToolArgumentParser, UsageError, command_config_options, run_cli

THROTTLE_CONFIG = "follower.replication.throttled.rate"


def build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(prog="kafkalite-reassign-partitions.sh",
                                description="Move partition replicas between brokers.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="REQUIRED: broker(s)")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties file: security.protocol, ssl.*, sasl.*")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--generate", action="store_true", help="propose a reassignment for the given topics")
    actions.add_argument("--execute", action="store_true", help="start the reassignment in the JSON file")
    actions.add_argument("--verify", action="store_true", help="report progress; removes the throttle when done")
    parser.add_argument("--topics-to-move-json-file", help="with --generate: topics to move")
    parser.add_argument("--broker-list", help="with --generate: the brokers to move to, e.g. 1,2,3")
    parser.add_argument("--reassignment-json-file", help="with --execute/--verify: the target assignment")
    parser.add_argument("--throttle", type=int, default=-1, help="with --execute: replication rate cap in bytes/s")
    parser.add_argument("--wait", action="store_true", help="follow the reassignment until it completes")
    parser.add_argument("--timeout", type=int, default=600, help="with --wait: give up after this many seconds")
    parser.add_argument("--disable-rack-aware", action="store_true", help="accepted for compatibility")
    return parser


def _read_json(path: str | None, flag: str) -> Any:
    if not path:
        raise UsageError(f"{flag} is required")
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON: {exc}") from None


def _targets(document: Any) -> dict[tuple[str, int], list[int]]:
    if not isinstance(document, dict) or not isinstance(document.get("partitions"), list):
        raise UsageError('the reassignment file must look like {"version":1,"partitions":[...]}')
    targets: dict[tuple[str, int], list[int]] = {}
    for entry in document["partitions"]:
        try:
            topic, partition = str(entry["topic"]), int(entry["partition"])
            replicas = [int(broker) for broker in entry["replicas"]]
        except (KeyError, TypeError, ValueError):
            raise UsageError(f"malformed partition entry {entry!r}") from None
        if (topic, partition) in targets:
            raise UsageError(f"{topic}-{partition} is listed twice")
        targets[(topic, partition)] = replicas
    if not targets:
        raise UsageError("the reassignment file lists no partition")
    return targets


def _current(admin: KafkaAdminClient, topics: list[str]) -> dict[tuple[str, int], list[int]]:
    current: dict[tuple[str, int], list[int]] = {}
    for description in admin.describe_topics(topics):
        if description.get("error_code"):
            raise UsageError(f"topic {description['name']} does not exist")
        for partition in description["partitions"]:
            current[(description["name"], partition["partition_index"])] = list(partition["replica_nodes"])
    return current


def _document(assignment: dict[tuple[str, int], list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": partition, "replicas": replicas, "log_dirs": ["any"] * len(replicas)}
        for (topic, partition), replicas in sorted(assignment.items())]}, separators=(",", ":"))


def main(argv: list[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    admin = KafkaAdminClient(bootstrap_servers=arguments.bootstrap_server, client_id="kafkalite-reassign-partitions",
                             **command_config_options(arguments.command_config))
    try:
        if arguments.generate:
            return _generate(admin, arguments)
        if arguments.execute:
            return _execute(admin, arguments)
        return _verify(admin, arguments)
    finally:
        admin.close()


def _generate(admin: KafkaAdminClient, arguments: Any) -> int:
    document = _read_json(arguments.topics_to_move_json_file, "--topics-to-move-json-file")
    try:
        topics = [str(entry["topic"]) for entry in document["topics"]]
    except (KeyError, TypeError):
        raise UsageError('the topics file must look like {"version":1,"topics":[{"topic":"foo"}]}') from None
    if not arguments.broker_list:
        raise UsageError("--broker-list is required with --generate")
    try:
        brokers = sorted({int(broker) for broker in arguments.broker_list.split(",")})
    except ValueError:
        raise UsageError(f"--broker-list must be broker ids like 1,2,3, got {arguments.broker_list!r}") from None
    current = _current(admin, topics)
    proposed: dict[tuple[str, int], list[int]] = {}
    for topic in topics:
        partitions = sorted(number for name, number in current if name == topic)
        factor = len(current[(topic, partitions[0])])
        try:
            plan = assign_replicas(brokers, len(partitions), factor)
        except BrokerResponseError as exc:
            print(f"Error: {exc.args[0]}", file=sys.stderr)
            return 1
        proposed.update({(topic, number): replicas for number, replicas in plan.items()})
    print("Current partition replica assignment")
    print(_document(current))
    print()
    print("Proposed partition reassignment configuration")
    print(_document(proposed))
    return 0


def _execute(admin: KafkaAdminClient, arguments: Any) -> int:
    targets = _targets(_read_json(arguments.reassignment_json_file, "--reassignment-json-file"))
    current = _current(admin, sorted({topic for topic, _ in targets}))
    missing = [f"{topic}-{number}" for topic, number in targets if (topic, number) not in current]
    if missing:
        print(f"Error: unknown partitions {', '.join(missing)}", file=sys.stderr)
        return 1
    print("Current partition replica assignment\n")
    print(_document({key: current[key] for key in targets}))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    if arguments.throttle >= 0:
        admin.incremental_alter_configs([ConfigResource(ConfigResourceType.BROKER, "",
                                                        {THROTTLE_CONFIG: str(arguments.throttle)})])
        print(f"Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
              f"throttle is removed.\nThe inter-broker throttle limit was set to {arguments.throttle} B/s")
    results = admin.alter_partition_reassignments(targets)
    failed = {key: error for key, error in results.items() if error is not None}
    for (topic, number), error in sorted(failed.items()):
        print(f"Error: reassignment of {topic}-{number} refused: {error}", file=sys.stderr)
    started = sorted(key for key in targets if key not in failed)
    if started:
        print("Successfully started partition reassignment" + ("s" if len(started) > 1 else "") + " for "
              + ",".join(f"{topic}-{number}" for topic, number in started))
    if failed:
        return 1
    if arguments.wait:
        return _follow(admin, targets, arguments.timeout, remove_throttle=arguments.throttle >= 0)
    return 0


def _status(admin: KafkaAdminClient, targets: dict[tuple[str, int], list[int]]) -> dict[tuple[str, int], str]:
    in_progress = {(entry["topic"], entry["partition"]) for entry in admin.list_partition_reassignments()}
    current = _current(admin, sorted({topic for topic, _ in targets}))
    status = {}
    for key, replicas in targets.items():
        if key in in_progress:
            status[key] = "in progress"
        elif current.get(key) == replicas:
            status[key] = "completed"
        else:
            status[key] = "failed"
    return status


def _verify(admin: KafkaAdminClient, arguments: Any) -> int:
    targets = _targets(_read_json(arguments.reassignment_json_file, "--reassignment-json-file"))
    if arguments.wait:
        return _follow(admin, targets, arguments.timeout, remove_throttle=True)
    status = _status(admin, targets)
    print("Status of partition reassignment:")
    for (topic, number), state in sorted(status.items()):
        if state == "completed":
            print(f"Reassignment of partition {topic}-{number} is completed.")
        elif state == "in progress":
            print(f"Reassignment of partition {topic}-{number} is still in progress.")
        else:
            print(f"Reassignment of partition {topic}-{number} failed: its replicas are not the requested ones.")
    if all(state == "completed" for state in status.values()):
        _clear_throttle(admin)
    return 1 if any(state == "failed" for state in status.values()) else 0


def _follow(admin: KafkaAdminClient, targets: dict[tuple[str, int], list[int]], timeout: int,
            remove_throttle: bool) -> int:
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        status = _status(admin, targets)
        done = sum(1 for state in status.values() if state == "completed")
        line = f"Reassignment progress: {done}/{len(status)} partitions completed"
        if line != last:
            print(line, flush=True)
            last = line
        if any(state == "failed" for state in status.values()):
            print("Error: a partition ended with replicas other than the requested ones", file=sys.stderr)
            return 1
        if done == len(status):
            if remove_throttle:
                _clear_throttle(admin)
            return 0
        if time.monotonic() > deadline:
            print(f"Error: the reassignment did not complete within {timeout} s", file=sys.stderr)
            return 1
        time.sleep(0.5)


def _clear_throttle(admin: KafkaAdminClient) -> None:
    admin.incremental_alter_configs([ConfigResource(ConfigResourceType.BROKER, "", {THROTTLE_CONFIG: None})])
    print("Throttle was removed.")


if __name__ == "__main__":
    sys.exit(run_cli(main))
