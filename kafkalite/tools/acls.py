"""``kafkalite-acls.sh``: add, remove and list ACLs, like Kafka's ``kafka-acls.sh`` (same flags
and output), through the brokers' ACL API.

* ``--add`` the ACLs (principals × hosts × operations) on every named resource;
  ``--allow-principal``/``--deny-principal`` are repeatable, hosts default to ``*``, operations
  to ``All``;
* ``--remove`` them (every ACL of the resources when no principal is given), after a
  confirmation unless ``--force``;
* ``--list`` the ACLs of the named resources (all ACLs without one), optionally of one
  ``--principal``.

Resources: ``--topic``, ``--group``, ``--transactional-id`` (repeatable) and ``--cluster``, with
``--resource-pattern-type literal|prefixed`` (``match``/``any`` too for --list and --remove).
Shortcuts as in Kafka: ``--producer`` = Write, Describe and Create on the topics (plus Write and
Describe on ``--transactional-id``, and IdempotentWrite on the cluster with ``--idempotent``);
``--consumer`` = Read and Describe on the topics and Read on the ``--group``.

Exit codes: 0 done, 1 the operation failed (a named error is printed), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from itertools import product

from kafkalite.client.admin import KafkaAdminClient
from kafkalite.errors import InvalidRequestError
from kafkalite.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from kafkalite.tools.common import (
    EXIT_FAILED,
    EXIT_OK,
    ToolArgumentParser,
    UsageError,
    command_config_options,
    run_cli,
)


def build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(prog="kafkalite-acls.sh",
                                description="This tool helps to manage acls on kafka.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the server(s) to connect to, e.g. localhost:9092")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties file: security.protocol, ssl.*, sasl.*")
    actions = parser.add_mutually_exclusive_group()
    actions.add_argument("--add", action="store_true", help="add ACLs")
    actions.add_argument("--remove", action="store_true", help="remove ACLs")
    actions.add_argument("--list", action="store_true", help="list ACLs")
    parser.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                        help="a principal (User:alice) the ACLs allow; repeatable")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL",
                        help="a principal the ACLs deny; repeatable")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                        help="a host the allow ACLs apply to (default *)")
    parser.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                        help="a host the deny ACLs apply to (default *)")
    parser.add_argument("--principal", metavar="PRINCIPAL", help="--list only the ACLs of this principal")
    parser.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                             "AlterConfigs, IdempotentWrite or All (default); repeatable")
    parser.add_argument("--topic", action="append", default=[], help="a topic (or * for all); repeatable")
    parser.add_argument("--group", action="append", default=[], help="a consumer group; repeatable")
    parser.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                        help="a transactional id; repeatable")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument("--resource-pattern-type", default="literal",
                        choices=["literal", "prefixed", "match", "any"],
                        help="literal (default) or prefixed; match and any for --list and --remove")
    parser.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
    parser.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs")
    parser.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    parser.add_argument("--force", action="store_true", help="do not ask before removing")
    return parser


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    named: list[tuple[ResourceType, str]] = []
    named += [(ResourceType.TOPIC, name) for name in args.topic]
    named += [(ResourceType.GROUP, name) for name in args.group]
    named += [(ResourceType.TRANSACTIONAL_ID, name) for name in args.transactional_id]
    if args.cluster:
        named.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return named


def _shortcut_acls(args: argparse.Namespace) -> dict[tuple[ResourceType, str], set[Operation]]:
    """Kafka's --producer / --consumer expansions, by resource."""
    wanted: dict[tuple[ResourceType, str], set[Operation]] = {}
    topics = [(ResourceType.TOPIC, name) for name in args.topic]
    if args.producer:
        for topic in topics:
            wanted.setdefault(topic, set()).update({Operation.WRITE, Operation.DESCRIBE, Operation.CREATE})
        for name in args.transactional_id:
            wanted.setdefault((ResourceType.TRANSACTIONAL_ID, name), set()).update(
                {Operation.WRITE, Operation.DESCRIBE})
        if args.idempotent:
            wanted.setdefault((ResourceType.CLUSTER, CLUSTER_NAME), set()).add(Operation.IDEMPOTENT_WRITE)
    if args.consumer:
        for topic in topics:
            wanted.setdefault(topic, set()).update({Operation.READ, Operation.DESCRIBE})
        for name in args.group:
            wanted.setdefault((ResourceType.GROUP, name), set()).add(Operation.READ)
    return wanted


def _entries(principals: Sequence[str], hosts: Sequence[str], operations: Sequence[Operation],
             permission: Permission) -> list[AccessControlEntry]:
    return [AccessControlEntry(principal, host, operation, permission)
            for principal, host, operation in product(principals, hosts or ["*"], operations)]


def _print_resource(pattern: ResourcePattern, entries: Sequence[AccessControlEntry], heading: str) -> None:
    print(f"{heading} for resource `ResourcePattern(resourceType={str(pattern.resource_type).upper()}, "
          f"name={pattern.name}, patternType={str(pattern.pattern_type).upper()})`: ")
    for entry in entries:
        print(f" \t(principal={entry.principal}, host={entry.host}, operation={_upper(entry.operation)}, "
              f"permissionType={str(entry.permission).upper()})")
    print()


def _upper(operation: Operation) -> str:
    return operation.name


def _list(admin: KafkaAdminClient, filters: Sequence[AclBindingFilter]) -> None:
    bindings: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding_filter in filters:
        for binding in admin.describe_acls(binding_filter)[0]:
            entries = bindings.setdefault(binding.pattern, [])
            if binding.entry not in entries:
                entries.append(binding.entry)
    for pattern, entries in bindings.items():
        _print_resource(pattern, entries, "Current ACLs")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.bootstrap_server:
        raise UsageError("Missing required option(s): --bootstrap-server")
    if not (args.add or args.remove or args.list):
        raise UsageError("Command must include exactly one action: --list, --add, --remove.")
    pattern_type = PatternType.parse(args.resource_pattern_type)
    if args.add and pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("A '--resource-pattern-type' value of 'literal' or 'prefixed' is required with --add")
    if (args.producer or args.consumer) and not args.topic:
        raise UsageError("With --producer or --consumer you must specify a --topic")
    if args.consumer and not args.group and args.add:
        raise UsageError("With --consumer you must specify a --group")
    resources = _resources(args)
    try:
        operations = [Operation.parse(name) for name in args.operation] or [Operation.ALL]
    except InvalidRequestError as exc:
        raise UsageError(str(exc).split(": ", 1)[-1]) from None
    principal_filter = args.principal
    with KafkaAdminClient(bootstrap_servers=args.bootstrap_server, client_id="kafkalite-acls",
                          **command_config_options(args.command_config)) as admin:
        if args.list:
            filters = [AclBindingFilter(resource_type, name, pattern_type, principal_filter)
                       for resource_type, name in resources] or [
                AclBindingFilter(pattern_type=PatternType.ANY, principal=principal_filter)]
            _list(admin, filters)
            return EXIT_OK
        shortcuts = _shortcut_acls(args)
        wanted: dict[ResourcePattern, list[AccessControlEntry]] = {}
        for resource_type, name in resources if not shortcuts else []:
            entries = _entries(args.allow_principal, args.allow_host, operations, Permission.ALLOW) + _entries(
                args.deny_principal, args.deny_host, operations, Permission.DENY)
            wanted[ResourcePattern(resource_type, name, _concrete(pattern_type))] = entries
        for (resource_type, name), shortcut_ops in shortcuts.items():
            ordered = sorted(shortcut_ops, key=lambda operation: operation.code)
            wanted[ResourcePattern(resource_type, name, _concrete(pattern_type))] = _entries(
                args.allow_principal, args.allow_host, ordered, Permission.ALLOW) + _entries(
                args.deny_principal, args.deny_host, ordered, Permission.DENY)
        if args.add:
            if not any(wanted.values()):
                raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to "
                                 "add ACLs.")
            for pattern, entries in wanted.items():
                _print_resource(pattern, entries, "Adding ACLs")
            result = admin.create_acls([AclBinding(pattern, entry) for pattern, entries in wanted.items()
                                        for entry in entries])
            for binding, error in result["failed"]:
                print(f"Error while adding ACL {binding}: {error}", file=sys.stderr)
            _list(admin, [AclBindingFilter(pattern.resource_type, pattern.name, pattern.pattern_type)
                          for pattern in wanted])
            return EXIT_FAILED if result["failed"] else EXIT_OK
        # --remove
        if not resources:
            raise UsageError("You must specify a resource (--topic, --group, --transactional-id or --cluster) "
                             "with --remove")
        if not args.force:
            answer = input(f"Are you sure you want to remove ACLs: \n {_describe(wanted, resources)} \n (y/n)")
            if answer.strip().lower() not in ("y", "yes"):
                return EXIT_OK
        filters = []
        for resource_type, name in resources:
            entries = [entry for pattern, entries in wanted.items() if (pattern.resource_type, pattern.name) ==
                       (resource_type, name) for entry in entries]
            if not entries:  # no principal: every ACL of the resource
                filters.append(AclBindingFilter(resource_type, name, pattern_type))
            for entry in entries:
                filters.append(AclBindingFilter(resource_type, name, pattern_type, entry.principal, entry.host,
                                                entry.operation, entry.permission))
        failed = [error for _, _, error in admin.delete_acls(filters) if error is not None]
        for error in failed:
            print(f"Error while removing ACLs: {error}", file=sys.stderr)
        return EXIT_FAILED if failed else EXIT_OK


def _concrete(pattern_type: PatternType) -> PatternType:
    return pattern_type if pattern_type in (PatternType.LITERAL, PatternType.PREFIXED) else PatternType.LITERAL


def _describe(wanted: dict[ResourcePattern, list[AccessControlEntry]],
              resources: Sequence[tuple[ResourceType, str]]) -> str:
    if any(wanted.values()):
        return "\n ".join(f"{entry.principal} {entry.permission} {entry.operation} from {entry.host} on {pattern}"
                          for pattern, entries in wanted.items() for entry in entries)
    return ", ".join(f"{resource_type}:{name} (every ACL)" for resource_type, name in resources)


if __name__ == "__main__":
    sys.exit(run_cli(main))
