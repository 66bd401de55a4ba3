"""Real ZooKeeper servers on loopback: a standalone server and a 3-node ensemble.

Used by the benchmarks and by the integration tests (``tests/support`` builds on it).
Dependency-free (standard library only). Servers are Debian's ZooKeeper started with the same
java command as ``zk/zookeeper.sh`` and the zoo.cfg templates shipped next to this module
(package data, also read by ``zk/zookeeper.sh``), bound to 127.0.0.1, each in its own
directory. Every started JVM is recorded in a module registry and SIGKILLed at interpreter exit
if its owner forgot to stop it, so no process outlives the run.

Concurrency: a server or ensemble object is driven by one thread at a time (its owner's); the
registry of live servers is guarded by a lock.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_HERE = Path(__file__).resolve().parent
STANDALONE_TEMPLATE = _HERE / "zoo.cfg.template"
ENSEMBLE_TEMPLATE = _HERE / "zoo-ensemble.cfg.template"
#: Debian packages that provide ZOOKEEPER_JAR and SLF4J_JAR (as ``zk/zookeeper.sh install``).
ZOOKEEPER_PACKAGES = ("zookeeper", "libslf4j-java")
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_JAR = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
LOOPBACK = "127.0.0.1"


class ZooKeeperLaunchError(RuntimeError):
    """A server did not start (the message carries the tail of its log)."""


def java_command(config_path: Path) -> list[str]:
    """The command line that runs one ZooKeeper server from ``config_path``."""
    return ["java", "-Xmx256m", "-cp", f"{ZOOKEEPER_JAR}:{SLF4J_JAR}", MAIN_CLASS,
            str(config_path)]


def ensure_zookeeper_installed() -> None:
    """Install Debian's ZooKeeper with apt-get when its jars are missing (like ``zk/zookeeper.sh install``).

    A failed first attempt runs ``apt-get update`` and tries once more. Needs root (or
    password-less sudo). Raises ZooKeeperLaunchError with apt-get's output when it fails.
    """
    if ZOOKEEPER_JAR.is_file() and SLF4J_JAR.is_file():
        return
    if shutil.which("apt-get") is None:
        raise ZooKeeperLaunchError("apt-get not found: install ZooKeeper 3.8 and SLF4J by hand")
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    lock = ["-o", "DPkg::Lock::Timeout=300"]
    install = [*prefix, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", *lock, "install", "-y",
               "--no-install-recommends", *ZOOKEEPER_PACKAGES]
    completed = subprocess.run(install, capture_output=True, text=True, timeout=900)
    if completed.returncode != 0:
        subprocess.run([*prefix, "apt-get", *lock, "update"], capture_output=True, text=True, timeout=900)
        completed = subprocess.run(install, capture_output=True, text=True, timeout=900)
    if completed.returncode != 0 or not ZOOKEEPER_JAR.is_file() or not SLF4J_JAR.is_file():
        raise ZooKeeperLaunchError(
            f"installing ZooKeeper failed (exit {completed.returncode}):\n"
            f"{completed.stdout[-2000:]}{completed.stderr[-2000:]}")


def four_letter_word(port: int, word: str, timeout: float = 2.0) -> str:
    """Send a four-letter command to 127.0.0.1:port; the answer, or "" when there is none."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout) as connection:
            connection.sendall(word.encode("ascii"))
            chunks: list[bytes] = []
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError:
        return ""
    return b"".join(chunks).decode("utf-8", "replace")


# Test servers listen below the kernel's ephemeral range (32768-60999 by default), so a port
# picked here cannot be taken by an outgoing connection between the pick and the server's bind.
_PORT_RANGE = (20000, 32000)
#: ``LOW-HIGH``: the ports free_ports picks from instead of _PORT_RANGE. Processes that start
#: servers side by side (parallel test workers, two local clusters) each take a range of their
#: own, so that no two of them pick the same port between its pick and its bind.
PORT_RANGE_VARIABLE = "KAFKALITE_PORT_RANGE"


def port_range() -> tuple[int, int]:
    """The ports free_ports picks from, ``[low, high)``: KAFKALITE_PORT_RANGE or the default,
    cut off at the kernel's ephemeral range when it starts below it (a range that starts inside
    the ephemeral range is taken as given).

    Raises ValueError naming the variable when it is set but not ``LOW-HIGH`` with
    ``1024 <= LOW < HIGH <= 65536``.
    """
    text = os.environ.get(PORT_RANGE_VARIABLE, "").strip()
    low, high = _PORT_RANGE
    if text:
        low_text, separator, high_text = text.partition("-")
        try:
            low, high = int(low_text), int(high_text)
        except ValueError:
            low = high = 0
        if not separator or not 1024 <= low < high <= 65536:
            raise ValueError(f"{PORT_RANGE_VARIABLE}={text!r}: expected LOW-HIGH with 1024 <= LOW < HIGH <= 65536, "
                             f"e.g. 20000-26000")
    floor = _ephemeral_floor()
    return (low, min(high, floor)) if low < floor else (low, high)


def _ephemeral_floor() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            return int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that were free a moment ago (outside the ephemeral range)."""
    generator = random.Random()
    low, high = port_range()
    if count > high - low:
        raise ValueError(f"{count} ports asked for, {high - low} in the range {low}-{high} "
                         f"({PORT_RANGE_VARIABLE} or the default, cut at the ephemeral range)")
    chosen: list[int] = []
    sockets: list[socket.socket] = []
    try:
        while len(chosen) < count:
            port = generator.randrange(low, high)
            if port in chosen:
                continue
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
            chosen.append(port)
        return chosen
    finally:
        for sock in sockets:
            sock.close()


def render_config(template: Path, destination: Path, *, data_dir: Path, client_port: int,
                  tick_time: int, server_lines: Sequence[str] = ()) -> None:
    """Fill a ``zk/*.template`` the way ``zk/zookeeper.sh`` does."""
    lines: list[str] = []
    for line in template.read_text().splitlines():
        if line == "@SERVER_LINES@":
            lines.extend(server_lines)
            continue
        lines.append(line.replace("@DATA_DIR@", str(data_dir))
                     .replace("@CLIENT_PORT@", str(client_port))
                     .replace("@TICK_TIME@", str(tick_time)))
    destination.write_text("\n".join(lines) + "\n")


_LIVE: set[ZooKeeperServer] = set()
_LIVE_LOCK = threading.Lock()


def _kill_leftovers() -> None:
    with _LIVE_LOCK:
        leftovers = list(_LIVE)
    for server in leftovers:
        with contextlib.suppress(Exception):
            server.kill()


atexit.register(_kill_leftovers)


@dataclass(frozen=True)
class QuorumMember:
    """One member of an ensemble: its id and its three loopback ports."""

    server_id: int
    client_port: int
    peer_port: int
    election_port: int

    def server_line(self) -> str:
        return f"server.{self.server_id}={LOOPBACK}:{self.peer_port}:{self.election_port}"


class ZooKeeperServer:
    """One ZooKeeper JVM owned by this process.

    Standalone by default; with ``quorum`` and ``server_id`` a member of an ensemble. The port
    (a free one unless given) is kept across stop()/start(), so a restarted server is the same
    server to its clients. ``data_dir`` holds zoo.cfg, the data and ``zookeeper.log``.
    """

    def __init__(self, data_dir: str | os.PathLike[str], port: int | None = None,
                 tick_time: int = 500, *, server_id: int | None = None,
                 quorum: Sequence[QuorumMember] = ()) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.tick_time = tick_time
        self.server_id = server_id
        self.quorum = tuple(quorum)
        if bool(self.quorum) != (server_id is not None):
            raise ValueError("an ensemble member needs both server_id and quorum")
        if port is None and self.quorum:
            port = next(m.client_port for m in self.quorum if m.server_id == server_id)
        self._port = port
        self._process: subprocess.Popen[bytes] | None = None
        self._frozen = False

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the port is chosen by start()")
        return self._port

    @property
    def connect_string(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running else None  # type: ignore[union-attr]

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def mode(self) -> str | None:
        """"standalone", "leader" or "follower" while serving clients, else None."""
        for line in four_letter_word(self.port, "srvr").splitlines():
            if line.startswith("Mode: "):
                return line[len("Mode: "):].strip()
        return None

    def start(self, timeout: float = 30.0, *, wait_for_quorum: bool | None = None) -> None:
        """Start the JVM and wait for ``imok`` (and, standalone, for it to serve).

        Ensemble members by default wait only for ``imok``: serving needs a quorum, which
        :class:`ZooKeeperEnsemble` waits for. Raises ZooKeeperLaunchError with the log tail.
        """
        if self.running:
            return
        if wait_for_quorum is None:
            wait_for_quorum = not self.quorum
        if self._port is None:
            self._port = free_ports(1)[0]
        data = self.data_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        if self.quorum:
            (data / "myid").write_text(f"{self.server_id}\n")
            render_config(ENSEMBLE_TEMPLATE, self.config_path, data_dir=data,
                          client_port=self.port, tick_time=self.tick_time,
                          server_lines=[member.server_line() for member in self.quorum])
        else:
            render_config(STANDALONE_TEMPLATE, self.config_path, data_dir=data,
                          client_port=self.port, tick_time=self.tick_time)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                java_command(self.config_path), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, cwd=self.data_dir, start_new_session=True)
        self._frozen = False
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self._wait(timeout, wait_for_quorum)
        except BaseException:
            self.kill()
            raise

    def _wait(self, timeout: float, serving: bool) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise ZooKeeperLaunchError(
                    f"ZooKeeper on port {self.port} exited during startup "
                    f"(exit {self._process.returncode if self._process else '?'}):\n"
                    f"{self.log_tail()}")
            if four_letter_word(self.port, "ruok", timeout=1.0) == "imok" and (
                not serving or self.mode() is not None
            ):
                return
            time.sleep(0.1)
        raise ZooKeeperLaunchError(
            f"ZooKeeper on port {self.port} not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def wait_serving(self, timeout: float = 30.0) -> None:
        """Wait until the server serves clients (for a member: until it is in a quorum)."""
        self._wait(timeout, serving=True)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (after SIGCONT if frozen), wait up to ``timeout``, then SIGKILL."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGCONT)
                process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._forget()

    def kill(self) -> None:
        """SIGKILL, the way a crashed server goes away."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()
        self._forget()

    def _forget(self) -> None:
        self._frozen = False
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def freeze(self) -> None:
        """SIGSTOP: the server stops answering but keeps its sockets (like a long GC pause)."""
        if not self.running:
            raise RuntimeError("server is not running")
        os.kill(self._process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        self._frozen = True

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""
        if self.running:
            os.kill(self._process.pid, signal.SIGCONT)  # type: ignore[union-attr]
        self._frozen = False

    def __repr__(self) -> str:
        state = "frozen" if self._frozen else ("running" if self.running else "stopped")
        return f"<ZooKeeperServer {LOOPBACK}:{self._port} {state} {self.data_dir}>"


class ZooKeeperEnsemble:
    """A loopback ensemble of ``size`` (3) members on free ports under ``base_dir/nodeN``.

    Members are addressed by index 0..size-1 (server ids 1..size).
    """

    def __init__(self, base_dir: str | os.PathLike[str], size: int = 3,
                 tick_time: int = 500) -> None:
        ports = free_ports(3 * size)
        self.members = [QuorumMember(index + 1, ports[3 * index], ports[3 * index + 1],
                                     ports[3 * index + 2]) for index in range(size)]
        base = Path(base_dir)
        self.nodes = [ZooKeeperServer(base / f"node{member.server_id}", tick_time=tick_time,
                                      server_id=member.server_id, quorum=self.members)
                      for member in self.members]

    @property
    def connect_string(self) -> str:
        return ",".join(node.connect_string for node in self.nodes)

    def start(self, timeout: float = 30.0) -> None:
        """Start every member and wait until all of them serve in a quorum."""
        try:
            for node in self.nodes:
                node.start(timeout)
            for node in self.nodes:
                node.wait_serving(timeout)
        except BaseException:
            self.kill()
            raise

    def stop(self) -> None:
        """SIGTERM every member at once, then wait for each."""
        for node in self.nodes:
            if node.running and node._process is not None:
                with contextlib.suppress(ProcessLookupError):
                    node._process.send_signal(signal.SIGCONT)
                    node._process.terminate()
        for node in self.nodes:
            node.stop()

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def leader_index(self) -> int | None:
        for index, node in enumerate(self.nodes):
            if node.running and node.mode() == "leader":
                return index
        return None

    def kill_node(self, index: int) -> None:
        """SIGKILL member ``index``."""
        self.nodes[index].kill()

    def start_node(self, index: int, timeout: float = 30.0) -> None:
        """Restart member ``index`` and wait until it has rejoined the quorum."""
        node = self.nodes[index]
        node.start(timeout)
        node.wait_serving(timeout)


__all__ = [
    "ENSEMBLE_TEMPLATE", "QuorumMember", "STANDALONE_TEMPLATE", "ZooKeeperEnsemble", "ZooKeeperLaunchError",
    "ZooKeeperServer", "ensure_zookeeper_installed", "four_letter_word", "free_ports",
    "java_command", "render_config",
]
