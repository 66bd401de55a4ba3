"""Shared plumbing of the command-line tools: argument errors and exit codes.

Exit codes: 0 success, 1 the operation failed (a named error is printed), 2 bad arguments,
130 interrupted. User mistakes never print a Python traceback.
"""

from __future__ import annotations

import argparse
import re
import signal
import ssl
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from kafkalite.errors import KafkaliteError

if TYPE_CHECKING:
    from kafkalite.coord.coordinator import Coordinator
    from kafkalite.registry.client import RegistryClient

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class ToolArgumentParser(argparse.ArgumentParser):
    """argparse with Kafka-tool style errors: ``Error: ...`` plus usage, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"Error: {message}\n")


def run_tool(main: Callable[[], int]) -> int:
    """Run a tool's main, turning kafkalite errors into a one-line message and exit code 1."""
    try:
        return main()
    except KafkaliteError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK


def parse_key_values(items: list[str] | None, flag: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` → ``{"a": "1", "b": "2"}``; a malformed item is a usage error."""
    result: dict[str, str] = {}
    for item in items or []:
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise UsageError(f"{flag} expects key=value, got {item!r}")
        result[key.strip()] = value
    return result


def parse_bool_property(properties: dict[str, str], name: str, default: bool = False) -> bool:
    value = properties.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise UsageError(f"property {name} must be true or false, got {value!r}")


def registry_client_from(properties: dict[str, str], known: frozenset[str]) -> RegistryClient:
    """The schema registry client of a console tool's ``--property`` settings: every property
    must be in ``known`` and ``schema.registry.url`` is required (UsageError otherwise)."""
    from kafkalite.registry.client import RegistryClient

    unknown = sorted(set(properties) - known)
    if unknown:
        raise UsageError(f"unknown property {unknown[0]!r}; known: {', '.join(sorted(known))}")
    url = properties.get("schema.registry.url")
    if not url:
        raise UsageError("--property schema.registry.url=<url> is required")
    return RegistryClient(url)


class UsageError(Exception):
    """A mistake in the command line (exit code 2)."""


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a tool: usage errors exit 2, kafkalite errors exit 1 with a one-line message."""
    try:
        return main(argv)
    except UsageError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KafkaliteError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK


def run_until_signalled(run: Callable[[], int], stop: threading.Event) -> int:
    """``run()`` with SIGTERM and SIGINT setting ``stop`` (so a tool finishes its work and
    prints its summary instead of dying); the previous handlers come back afterwards. Off
    the main thread, where signals cannot be handled, ``run()`` runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        return run()

    def request_stop(signal_number: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {number: signal.signal(number, request_stop) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        return run()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def bootstrap_from_zookeeper(connect: str) -> str:
    """Broker addresses registered in ZooKeeper, for tools given Kafka's old ``--zookeeper`` flag.

    ``connect`` may name a chroot; without one, the root and the default ``/kafkalite`` chroot
    are both tried.
    """
    import asyncio

    from kafkalite.coord.zk import ZooKeeperClient

    candidates = [connect] if "/" in connect else [connect, f"{connect}/kafkalite"]

    async def lookup() -> str:
        for candidate in candidates:
            client = ZooKeeperClient(candidate, session_timeout=10.0, connect_timeout=10.0, request_timeout=10.0)
            try:
                await client.start()
                try:
                    addresses = await registered_brokers(client)
                except KafkaliteError:
                    continue
                if addresses:
                    return ",".join(addresses)
            finally:
                if client.started:
                    await client.stop()
        raise UsageError(f"no live broker is registered in ZooKeeper at {connect}")

    return asyncio.run(lookup())


async def registered_brokers(coordinator: Coordinator) -> list[str]:
    """``host:port`` of every broker registered under ``/brokers/ids`` (a broker that goes away
    while they are read is left out). Raises a KafkaliteError when they cannot be read.
    """
    from kafkalite.coord import znodes
    from kafkalite.errors import ZNodeMissingError

    addresses = []
    for child in await coordinator.get_children(znodes.BROKER_IDS_PATH):
        try:
            data, _ = await coordinator.get(f"{znodes.BROKER_IDS_PATH}/{child}")
        except ZNodeMissingError:
            continue
        registration = znodes.BrokerRegistration.from_bytes(data)
        addresses.append(f"{registration.host}:{registration.port}")
    return addresses


# -- client security settings (--command-config, --producer.config, --consumer.config) --------------
#: Kafka client properties (Java's and confluent-kafka's names) → kafkalite client options.
_SECURITY_PROPERTY_OPTIONS = {
    "security.protocol": "security_protocol",
    "ssl.ca.location": "ssl_cafile",              # confluent-kafka / librdkafka
    "ssl.truststore.location": "ssl_cafile",      # Java clients, with ssl.truststore.type=PEM
    "ssl.certificate.location": "ssl_certfile",   # confluent-kafka / librdkafka
    "ssl.keystore.location": "ssl_certfile",      # Java clients, PEM: key and certificate chain in one file
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",          # librdkafka's spelling
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
}
#: Every client property :func:`pop_security_options` consumes.
SECURITY_PROPERTIES = frozenset({*_SECURITY_PROPERTY_OPTIONS, "ssl.truststore.type", "ssl.keystore.type",
                                 "ssl.endpoint.identification.algorithm", "sasl.jaas.config"})
#: The kafkalite client options :func:`pop_security_options` produces.
SECURITY_OPTIONS = frozenset({*_SECURITY_PROPERTY_OPTIONS.values(), "ssl_check_hostname"})
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def pop_security_options(properties: dict[str, str]) -> dict[str, Any]:
    """Remove the security settings from Kafka client ``properties`` (``security.protocol``,
    ``ssl.*``, ``sasl.*``, with the names both the Java clients and confluent-kafka use) and
    return them as kafkalite client options (``security_protocol``, ``ssl_cafile``,
    ``ssl_certfile``, ``ssl_keyfile``, ``ssl_password``, ``ssl_check_hostname``,
    ``sasl_mechanism``, ``sasl_plain_username``, ``sasl_plain_password``). Settings that cannot
    be honoured (a JKS or PKCS12 store, another ``ssl.*`` or ``sasl.*`` setting) are a UsageError:
    a tool never drops a security setting silently."""
    options: dict[str, Any] = {}
    for name in ("ssl.truststore.type", "ssl.keystore.type"):
        store_type = properties.pop(name, "PEM").strip().upper()
        if store_type != "PEM":
            raise UsageError(f"{name}={store_type} is not supported: use PEM files ({name}=PEM)")
    for name, option in _SECURITY_PROPERTY_OPTIONS.items():
        value = properties.pop(name, None)
        if value is None:
            continue
        if option in options and options[option] != value:
            raise UsageError(f"{name} conflicts with another setting of {option}")
        options[option] = value
    algorithm = properties.pop("ssl.endpoint.identification.algorithm", None)
    if algorithm is not None:
        if algorithm.strip().lower() not in ("", "none", "https"):
            raise UsageError(f"ssl.endpoint.identification.algorithm must be https, none or empty, got {algorithm!r}")
        options["ssl_check_hostname"] = algorithm.strip().lower() == "https"
    jaas = properties.pop("sasl.jaas.config", None)
    if jaas is not None:
        fields = {key: value.replace('\\"', '"') for key, value in _JAAS_OPTION.findall(jaas)}
        if "username" not in fields or "password" not in fields:
            raise UsageError('sasl.jaas.config must carry username="..." and password="..."')
        options.setdefault("sasl_plain_username", fields["username"])
        options.setdefault("sasl_plain_password", fields["password"])
    left = sorted(name for name in properties if name.startswith(("ssl.", "sasl.")))
    if left:
        raise UsageError(f"unsupported security setting {left[0]!r}; "
                         f"supported: {', '.join(sorted(SECURITY_PROPERTIES))}")
    if "security_protocol" in options:
        options["security_protocol"] = str(options["security_protocol"]).strip().upper()
    return options


def command_config_options(path: str | None) -> dict[str, Any]:
    """The kafkalite client options of a tool's ``--command-config`` file (Kafka client
    properties): its security settings (:func:`pop_security_options`); ``bootstrap.servers``
    and ``client.id`` are the tool's own and other settings do not apply to admin calls, so they
    are ignored (with a note on stderr)."""
    if not path:
        return {}
    from kafkalite.config import load_properties

    try:
        properties = load_properties(path)
    except KafkaliteError as exc:
        raise UsageError(f"--command-config {path}: {exc}") from None
    options = pop_security_options(properties)
    ignored = sorted(set(properties) - {"bootstrap.servers", "client.id"})
    if ignored:
        print(f"Note: --command-config settings not used by this tool: {', '.join(ignored)}", file=sys.stderr)
    return options


def transport_ssl_context(options: dict[str, Any]) -> ssl.SSLContext | None:
    """The TLS context of client ``options`` (from :func:`pop_security_options`) for a tool that
    talks to brokers through its own transport; None for PLAINTEXT."""
    from kafkalite.client.options import check_common_options

    return check_common_options(dict(options), set())
