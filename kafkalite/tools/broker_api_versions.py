"""``kafkalite-broker-api-versions.sh``: what every broker of the cluster serves, like Kafka's
``kafka-broker-api-versions.sh``.

``--version`` prints the kafkalite version and stops. Otherwise the tool asks the bootstrap
broker for the cluster's brokers and each broker for its API (``GET /v1/api_versions``), then
prints one block per broker, in broker id order::

    127.0.0.1:9092 (id: 1 rack: null) -> (
    	/health,
    	/v1/admin/alter_configs [usable: v1],
    	...
    	/v1/produce [usable: v1],
    	...
    )

Each line is one HTTP route the broker serves (docs/protocol.md), where Kafka lists
``ApiKey(n): min to max``; ``[usable: v1]`` marks the routes of the protocol version this
tool speaks. A broker
that cannot be reached gets ``host:port (id: N rack: null) -> ERROR: ...`` and the tool exits 1.

Exit codes: 0 done, 1 a broker did not answer (or no broker did), 2 bad arguments.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
from typing import Any

from kafkalite import protocol
from kafkalite.client import KafkaAdminClient
from kafkalite.errors import KafkaliteError
from kafkalite.tools.common import (
    ToolArgumentParser,
    UsageError,
    command_config_options,
    run_cli,
    transport_ssl_context,
)
from kafkalite.transport import AsyncTransport

_REQUEST_TIMEOUT_MS = 10_000


def build_parser() -> ToolArgumentParser:
    """The command line, with kafka-broker-api-versions.sh's flag names."""
    parser = ToolArgumentParser(prog="kafkalite-broker-api-versions.sh",
                                description="Print the API every broker of the cluster serves.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the broker(s) to connect to, e.g. localhost:9092")
    parser.add_argument("--version", action="store_true", help="display kafkalite version")
    parser.add_argument("--command-config", help="client properties file: security.protocol, ssl.*, sasl.*")
    return parser


def format_routes(answer: dict[str, Any]) -> list[str]:
    """The route lines of one broker's ``/v1/api_versions`` answer."""
    lines = []
    version_prefix = f"/v{answer.get('api_version', protocol.API_VERSION)}/"
    usable = f"/v{protocol.API_VERSION}/"
    for route in answer.get("apis", []):
        text = str(route)
        if text.startswith(usable) and version_prefix == usable:
            text += f" [usable: v{protocol.API_VERSION}]"
        lines.append(text)
    return lines


def format_broker(address: str, broker_id: int, rack: str | None, answer: dict[str, Any]) -> str:
    """One broker's block, Kafka's ``host:port (id: N rack: R) -> ( ... )`` layout."""
    routes = format_routes(answer)
    body = ",\n".join(f"\t{line}" for line in routes)
    return f"{address} (id: {broker_id} rack: {rack or 'null'}) -> (\n{body}\n)"


async def _ask_all(brokers: list[dict[str, Any]], ssl_context: ssl.SSLContext | None = None
                   ) -> list[tuple[dict[str, Any], dict[str, Any] | Exception]]:
    transport = AsyncTransport(request_timeout_ms=_REQUEST_TIMEOUT_MS, client_id="kafkalite-broker-api-versions",
                               ssl_context=ssl_context)
    try:
        async def ask(broker: dict[str, Any]) -> dict[str, Any] | Exception:
            try:
                answer = await transport.request_json(f"{broker['host']}:{broker['port']}", "GET",
                                                      protocol.API_VERSIONS)
            except KafkaliteError as exc:
                return exc
            return answer if isinstance(answer, dict) else {}

        answers = await asyncio.gather(*(ask(broker) for broker in brokers))
        return list(zip(brokers, answers))
    finally:
        await transport.close()


def main(argv: list[str] | None = None) -> int:
    """Run the tool; returns the exit code."""
    arguments = build_parser().parse_args(argv)
    if arguments.version:
        from kafkalite import __version__

        print(__version__)
        return 0
    if not arguments.bootstrap_server:
        raise UsageError("--bootstrap-server is required")
    security = command_config_options(arguments.command_config)
    admin = KafkaAdminClient(bootstrap_servers=arguments.bootstrap_server, client_id="kafkalite-broker-api-versions",
                             **security)
    try:
        brokers = sorted(admin.describe_cluster()["brokers"], key=lambda broker: broker["broker_id"])
    finally:
        admin.close()
    if not brokers:
        print("Error: the cluster has no live broker", file=sys.stderr)
        return 1
    failed = 0
    for broker, answer in asyncio.run(_ask_all(brokers, transport_ssl_context(security))):
        address = f"{broker['host']}:{broker['port']}"
        if isinstance(answer, Exception):
            failed += 1
            print(f"{address} (id: {broker['broker_id']} rack: {broker.get('rack') or 'null'}) -> ERROR: {answer}")
            continue
        print(format_broker(address, broker["broker_id"], broker.get("rack"), answer))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
