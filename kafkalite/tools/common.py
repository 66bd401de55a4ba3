"""Shared plumbing of the command-line tools: argument errors and exit codes.

Exit codes: 0 success, 1 the operation failed (a named error is printed), 2 bad arguments,
130 interrupted. User mistakes never print a Python traceback.
"""

from __future__ import annotations

import argparse
import signal
import ssl
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from kafkalite.errors import ConfigError, KafkaliteError
from kafkalite.security import client_properties

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
#: The kafkalite client options :func:`pop_security_options` produces.
SECURITY_OPTIONS = client_properties.SECURITY_OPTIONS


def pop_security_options(properties: dict[str, str]) -> dict[str, Any]:
    """Remove the security settings from Kafka client ``properties`` and return them as
    kafkalite client options (:func:`kafkalite.security.client_properties.pop_security_options`,
    the one mapping the tools and the Spark source and sink share); a setting that cannot be
    honoured is a UsageError."""
    try:
        return client_properties.pop_security_options(properties)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


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
