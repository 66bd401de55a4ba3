"""``zookeeper-shell.sh HOST:PORT[/CHROOT] [COMMAND ARGS...]``: look at the znodes of a
kafkalite cluster, like Kafka's ``zookeeper-shell.sh``.

With a command after the server the shell runs it and exits; without one it reads commands
from standard input, one a line (showing a ``[zk: HOST(CONNECTED) N]`` prompt when the input is
a terminal) until ``quit``, ``exit`` or end of input. Commands, as in ZooKeeper's CLI:

* ``ls [-s] [-R] PATH`` — the children, as ``[a, b, c]``; ``-s`` adds the stat, ``-R`` lists
  the whole subtree, one path a line;
* ``get [-s] PATH`` — the data (UTF-8 text; kafkalite's payloads are JSON); ``-s`` adds the stat;
* ``stat PATH`` — the znode's stat (czxid, ctime, ..., numChildren);
* ``help``; ``quit`` / ``exit``.

Paths are relative to the chroot of the connect string; the chroot is never created (a missing
one reads as missing nodes). Results go to stdout; the "Connecting to ..." line and errors such
as ``Node does not exist: /path`` go to stderr. Nothing is ever written to ZooKeeper.

Exit codes: 0 done, 1 a command failed (missing node, ZooKeeper unreachable), 2 bad arguments
or an unknown command. Reading commands from standard input, the exit code is 1 when any of
them failed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import posixpath
import shlex
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TextIO

from kafkalite.coord.coordinator import Coordinator, ZNodeStat
from kafkalite.coord.zk import ZooKeeperClient, parse_connect_string
from kafkalite.errors import KafkaliteError, ZNodeMissingError
from kafkalite.tools.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ToolArgumentParser, UsageError, run_cli

_CONNECT_TIMEOUT_SECONDS = 10.0
_REQUEST_TIMEOUT_SECONDS = 10.0
_HELP = """ZooKeeper -server host:port cmd args
\tls [-s] [-R] path
\tget [-s] path
\tstat path
\thelp
\tquit"""


class CommandError(Exception):
    """A command that failed; ``code`` is the exit code it stands for."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def build_parser() -> ToolArgumentParser:
    """The command line: the server, then an optional command."""
    parser = ToolArgumentParser(prog="zookeeper-shell.sh",
                                description="Read the znodes of a ZooKeeper server: ls, get, stat.",
                                epilog="Without a command, commands are read from standard input.")
    parser.add_argument("server", nargs="?", metavar="HOST:PORT[/CHROOT]",
                        help="REQUIRED: the ZooKeeper connect string, e.g. localhost:2181/kafkalite")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND",
                        help="ls [-s] [-R] PATH | get [-s] PATH | stat PATH | help")
    return parser


def format_stat(stat: ZNodeStat) -> str:
    """ZooKeeper CLI's stat block."""
    def when(milliseconds: int) -> str:
        return time.strftime("%a %b %d %H:%M:%S %Z %Y", time.localtime(milliseconds / 1000))

    return "\n".join([
        f"cZxid = {stat.czxid:#x}",
        f"ctime = {when(stat.ctime_ms)}",
        f"mZxid = {stat.mzxid:#x}",
        f"mtime = {when(stat.mtime_ms)}",
        f"pZxid = {stat.pzxid:#x}",
        f"cversion = {stat.cversion}",
        f"dataVersion = {stat.version}",
        f"ephemeralOwner = {stat.ephemeral_owner:#x}",
        f"dataLength = {stat.data_length}",
        f"numChildren = {stat.num_children}",
    ])


class Shell:
    """The commands, on a ZooKeeper client connected without chroot (paths are joined here)."""

    def __init__(self, client: Coordinator, chroot: str, output: TextIO) -> None:
        self.client = client
        self.chroot = chroot
        self.output = output

    def _absolute(self, path: str) -> str:
        if not path.startswith("/"):
            raise CommandError("Path must start with / character", EXIT_USAGE)
        if path != "/" and path.endswith("/"):
            raise CommandError("Path must not end with / character", EXIT_USAGE)
        if "//" in path or "/./" in path + "/" or "/../" in path + "/":
            raise CommandError(f"Invalid path string \"{path}\"", EXIT_USAGE)
        if not self.chroot:
            return path
        return self.chroot if path == "/" else self.chroot + path

    async def run(self, words: list[str]) -> None:
        """Run one command given as words; CommandError when it fails."""
        name, *arguments = words
        commands: dict[str, Callable[[list[str]], Awaitable[None]]] = {
            "ls": self.list_children, "get": self.get_data, "stat": self.stat,
        }
        if name == "help":
            print(_HELP, file=self.output)
            return
        if name not in commands:
            raise CommandError(f"unknown command '{name}'\n{_HELP}", EXIT_USAGE)
        await commands[name](arguments)

    @staticmethod
    def _options(arguments: list[str], allowed: str, usage: str) -> tuple[set[str], str]:
        flags = {argument for argument in arguments if argument.startswith("-") and len(argument) == 2}
        paths = [argument for argument in arguments if argument not in flags]
        unknown = sorted(flag for flag in flags if flag[1] not in allowed)
        if unknown or len(paths) != 1:
            raise CommandError(f"usage: {usage}", EXIT_USAGE)
        return flags, paths[0]

    async def _stat_of(self, path: str, absolute: str) -> ZNodeStat:
        stat = await self.client.exists(absolute)
        if stat is None:
            raise CommandError(f"Node does not exist: {path}")
        return stat

    async def list_children(self, arguments: list[str]) -> None:
        """``ls [-s] [-R] PATH``."""
        flags, path = self._options(arguments, "sRw", "ls [-s] [-R] path")
        absolute = self._absolute(path)
        if "-R" in flags:
            await self._stat_of(path, absolute)
            for line in await self._subtree(path, absolute):
                print(line, file=self.output)
            return
        try:
            children = sorted(await self.client.get_children(absolute))
        except ZNodeMissingError:
            raise CommandError(f"Node does not exist: {path}") from None
        print("[" + ", ".join(children) + "]", file=self.output)
        if "-s" in flags:
            print(format_stat(await self._stat_of(path, absolute)), file=self.output)

    async def _subtree(self, path: str, absolute: str) -> list[str]:
        lines = [path]
        try:
            children = sorted(await self.client.get_children(absolute))
        except ZNodeMissingError:
            return []
        for child in children:
            child_path = posixpath.join(path, child)
            lines.extend(await self._subtree(child_path, posixpath.join(absolute, child)))
        return lines

    async def get_data(self, arguments: list[str]) -> None:
        """``get [-s] PATH``."""
        flags, path = self._options(arguments, "sw", "get [-s] path")
        absolute = self._absolute(path)
        try:
            data, stat = await self.client.get(absolute)
        except ZNodeMissingError:
            raise CommandError(f"Node does not exist: {path}") from None
        print(data.decode("utf-8", errors="replace") if data else "", file=self.output)
        if "-s" in flags:
            print(format_stat(stat), file=self.output)

    async def stat(self, arguments: list[str]) -> None:
        """``stat PATH``."""
        _, path = self._options(arguments, "w", "stat path")
        print(format_stat(await self._stat_of(path, self._absolute(path))), file=self.output)


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise CommandError(f"cannot parse command: {exc}", EXIT_USAGE) from None


async def _start(server: str) -> tuple[Coordinator, str]:
    try:
        hosts, chroot = parse_connect_string(server)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"Connecting to {server}", file=sys.stderr)
    client = ZooKeeperClient(hosts, connect_timeout=_CONNECT_TIMEOUT_SECONDS, request_timeout=_REQUEST_TIMEOUT_SECONDS)
    await client.start()
    return client, chroot


async def _one_shot(server: str, words: list[str]) -> int:
    client, chroot = await _start(server)
    try:
        try:
            await Shell(client, chroot, sys.stdout).run(words)
        except CommandError as exc:
            print(exc, file=sys.stderr)
            return exc.code
        return EXIT_OK
    finally:
        await client.stop()


def _interactive(server: str) -> int:
    with asyncio.Runner() as runner:
        client, chroot = runner.run(_start(server))
        shell = Shell(client, chroot, sys.stdout)
        interactive = sys.stdin.isatty()
        failed = False
        number = 0
        try:
            while True:
                if interactive:
                    print(f"[zk: {server}(CONNECTED) {number}] ", end="", flush=True)
                line = sys.stdin.readline()
                if not line:
                    if interactive:
                        print()
                    break
                number += 1
                try:
                    words = _split(line)
                    if not words:
                        continue
                    if words[0] in ("quit", "exit"):
                        break
                    runner.run(shell.run(words))
                except CommandError as exc:
                    failed = True
                    print(exc, file=sys.stderr)
                except KafkaliteError as exc:
                    failed = True
                    print(f"Error: {exc}", file=sys.stderr)
                sys.stdout.flush()
        finally:
            runner.run(client.stop())
    return EXIT_FAILED if failed else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Run the tool; returns the exit code."""
    arguments = build_parser().parse_args(argv)
    if not arguments.server:
        raise UsageError("the ZooKeeper server is required: zookeeper-shell.sh HOST:PORT[/CHROOT] [COMMAND]")
    # kazoo reports every failed connection attempt; the tool's own message says it once.
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    if arguments.command:
        if arguments.command[0] == "help":
            print(_HELP)
            return EXIT_OK
        return asyncio.run(_one_shot(arguments.server, arguments.command))
    return _interactive(arguments.server)


if __name__ == "__main__":
    sys.exit(run_cli(main))
