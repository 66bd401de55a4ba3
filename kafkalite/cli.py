"""``kafkalite <command> ...`` and ``python -m kafkalite <command> ...``: one entry point for
the broker and every tool (the scripts in ``scripts/`` call the same modules).

Wiring only: each command names the module whose ``main`` runs it; no logic lives here.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, str] = {
    "server-start": "kafkalite.broker.__main__",
    "topics": "kafkalite.tools.topics",
    "console-producer": "kafkalite.tools.console_producer",
    "console-consumer": "kafkalite.tools.console_consumer",
    "consumer-groups": "kafkalite.tools.consumer_groups",
    "dump-log": "kafkalite.tools.dump_log",
    "get-offsets": "kafkalite.tools.get_offsets",
    "configs": "kafkalite.tools.configs",
    "leader-election": "kafkalite.tools.leader_election",
    "delete-records": "kafkalite.tools.delete_records",
    "transactions": "kafkalite.tools.transactions",
    "reassign-partitions": "kafkalite.tools.reassign_partitions",
    "broker-api-versions": "kafkalite.tools.broker_api_versions",
    "zookeeper-shell": "kafkalite.tools.zookeeper_shell",
    "verifiable-producer": "kafkalite.tools.verifiable_producer",
    "verifiable-consumer": "kafkalite.tools.verifiable_consumer",
    "producer-perf-test": "kafkalite.tools.producer_perf_test",
    "consumer-perf-test": "kafkalite.tools.consumer_perf_test",
    "e2e-latency": "kafkalite.tools.e2e_latency",
    "storage-demo": "kafkalite.tools.storage_demo",
    "avro-console-producer": "kafkalite.tools.avro_console_producer",
    "avro-console-consumer": "kafkalite.tools.avro_console_consumer",
}


def _usage() -> str:
    lines = ["usage: kafkalite <command> [options]   (kafkalite <command> --help for a command's options)", "",
             "commands:"]
    lines.extend(f"  {name}" for name in sorted(COMMANDS))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments or arguments[0] in ("-h", "--help"):
        print(_usage())
        return 0 if arguments else 2
    command, rest = arguments[0], arguments[1:]
    if command == "--version":
        from kafkalite import __version__

        print(__version__)
        return 0
    module_name = COMMANDS.get(command)
    if module_name is None:
        print(f"Error: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        print(f"Error: the {command} command is not available in this installation", file=sys.stderr)
        return 2
    from kafkalite.tools.common import run_cli

    main_function = module.main
    if module_name == "kafkalite.broker.__main__":
        return int(main_function(rest))
    sys.argv = [f"kafkalite {command}", *rest]
    return run_cli(main_function, rest)
