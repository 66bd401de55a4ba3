"""``kafkalite-topics.sh``: create, list, describe, alter and delete topics, like Kafka's
``kafka-topics.sh`` (same flags, same output shapes, exit 1 on a failed operation)."""

from __future__ import annotations

import re
import sys
from typing import Any

from kafkalite.client import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic
from kafkalite.errors import (
    BrokerResponseError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafkalite.tools.common import (
    ToolArgumentParser,
    UsageError,
    bootstrap_from_zookeeper,
    command_config_options,
    parse_key_values,
    run_cli,
)

_INTERNAL_PREFIX = "__"


def build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(prog="kafkalite-topics.sh",
                                description="Create, delete, describe, or change a topic.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED (or --zookeeper): the broker(s) to connect to, e.g. localhost:9092")
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                        help="deprecated in Kafka: find the brokers through ZooKeeper instead")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--create", action="store_true", help="create a new topic")
    actions.add_argument("--list", action="store_true", help="list all available topics")
    actions.add_argument("--describe", action="store_true", help="list details for the given topics")
    actions.add_argument("--alter", action="store_true", help="alter the number of partitions")
    actions.add_argument("--delete", action="store_true", help="delete a topic")
    actions.add_argument("--version", action="store_true", help="display kafkalite version")
    parser.add_argument("--topic", help="the topic to create, alter, describe or delete (a regular expression "
                                        "for --describe, --delete and --list)")
    parser.add_argument("--partitions", type=int, help="the number of partitions for the topic")
    parser.add_argument("--replication-factor", type=int, help="the replication factor for each partition")
    parser.add_argument("--replica-assignment", help="a list of manual partition-to-broker assignments: "
                                                     "'1:2,2:3' (partition 0 on 1 and 2, partition 1 on 2 and 3)")
    parser.add_argument("--config", action="append", metavar="NAME=VALUE", help="a topic config override")
    parser.add_argument("--if-not-exists", action="store_true", help="create only if the topic does not exist")
    parser.add_argument("--if-exists", action="store_true", help="alter or delete only if the topic exists")
    parser.add_argument("--exclude-internal", action="store_true", help="exclude internal topics")
    parser.add_argument("--under-replicated-partitions", action="store_true",
                        help="with --describe: only partitions whose ISR is smaller than the replica set")
    parser.add_argument("--unavailable-partitions", action="store_true",
                        help="with --describe: only partitions whose leader is not available")
    parser.add_argument("--command-config", help="client properties file: security.protocol, ssl.*, sasl.*")
    return parser


def _parse_assignment(text: str) -> dict[int, list[int]]:
    try:
        return {index: [int(broker) for broker in part.split(":")]
                for index, part in enumerate(text.split(","))}
    except ValueError:
        raise UsageError(f"--replica-assignment must look like 1:2,2:3 — got {text!r}") from None


def _matching(admin: KafkaAdminClient, pattern: str | None, exclude_internal: bool) -> list[str]:
    names = admin.list_topics()
    if exclude_internal:
        names = [name for name in names if not name.startswith(_INTERNAL_PREFIX)]
    if pattern is None:
        return names
    try:
        regex = re.compile(pattern)
    except re.error:
        return [name for name in names if name == pattern]
    return [name for name in names if regex.fullmatch(name)]


def main(argv: list[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    if not arguments.bootstrap_server and not arguments.version:
        if not arguments.zookeeper:
            raise UsageError("--bootstrap-server is required")
        arguments.bootstrap_server = bootstrap_from_zookeeper(arguments.zookeeper)
    if arguments.version:
        from kafkalite import __version__
        print(__version__)
        return 0
    configs = parse_key_values(arguments.config, "--config")
    if (arguments.create or arguments.alter) and not arguments.topic:
        raise UsageError("--topic is required with --create and --alter")
    if arguments.alter and arguments.partitions is None and not configs:
        raise UsageError("--alter needs --partitions (use kafkalite-configs.sh to change configs)")
    admin = KafkaAdminClient(bootstrap_servers=arguments.bootstrap_server, client_id="kafkalite-topics",
                             **command_config_options(arguments.command_config))
    try:
        if arguments.create:
            return _create(admin, arguments, configs)
        if arguments.list:
            for name in _matching(admin, arguments.topic, arguments.exclude_internal):
                print(name)
            return 0
        if arguments.describe:
            return _describe(admin, arguments)
        if arguments.alter:
            return _alter(admin, arguments, configs)
        return _delete(admin, arguments)
    finally:
        admin.close()


def _fail(message: str) -> int:
    print(f"Error while executing topic command : {message}", file=sys.stderr)
    return 1


def _create(admin: KafkaAdminClient, arguments: Any, configs: dict[str, str]) -> int:
    assignment = _parse_assignment(arguments.replica_assignment) if arguments.replica_assignment else None
    if assignment and (arguments.partitions is not None or arguments.replication_factor is not None):
        raise UsageError("--replica-assignment cannot be combined with --partitions or --replication-factor")
    topic = NewTopic(arguments.topic, -1 if arguments.partitions is None else arguments.partitions,
                     -1 if arguments.replication_factor is None else arguments.replication_factor,
                     replica_assignments=assignment, topic_configs=configs)
    try:
        admin.create_topics([topic])
    except TopicAlreadyExistsError:
        if arguments.if_not_exists:
            return 0
        return _fail(f"Topic '{arguments.topic}' already exists.")
    except BrokerResponseError as exc:
        return _fail(f"{exc.message}: {exc.args[0] if exc.args else exc.description}")
    print(f"Created topic {arguments.topic}.")
    return 0


def _describe(admin: KafkaAdminClient, arguments: Any) -> int:
    names = _matching(admin, arguments.topic, arguments.exclude_internal)
    if arguments.topic and not names and not arguments.if_exists:
        return _fail(f"Topic '{arguments.topic}' does not exist as expected")
    if not names:
        return 0
    descriptions = admin.describe_topics(names)
    configs: dict[str, dict[str, Any]] = {}
    if not (arguments.under_replicated_partitions or arguments.unavailable_partitions):
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        configs = admin.describe_configs(resources, raise_errors=False).get("topic", {})
    live = {broker["broker_id"] for broker in admin.describe_cluster()["brokers"]}
    for description in descriptions:
        partitions = description["partitions"]
        name = description["name"]
        if arguments.under_replicated_partitions or arguments.unavailable_partitions:
            for partition in partitions:
                under = len(partition["isr_nodes"]) < len(partition["replica_nodes"])
                unavailable = partition["leader_id"] < 0 or partition["leader_id"] not in live
                if (arguments.under_replicated_partitions and under) or (
                        arguments.unavailable_partitions and unavailable):
                    print(_partition_line(name, partition))
            continue
        overrides = {key: value["value"] for key, value in configs.get(name, {}).items()
                     if isinstance(value, dict) and value.get("config_source") == "DYNAMIC_TOPIC_CONFIG"}
        factor = len(partitions[0]["replica_nodes"]) if partitions else 0
        print(f"Topic: {name}\tTopicId: {description.get('topic_id', '')}\tPartitionCount: {len(partitions)}\t"
              f"ReplicationFactor: {factor}\tConfigs: {','.join(f'{k}={v}' for k, v in sorted(overrides.items()))}")
        for partition in partitions:
            print(_partition_line(name, partition))
    return 0


def _partition_line(name: str, partition: dict[str, Any]) -> str:
    replicas = ",".join(str(broker) for broker in partition["replica_nodes"])
    isr = ",".join(str(broker) for broker in partition["isr_nodes"])
    leader = partition["leader_id"] if partition["leader_id"] >= 0 else "none"
    line = (f"\tTopic: {name}\tPartition: {partition['partition_index']}\tLeader: {leader}"
            f"\tReplicas: {replicas}\tIsr: {isr}")
    if partition.get("offline_replicas"):
        line += f"\tOffline: {','.join(str(broker) for broker in partition['offline_replicas'])}"
    return line


def _alter(admin: KafkaAdminClient, arguments: Any, configs: dict[str, str]) -> int:
    names = admin.list_topics()
    if arguments.topic not in names:
        if arguments.if_exists:
            return 0
        return _fail(f"Topic '{arguments.topic}' does not exist as expected")
    try:
        if arguments.partitions is not None:
            assignment = None
            if arguments.replica_assignment:
                parsed = _parse_assignment(arguments.replica_assignment)
                assignment = [parsed[index] for index in sorted(parsed)]
            admin.create_partitions({arguments.topic: NewPartitions(arguments.partitions, assignment)})
        if configs:
            admin.incremental_alter_configs([ConfigResource(ConfigResourceType.TOPIC, arguments.topic, configs)])
    except BrokerResponseError as exc:
        return _fail(f"{exc.message}: {exc.args[0] if exc.args else exc.description}")
    return 0


def _delete(admin: KafkaAdminClient, arguments: Any) -> int:
    if not arguments.topic:
        raise UsageError("--topic is required with --delete")
    names = _matching(admin, arguments.topic, False)
    if not names:
        if arguments.if_exists:
            return 0
        return _fail(f"Topic '{arguments.topic}' does not exist as expected")
    try:
        admin.delete_topics(names)
    except UnknownTopicOrPartitionError as exc:
        return _fail(str(exc))
    except BrokerResponseError as exc:
        return _fail(f"{exc.message}: {exc.args[0] if exc.args else exc.description}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
