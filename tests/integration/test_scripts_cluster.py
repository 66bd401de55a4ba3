"""The Kafka-style shell scripts, run for real: kafkalite-cluster.sh (ZooKeeper plus brokers),
zookeeper-server-start/stop.sh and kafkalite-server-start/stop.sh.

Every cluster runs on free loopback ports inside the test's temporary directory, so a
developer's own cluster on 2181/9092 is never touched (the stop scripts are always given a
properties file, a broker id of the test's own or a data directory). Whatever a test leaves
running is SIGKILLed by pid at teardown: the processes whose command line names the test's
directory.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
CLUSTER = SCRIPTS / "kafkalite-cluster.sh"
LOOPBACK = "127.0.0.1"
# A broker id no developer's broker is likely to use (kafkalite-server-stop.sh --broker-id).
ROUND_TRIP_BROKER_ID = 4242


# --- helpers ------------------------------------------------------------------------------

def run(script: Path, *arguments: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key != "KAFKALITE_LOG_DIR"}
    return subprocess.run(["bash", str(script), *arguments], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=environment, stdin=subprocess.DEVNULL)


def describe(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and alive(int(entry)):
            found.append(int(entry))
    return found


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


_taken_bases: set[int] = set()


def free_base_port(brokers: int) -> int:
    """A base port P with P..P+brokers free (ZooKeeper on P, broker i on P+i)."""
    for _ in range(200):
        base = free_port()
        if base + brokers > 65535 or any(abs(base - other) <= 10 for other in _taken_bases):
            continue
        if all(port_free(base + offset) for offset in range(brokers + 1)):
            _taken_bases.add(base)
            return base
    candidates = list(range(30000, 60000, 17))
    random.shuffle(candidates)
    for base in candidates:
        if all(port_free(base + offset) for offset in range(brokers + 1)):
            _taken_bases.add(base)
            return base
    raise RuntimeError("no free port range found")


def http_json(port: int, path: str, timeout: float = 5) -> Any:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{LOOPBACK}:{port}{path}", timeout=timeout) as response:
        return json.load(response)


def parse_status(output: str) -> dict[tuple[str, str], dict[str, Any]]:
    """``role id host:port pid state`` lines → {(role, id): {...}}."""
    entries: dict[tuple[str, str], dict[str, Any]] = {}
    for line in output.splitlines():
        fields = line.split()
        assert len(fields) == 5, f"status line {line!r} is not 'role id host:port pid state'"
        role, identifier, address, pid, state = fields
        assert role in ("zookeeper", "broker"), line
        assert state in ("running", "not-ready", "stopped"), line
        entries[(role, identifier)] = {"address": address, "pid": None if pid == "-" else int(pid),
                                       "state": state}
    return entries


class Janitor:
    """Kills (SIGKILL, by pid) every process still running that belongs to a test directory."""

    def __init__(self) -> None:
        self.directories: list[Path] = []
        self.pids: set[int] = set()

    def watch(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        resolved = directory.resolve()
        self.directories.append(resolved)
        return resolved

    def sweep(self) -> list[int]:
        leftovers = {pid for pid in self.pids if alive(pid)}
        for directory in self.directories:
            leftovers.update(processes_mentioning(str(directory)))
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return sorted(leftovers)


@pytest.fixture(scope="module")
def janitor() -> Iterator[Janitor]:
    keeper = Janitor()
    try:
        yield keeper
    finally:
        keeper.sweep()


class Cluster:
    def __init__(self, directory: Path, brokers: int, base_port: int) -> None:
        self.directory = directory
        self.brokers = brokers
        self.base_port = base_port

    def command(self, action: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return run(CLUSTER, action, "--data-dir", str(self.directory), *extra)

    def start(self) -> subprocess.CompletedProcess[str]:
        return self.command("start", "--brokers", str(self.brokers), "--base-port", str(self.base_port))

    def status(self) -> tuple[int, dict[tuple[str, str], dict[str, Any]], str]:
        result = self.command("status")
        return result.returncode, parse_status(result.stdout), describe(result)

    def broker_port(self, broker_id: int) -> int:
        return self.base_port + broker_id


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, janitor: Janitor) -> Iterator[Cluster]:
    directory = janitor.watch(tmp_path_factory.mktemp("cluster-a"))
    started = Cluster(directory, 3, free_base_port(3))
    try:
        result = started.start()
        assert result.returncode == 0, describe(result)
        yield started
    finally:
        started.command("stop")
        janitor.sweep()


# --- tests --------------------------------------------------------------------------------

ALL_SCRIPTS = ["kafkalite-cluster.sh", "kafkalite-server-start.sh", "kafkalite-server-stop.sh",
               "zookeeper-server-start.sh", "zookeeper-server-stop.sh"]


@pytest.mark.parametrize("script", ALL_SCRIPTS)
def test_help(script: str) -> None:
    result = run(SCRIPTS / script, "--help", timeout=30)
    assert result.returncode == 0, describe(result)
    assert "Usage: " + script in result.stdout


@pytest.mark.parametrize("script, arguments", [
    ("kafkalite-cluster.sh", ["start", "--bogus"]),
    ("kafkalite-cluster.sh", ["status", "--brokers", "many"]),
    ("kafkalite-cluster.sh", ["start", "--brokers", "0"]),
    ("kafkalite-cluster.sh", ["start", "--base-port", "70000"]),
    ("kafkalite-cluster.sh", ["start", "--data-dir"]),
    ("kafkalite-cluster.sh", ["restart"]),
    ("kafkalite-cluster.sh", []),
    ("kafkalite-server-start.sh", ["-bogus", "config/server.properties"]),
    ("kafkalite-server-start.sh", []),
    ("kafkalite-server-start.sh", ["-daemon", "config/no-such.properties"]),
    ("kafkalite-server-start.sh", ["-daemon", "config/server.properties", "--override", "broker.id"]),
    ("kafkalite-server-start.sh", ["-daemon", "config/server.properties", "--override", "broker.id=one"]),
    ("kafkalite-server-stop.sh", ["--broker-id", "x"]),
    ("kafkalite-server-stop.sh", ["--bogus"]),
    ("zookeeper-server-start.sh", []),
    ("zookeeper-server-start.sh", ["-bogus", "config/zookeeper.properties"]),
    ("zookeeper-server-stop.sh", ["--bogus"]),
])
def test_bad_arguments_exit_2_with_error(script: str, arguments: list[str]) -> None:
    result = run(SCRIPTS / script, *arguments, timeout=30)
    assert result.returncode == 2, describe(result)
    assert result.stderr.startswith("Error: "), describe(result)
    assert "Traceback" not in result.stdout + result.stderr


def test_status_lists_every_process_running(cluster: Cluster) -> None:
    code, entries, text = cluster.status()
    assert code == 0, text
    assert list(entries) == [("zookeeper", "-"), ("broker", "1"), ("broker", "2"), ("broker", "3")], text
    assert entries[("zookeeper", "-")]["address"] == f"{LOOPBACK}:{cluster.base_port}"
    for broker_id in (1, 2, 3):
        assert entries[("broker", str(broker_id))]["address"] == f"{LOOPBACK}:{cluster.broker_port(broker_id)}"
    for entry in entries.values():
        assert entry["state"] == "running", text
        assert entry["pid"] is not None and alive(entry["pid"]), text


def test_describe_cluster_shows_three_brokers_and_a_controller(cluster: Cluster) -> None:
    cluster_ids = set()
    for broker_id in (1, 2, 3):
        answer = http_json(cluster.broker_port(broker_id), "/v1/admin/describe_cluster")
        assert sorted(broker["id"] for broker in answer["brokers"]) == [1, 2, 3], answer
        assert all(broker["host"] == LOOPBACK for broker in answer["brokers"]), answer
        assert answer["controller_id"] in (1, 2, 3), answer
        cluster_ids.add(answer["cluster_id"])
        health = http_json(cluster.broker_port(broker_id), "/health")
        assert health["broker_id"] == broker_id
    assert len(cluster_ids) == 1
    properties = (cluster.directory / "broker-2" / "server.properties").read_text()
    for line in ("broker.id=2", f"listeners=PLAINTEXT://{LOOPBACK}:{cluster.broker_port(2)}",
                 f"zookeeper.connect={LOOPBACK}:{cluster.base_port}/kafkalite",
                 "zookeeper.session.timeout.ms=6000", "default.replication.factor=3",
                 "offsets.topic.replication.factor=3"):
        assert line in properties.splitlines(), line


def test_killed_broker_shows_stopped_and_start_restarts_only_it(cluster: Cluster) -> None:
    code, before, text = cluster.status()
    assert code == 0, text
    victim = str(http_json(cluster.broker_port(1), "/v1/admin/describe_cluster")["controller_id"])
    victim_pid = before[("broker", victim)]["pid"]
    os.kill(victim_pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while alive(victim_pid) and time.monotonic() < deadline:
        time.sleep(0.05)

    code, during, text = cluster.status()
    assert code != 0, text
    assert during[("broker", victim)]["state"] == "stopped", text
    assert during[("broker", victim)]["pid"] is None, text
    for key, entry in during.items():
        if key != ("broker", victim):
            assert entry["state"] == "running" and entry["pid"] == before[key]["pid"], text

    result = cluster.command("start")
    assert result.returncode == 0, describe(result)
    assert result.stdout.count("already running") == 3, describe(result)

    code, after, text = cluster.status()
    assert code == 0, text
    assert after[("broker", victim)]["pid"] not in (None, victim_pid), text
    for key, entry in after.items():
        if key != ("broker", victim):
            assert entry["pid"] == before[key]["pid"], f"{key} was restarted too\n{text}"
    answer = http_json(cluster.broker_port(int(victim)), "/v1/admin/describe_cluster")
    assert sorted(broker["id"] for broker in answer["brokers"]) == [1, 2, 3], answer
    assert answer["controller_id"] in (1, 2, 3), answer


def test_second_cluster_runs_side_by_side(cluster: Cluster, tmp_path: Path, janitor: Janitor) -> None:
    second = Cluster(janitor.watch(tmp_path / "cluster-b"), 1, free_base_port(1))
    try:
        result = second.start()
        assert result.returncode == 0, describe(result)
        code, entries, text = second.status()
        assert code == 0 and len(entries) == 2, text
        janitor.pids.update(entry["pid"] for entry in entries.values())
        properties = (second.directory / "broker-1" / "server.properties").read_text().splitlines()
        assert "default.replication.factor=1" in properties
        assert "offsets.topic.replication.factor=1" in properties

        first_view = http_json(cluster.broker_port(1), "/v1/admin/describe_cluster")
        second_view = http_json(second.broker_port(1), "/v1/admin/describe_cluster")
        assert sorted(broker["id"] for broker in first_view["brokers"]) == [1, 2, 3]
        assert [broker["id"] for broker in second_view["brokers"]] == [1]
        assert second_view["brokers"][0]["port"] == second.broker_port(1)
        assert first_view["cluster_id"] != second_view["cluster_id"]

        result = second.command("stop")
        assert result.returncode == 0, describe(result)
        assert not [pid for pid in (entry["pid"] for entry in entries.values()) if alive(pid)]
        assert processes_mentioning(str(second.directory)) == []
        code, _, text = cluster.status()
        assert code == 0, f"stopping the second cluster disturbed the first\n{text}"
    finally:
        second.command("stop")


def test_stop_leaves_no_process(cluster: Cluster, janitor: Janitor) -> None:
    code, entries, text = cluster.status()
    pids = [entry["pid"] for entry in entries.values() if entry["pid"] is not None]
    janitor.pids.update(pids)
    assert len(pids) == 4, text

    result = cluster.command("stop")
    assert result.returncode == 0, describe(result)
    assert [pid for pid in pids if alive(pid)] == []
    assert processes_mentioning(str(cluster.directory)) == []
    code, entries, text = cluster.status()
    assert code != 0, text
    assert {entry["state"] for entry in entries.values()} == {"stopped"}, text
    # Each broker shut down gracefully (SIGTERM), not by SIGKILL.
    for broker_id in (1, 2, 3):
        log = (cluster.directory / f"broker-{broker_id}" / f"kafkalite-server-{broker_id}.log").read_text()
        last_run = log.rpartition(f"[KafkaliteServer id={broker_id}] started")[2]
        assert f"[KafkaliteServer id={broker_id}] shut down completed" in last_run, last_run

    result = cluster.command("stop")
    assert result.returncode == 0, describe(result)


def test_server_scripts_round_trip(tmp_path: Path, janitor: Janitor) -> None:
    directory = janitor.watch(tmp_path / "round-trip")
    zookeeper_port, broker_port = free_port(), free_port()
    zookeeper_properties = directory / "zookeeper.properties"
    zookeeper_properties.write_text(
        "dataDir=zookeeper\n"  # relative: taken from the current directory
        f"clientPort={zookeeper_port}\nclientPortAddress={LOOPBACK}\ntickTime=500\n"
        "minSessionTimeout=1000\nmaxSessionTimeout=60000\nadmin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr\n")
    server_properties = directory / "server.properties"
    server_properties.write_text(
        "broker.id=1\n"
        f"listeners=PLAINTEXT://{LOOPBACK}:{broker_port}\n"
        f"log.dirs={directory}/broker/data\n"
        f"zookeeper.connect={LOOPBACK}:{zookeeper_port}/round-trip\n"
        "zookeeper.session.timeout.ms=6000\noffsets.topic.replication.factor=1\n")

    environment = {key: value for key, value in os.environ.items() if key != "KAFKALITE_LOG_DIR"}
    result = subprocess.run(["bash", str(SCRIPTS / "zookeeper-server-start.sh"), "-daemon", "zookeeper.properties"],
                            capture_output=True, text=True, timeout=60, cwd=directory, env=environment)
    assert result.returncode == 0, describe(result)
    zookeeper_pid = int((directory / "zookeeper" / "zookeeper.pid").read_text())
    janitor.pids.add(zookeeper_pid)
    assert alive(zookeeper_pid)
    assert (directory / "zookeeper" / "zookeeper.log").exists()

    # -daemon: waits until the broker started; pid and log next to log.dirs.
    result = run(SCRIPTS / "kafkalite-server-start.sh", "-daemon", str(server_properties),
                 "--override", f"broker.id={ROUND_TRIP_BROKER_ID}")
    assert result.returncode == 0, describe(result)
    pid_file = directory / "broker" / f"kafkalite-server-{ROUND_TRIP_BROKER_ID}.pid"
    log_file = directory / "broker" / f"kafkalite-server-{ROUND_TRIP_BROKER_ID}.log"
    broker_pid = int(pid_file.read_text())
    janitor.pids.add(broker_pid)
    health = http_json(broker_port, "/health")
    assert health["broker_id"] == ROUND_TRIP_BROKER_ID and health["controller_id"] == ROUND_TRIP_BROKER_ID

    # Starting it again is harmless.
    result = run(SCRIPTS / "kafkalite-server-start.sh", "-daemon", str(server_properties),
                 "--override", f"broker.id={ROUND_TRIP_BROKER_ID}")
    assert result.returncode == 0 and "already running" in result.stdout, describe(result)

    result = run(SCRIPTS / "kafkalite-server-stop.sh", "--config", str(server_properties))
    assert result.returncode == 0, describe(result)
    assert not alive(broker_pid)
    assert not pid_file.exists()
    assert f"[KafkaliteServer id={ROUND_TRIP_BROKER_ID}] shut down completed" in log_file.read_text()

    # Foreground: the script becomes the broker; stop finds it by broker id.
    foreground_log = directory / "foreground.log"
    with open(foreground_log, "wb") as output:
        foreground = subprocess.Popen(
            ["bash", str(SCRIPTS / "kafkalite-server-start.sh"), str(server_properties),
             "--override", f"broker.id={ROUND_TRIP_BROKER_ID}"],
            cwd=ROOT, env=environment, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)
    janitor.pids.add(foreground.pid)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if http_json(broker_port, "/health", timeout=1)["broker_id"] == ROUND_TRIP_BROKER_ID:
                    break
            except OSError:
                pass
            assert foreground.poll() is None, foreground_log.read_text()
            assert time.monotonic() < deadline, "foreground broker did not answer /health"
            time.sleep(0.1)
        result = run(SCRIPTS / "kafkalite-server-stop.sh", "--broker-id", str(ROUND_TRIP_BROKER_ID))
        assert result.returncode == 0, describe(result)
        assert foreground.wait(timeout=10) == 0, foreground_log.read_text()
        assert f"[KafkaliteServer id={ROUND_TRIP_BROKER_ID}] shut down completed" in foreground_log.read_text()
    finally:
        if foreground.poll() is None:
            foreground.kill()
            foreground.wait()

    result = subprocess.run(["bash", str(SCRIPTS / "zookeeper-server-stop.sh"), "zookeeper.properties"],
                            capture_output=True, text=True, timeout=60, cwd=directory, env=environment)
    assert result.returncode == 0, describe(result)
    assert not alive(zookeeper_pid)
    assert not (directory / "zookeeper" / "zookeeper.pid").exists()
    assert processes_mentioning(str(directory)) == []
