"""Network namespaces for partition tests: ZooKeeper, brokers and clients on hosts of their own.

:class:`NetworkLab` builds a private network on this machine only: one Linux bridge of its own,
one network namespace per named host (``ip netns add``), a veth pair from each namespace into
the bridge, and addresses in a private /24 that exists only on that bridge and inside those
namespaces (the test process reaches every host through the bridge's own address; nothing is
routed off the machine). :meth:`NetworkLab.cut` drops every packet between two hosts with
iptables DROP rules inside both namespaces (both directions, silently, as a real partition:
TCP connections stall instead of being reset) and :meth:`NetworkLab.heal` removes them.
:meth:`NetworkLab.close` kills what was started in the namespaces and deletes the namespaces
(their veths and rules go with them) and the bridge; it also runs at interpreter exit.

:class:`NamespacedZooKeeper` runs one standalone ZooKeeper inside a namespace and
:func:`place_cluster` moves the brokers of a :class:`~tests.support.cluster.BrokerCluster` into
namespaces (``ip netns exec NS python -m kafkalite.broker CONFIG``), listening on their
namespace's address; the rest of the launcher is unchanged.

:func:`unavailable_reason` says why the lab cannot be built here (not root, no ``ip`` or
``iptables``, no namespace support), so tests skip with that reason.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.support.cluster import ROOT, BrokerCluster, BrokerProcess
from tests.support.zookeeper import STANDALONE_TEMPLATE, ZooKeeperLaunchError, java_command, render_config

_LABS: set[NetworkLab] = set()
NAME_PREFIX = "klab"


def _run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(list(command), capture_output=True, text=True, timeout=30)
    if check and completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({completed.returncode}): {completed.stderr.strip()}")
    return completed


def unavailable_reason() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install -y iproute2 iptables)"
    probe = f"{NAME_PREFIX}-probe-{uuid.uuid4().hex[:6]}"
    try:
        _run("ip", "netns", "add", probe)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"cannot create a network namespace: {exc}"
    try:
        _run("ip", "netns", "exec", probe, "iptables", "-S")
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"iptables does not work inside a network namespace: {exc}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    """A private /24 under 10.213.0.0/16 that no interface or route here uses."""
    used = _run("ip", "-4", "route", "show", "table", "all").stdout + _run("ip", "-4", "addr").stdout
    candidates = list(range(1, 255))
    random.shuffle(candidates)
    for third in candidates:
        if f"10.213.{third}." not in used:
            return ipaddress.IPv4Network(f"10.213.{third}.0/24")
    raise RuntimeError("no free private /24 under 10.213.0.0/16")


class NetworkLab:
    """A bridge, namespaces on it and DROP rules between them. See the module docstring."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.bridge = f"{NAME_PREFIX}{self.tag}"
        self.subnet = _free_subnet()
        hosts = self.subnet.hosts()
        self.gateway = str(next(hosts))
        self._addresses = hosts
        self.hosts: dict[str, str] = {}  # name -> address
        self.namespaces: dict[str, str] = {}  # name -> namespace
        self._rules: set[tuple[str, str]] = set()
        self._processes: list[subprocess.Popen[bytes]] = []
        _LABS.add(self)
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise

    def add_host(self, name: str) -> str:
        """A namespace called after ``name`` on the bridge; returns its address."""
        index = len(self.hosts)
        namespace = f"{NAME_PREFIX}-{self.tag}-{name}"
        outside, inside = f"kv{self.tag}{index}", f"kw{self.tag}{index}"
        address = str(next(self._addresses))
        self.namespaces[name] = namespace
        _run("ip", "netns", "add", namespace)
        self.hosts[name] = address
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        _run("ip", "link", "set", inside, "netns", namespace)
        _run("ip", "link", "set", outside, "master", self.bridge)
        _run("ip", "link", "set", outside, "up")
        inside_ns = ("ip", "netns", "exec", namespace)
        _run(*inside_ns, "ip", "link", "set", "lo", "up")
        _run(*inside_ns, "ip", "link", "set", inside, "name", "eth0")
        _run(*inside_ns, "ip", "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        _run(*inside_ns, "ip", "link", "set", "eth0", "up")
        return address

    def prefix(self, name: str) -> list[str]:
        """The command prefix that runs a program inside host ``name``'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[name]]

    def track(self, process: subprocess.Popen[bytes]) -> None:
        """Kill ``process`` at close() if it still runs (it holds a namespace)."""
        self._processes.append(process)

    # -- faults -------------------------------------------------------------------------------
    def _rule(self, action: str, host: str, peer: str) -> None:
        prefix = self.prefix(host)
        peer_address = self.hosts[peer]
        _run(*prefix, "iptables", action, "INPUT", "-s", peer_address, "-j", "DROP")
        _run(*prefix, "iptables", action, "OUTPUT", "-d", peer_address, "-j", "DROP")

    def cut(self, first: str, second: str) -> None:
        """Drop every packet between two hosts, both ways (rules inside both namespaces)."""
        for host, peer in ((first, second), (second, first)):
            if (host, peer) not in self._rules:
                self._rule("-A", host, peer)
                self._rules.add((host, peer))

    def heal(self, first: str, second: str) -> None:
        for host, peer in ((first, second), (second, first)):
            if (host, peer) in self._rules:
                self._rule("-D", host, peer)
                self._rules.discard((host, peer))

    def heal_all(self) -> None:
        for host, peer in sorted(self._rules):
            self._rule("-D", host, peer)
        self._rules.clear()

    # -- teardown -----------------------------------------------------------------------------
    def close(self) -> None:
        for process in self._processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(10)
        self._processes.clear()
        for namespace in self.namespaces.values():
            # Any process still inside would keep the namespace alive: kill those first.
            pids = _run("ip", "netns", "pids", namespace, check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)
            _run("ip", "netns", "del", namespace, check=False)
        self.namespaces.clear()
        self._rules.clear()
        _run("ip", "link", "del", self.bridge, check=False)
        _LABS.discard(self)

    def __enter__(self) -> NetworkLab:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _close_all() -> None:
    for lab in list(_LABS):
        with contextlib.suppress(Exception):
            lab.close()


atexit.register(_close_all)


class NamespacedZooKeeper:
    """A standalone ZooKeeper JVM inside host ``name`` of ``lab``, on that host's address."""

    def __init__(self, lab: NetworkLab, name: str, data_dir: Path, port: int = 2181, tick_time: int = 500) -> None:
        self.lab = lab
        self.name = name
        self.address = lab.hosts[name]
        self.port = port
        self.tick_time = tick_time
        self.data_dir = data_dir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    def start(self, timeout: float = 30.0) -> None:
        data = self.data_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        render_config(STANDALONE_TEMPLATE, config, data_dir=data, client_port=self.port, tick_time=self.tick_time)
        config.write_text(config.read_text().replace("clientPortAddress=127.0.0.1",
                                                     f"clientPortAddress={self.address}"))
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([*self.lab.prefix(self.name), *java_command(config)],
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            cwd=self.data_dir)
        self.lab.track(self.process)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ZooKeeperLaunchError(f"ZooKeeper in {self.name} exited:\n{self.log_path.read_text()[-2000:]}")
            if self._ruok():
                return
            time.sleep(0.1)
        raise ZooKeeperLaunchError(f"ZooKeeper in {self.name} not ready after {timeout:.0f} s")

    def _ruok(self) -> bool:
        try:
            with socket.create_connection((self.address, self.port), timeout=1) as sock:
                sock.sendall(b"ruok")
                return sock.recv(16) == b"imok"
        except OSError:
            return False


class NamespacedBroker(BrokerProcess):
    """A broker process inside a namespace, listening on that namespace's address."""

    def __init__(self, cluster: BrokerCluster, broker_id: int, lab: NetworkLab, host: str) -> None:
        super().__init__(cluster, broker_id, 9092)
        self.lab = lab
        self.host = host

    @property
    def address(self) -> str:
        return f"{self.lab.hosts[self.host]}:{self.port}"

    def write_config(self) -> None:
        super().write_config()
        address = self.lab.hosts[self.host]
        text = self.config_path.read_text().replace("PLAINTEXT://127.0.0.1:", f"PLAINTEXT://{address}:")
        self.config_path.write_text(text)

    def start(self) -> None:
        self.write_config()
        environment = dict(os.environ, PYTHONPATH=str(ROOT))
        with open(self.log_path, "ab") as log_file:  # the broker keeps its own descriptor
            self.process = subprocess.Popen([*self.lab.prefix(self.host), sys.executable, "-m", "kafkalite.broker",
                                             str(self.config_path)],
                                            cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT, env=environment)
        log_file.close()
        self.lab.track(self.process)


def place_cluster(cluster: BrokerCluster, lab: NetworkLab, hosts: dict[int, str]) -> None:
    """Run each broker of ``cluster`` (not started yet) in the namespace ``hosts[broker_id]``."""
    cluster.brokers = {broker_id: NamespacedBroker(cluster, broker_id, lab, hosts[broker_id])
                       for broker_id in cluster.brokers}
