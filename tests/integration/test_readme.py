"""The quick start's commands run: the quick start (ZooKeeper + 3 brokers, produce/consume, a group
with lag, then a stop that leaves no process), and the README blocks marked ``readme-test``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import ROOT, BrokerCluster, free_port
from tests.support.docs import marked_block

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    brokers = BrokerCluster(tmp_path_factory.mktemp("readme"),
                            f"{zookeeper.connect_string}/readme-{uuid.uuid4().hex[:8]}", size=3).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def test_tutorial_block_runs(cluster: BrokerCluster) -> None:
    script = marked_block("tutorial")
    for number, address in enumerate(cluster.bootstrap.split(",")):
        script = script.replace(f"localhost:{9092 + number}", address)
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Created topic orders." in result.stdout
    # The console consumer printed the four records produced, each as partition, offset, key, value.
    consumed = re.findall(r"^Partition:(\d+)\tOffset:(\d+)\t(\S+)\t(\S+)$", result.stdout, re.M)
    assert sorted((key, value) for _, _, key, value in consumed) == [
        ("null", "first"), ("null", "second"), ("user1", "login"), ("user2", "logout")], result.stdout
    # The group read the 4 records and committed; the 3 produced after it left are its lag.
    rows = [tuple(int(cell) for cell in row) for row in re.findall(
        r"^order-processing\s+orders\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", result.stdout, re.M)]
    assert rows, result.stdout
    assert all(0 <= current <= end and lag == end - current for _, current, end, lag in rows), rows
    assert sum(current for _, current, _, _ in rows) == 4, rows
    assert sum(lag for _, _, _, lag in rows) == 3, rows
    # ... and the brokers' /metrics report the same lag per partition
    reported = {int(partition): float(value) for partition, value in re.findall(
        r'^kafkalite_group_coordinator_consumer_lag\{group="order-processing",partition="(\d+)",topic="orders"\} '
        r"(\S+)$", result.stdout, re.M)}
    assert reported == {partition: float(lag) for partition, _, _, lag in rows}, (reported, rows)
    assert "Traceback" not in result.stderr


def test_python_block_runs(cluster: BrokerCluster) -> None:
    code = marked_block("python").replace("localhost:9092", cluster.bootstrap)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "b'user1' b'login'" in result.stdout


def test_quickstart_brings_up_a_cluster_and_stop_leaves_nothing(tmp_path: Path) -> None:
    base = free_port()
    while any(port_in_use(base + offset) for offset in range(4)):
        base = free_port()
    data = tmp_path / "cluster"
    try:
        result = subprocess.run([str(ROOT / "scripts" / "quickstart.sh"), "--base-port", str(base), "--data-dir",
                                 str(data)], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        output = result.stdout
        assert "Created topic quickstart-events." in output, output[-3000:]
        assert "Processed a total of 5 messages" in result.stderr
        assert re.search(r"quickstart-group\s+quickstart-events\s+\d+\s+\d+\s+\d+\s+\d+", output), output
        # Spark read the topic (records per key) and the streaming job aggregated the sample orders.
        assert {"alice\t2", "bob\t1", "<null>\t2"} <= set(output.splitlines()), output[-3000:]
        stats = [line for line in output.splitlines() if '"window_start"' in line]
        assert sum(int(re.search(r'"orders":(\d+)', line)[1]) for line in stats) == 200, stats
        assert re.search(r"quick start done in \d+ s", output), output[-1000:]
        status = subprocess.run([str(ROOT / "scripts" / "kafkalite-cluster.sh"), "status", "--data-dir", str(data)],
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and status.stdout.count("running") == 4
    finally:
        stopped = subprocess.run([str(ROOT / "scripts" / "kafkalite-cluster.sh"), "stop", "--data-dir", str(data)],
                                 capture_output=True, text=True, timeout=180)
    assert stopped.returncode == 0, stopped.stderr
    leftovers = [pid for pid in os.listdir("/proc") if pid.isdigit() and str(data) in _cmdline(pid)]
    for pid in leftovers:
        os.kill(int(pid), signal.SIGKILL)
    assert leftovers == []


def port_in_use(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
