"""The secure cluster in one command, used the way docs/security.md says.

``kafkalite-cluster.sh start --secure`` on free loopback ports: SASL_SSL with SCRAM-SHA-512 on
every listener, the ACL authorizer with the super user ``admin``, and ``admin.properties``.
Then, with nothing but that file: confluent-kafka produces and consumes, kcat lists the
cluster and reads what it wrote, and the README tutorial runs with ``--command-config`` added
to every tool (its ``curl`` of ``/metrics`` goes over TLS as the admin). Nothing is served to
a client without credentials, with a wrong password, or in plaintext.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cluster import ROOT, free_port
from tests.support.docs import marked_block

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLUSTER = ROOT / "scripts" / "kafkalite-cluster.sh"


@dataclass(frozen=True)
class SecureCluster:
    data: Path
    bootstrap: str
    start_output: str

    @property
    def properties_path(self) -> Path:
        return self.data / "admin.properties"

    def properties(self) -> dict[str, str]:
        lines = [line for line in self.properties_path.read_text().splitlines() if line and not line.startswith("#")]
        return {line.partition("=")[0]: line.partition("=")[2] for line in lines}


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _script(*arguments: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key != "KAFKALITE_LOG_DIR"}
    return subprocess.run(["bash", str(CLUSTER), *arguments], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=environment, stdin=subprocess.DEVNULL)


def _kill_leftovers(data: Path) -> None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(data) in cmdline:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    base = free_port()
    while base + 100 > 65535 or not all(_port_free(base + offset) for offset in range(4)):
        base = free_port()
    data = tmp_path_factory.mktemp("secure") / "cluster"
    try:
        started = _script("start", "--secure", "--brokers", "3", "--base-port", str(base), "--data-dir", str(data))
        assert started.returncode == 0, started.stdout + started.stderr
        bootstrap = ",".join(f"127.0.0.1:{base + number}" for number in (1, 2, 3))
        yield SecureCluster(data, bootstrap, started.stdout)
    finally:
        stopped = _script("stop", "--data-dir", str(data))
        _kill_leftovers(data)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def test_start_secure_writes_admin_properties_and_says_how_to_use_them(secure: SecureCluster) -> None:
    properties = secure.properties()
    assert properties["security.protocol"] == "SASL_SSL" and properties["sasl.mechanism"] == "SCRAM-SHA-512"
    assert properties["sasl.username"] == "admin" and len(properties["sasl.password"]) >= 16
    assert Path(properties["ssl.ca.location"]).is_file()
    assert secure.properties_path.stat().st_mode & 0o077 == 0  # the password is the owner's alone
    assert "--command-config" in secure.start_output and str(secure.properties_path) in secure.start_output
    status = _script("status", "--data-dir", str(secure.data), timeout=60)
    assert status.returncode == 0 and status.stdout.count(" running") == 4, status.stdout + status.stderr
    # every broker's settings: SASL_SSL only, the ACL authorizer, admin the super user
    settings = (secure.data / "broker-2" / "server.properties").read_text()
    assert re.search(r"^listeners=SASL_SSL://127\.0\.0\.1:\d+$", settings, re.M)
    assert "PLAINTEXT" not in re.findall(r"^listeners=.*$", settings, re.M)[0]
    assert "super.users=User:admin" in settings and "authorizer.class.name=" in settings


def test_nothing_is_served_in_plaintext_or_without_the_right_credentials(secure: SecureCluster) -> None:
    host, port = secure.bootstrap.split(",")[0].split(":")
    # plain HTTP on the TLS port: the handshake fails, no answer
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        raw.sendall(b"GET /v1/admin/describe_cluster HTTP/1.1\r\nHost: x\r\n\r\n")
        raw.settimeout(5)
        try:
            answer = raw.recv(1024)
        except (ConnectionResetError, TimeoutError):
            answer = b""
        assert b"HTTP/1.1 200" not in answer and b"brokers" not in answer
    # TLS with the right CA but no credentials: 401, nothing served
    context = ssl.create_default_context(cafile=secure.properties()["ssl.ca.location"])
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(b"GET /v1/admin/describe_cluster HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = b""
        while chunk := tls.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 401") and b"SASL_AUTHENTICATION_FAILED" in reply, reply[:300]
    # confluent-kafka with a wrong password gets no metadata
    confluent_admin = pytest.importorskip("confluent_kafka.admin")
    wrong = {**secure.properties(), "sasl.password": "not-the-password", "bootstrap.servers": secure.bootstrap}
    admin = confluent_admin.AdminClient(wrong)
    with pytest.raises(confluent_admin.KafkaException):
        admin.list_topics(timeout=5)


def test_confluent_kafka_and_kcat_work_with_admin_properties(secure: SecureCluster) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    settings = {**secure.properties(), "bootstrap.servers": secure.bootstrap}
    producer = confluent_kafka.Producer({**settings, "acks": "all"})
    for number in range(10):
        producer.produce(topic, value=b"value-%d" % number, key=b"key-%d" % number)
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({**settings, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) == 10:
                break
    finally:
        consumer.close()
    assert sorted(values) == sorted(b"value-%d" % number for number in range(10))
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.skip("kcat is not installed")
    listed = subprocess.run([kcat, "-b", secure.bootstrap, "-F", str(secure.properties_path), "-L", "-t", topic],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and f'topic "{topic}"' in listed.stdout, listed.stdout + listed.stderr
    read = subprocess.run([kcat, "-b", secure.bootstrap, "-F", str(secure.properties_path), "-C", "-t", topic,
                           "-o", "beginning", "-e", "-q", "-f", "%s\n"], capture_output=True, text=True, timeout=60)
    assert read.returncode == 0 and sorted(read.stdout.split()) == sorted(f"value-{n}" for n in range(10)), \
        read.stdout + read.stderr


def _secure_tutorial(secure: SecureCluster) -> str:
    script = marked_block("tutorial")
    for number, address in enumerate(secure.bootstrap.split(",")):
        script = script.replace(f"localhost:{9092 + number}", address)
    properties = str(secure.properties_path)
    # every kafkalite tool gets the admin's settings, as docs/security.md says (Kafka's
    # names: --producer.config and --consumer.config for the console tools, --command-config else)
    script = re.sub(r"(scripts/kafkalite-console-producer\.sh) ", rf"\1 --producer.config {properties} ", script)
    script = re.sub(r"(scripts/kafkalite-console-consumer\.sh) ", rf"\1 --consumer.config {properties} ", script)
    script = re.sub(r"(scripts/kafkalite-(?!console-)[a-z-]+\.sh) ", rf"\1 --command-config {properties} ", script)
    values = secure.properties()
    script = script.replace('curl -s "http://$broker/metrics"',
                            f'curl -s --cacert {values["ssl.ca.location"]} -u admin:{values["sasl.password"]} '
                            '"https://$broker/metrics"')
    return script


def test_the_readme_tutorial_runs_with_command_config(secure: SecureCluster) -> None:
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", _secure_tutorial(secure)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Created topic orders." in result.stdout
    consumed = re.findall(r"^Partition:(\d+)\tOffset:(\d+)\t(\S+)\t(\S+)$", result.stdout, re.M)
    assert sorted((key, value) for _, _, key, value in consumed) == [
        ("null", "first"), ("null", "second"), ("user1", "login"), ("user2", "logout")], result.stdout
    rows = re.findall(r"^order-processing\s+orders\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", result.stdout, re.M)
    assert sum(int(lag) for _, _, _, lag in rows) == 3, result.stdout
    assert 'kafkalite_group_coordinator_consumer_lag{group="order-processing"' in result.stdout
    assert "Traceback" not in result.stderr


def test_the_readme_security_block_runs(secure: SecureCluster, tmp_path: Path) -> None:
    script = marked_block("security")
    script = script.replace("kafkalite-cluster.sh start --secure",
                            f"kafkalite-cluster.sh start --secure --data-dir {secure.data}")
    script = script.replace("var/cluster", str(secure.data)).replace("scripts/", f"{ROOT}/scripts/")
    script = script.replace("localhost:9092", secure.bootstrap.split(",")[0])
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "already running" in result.stdout  # the cluster the fixture started, found by its data directory
    assert "User:alice" in result.stdout  # the ACL listing
    assert sorted(line for line in result.stdout.splitlines() if line in ("paid", "refunded")) == ["paid", "refunded"]
    assert "alice may not delete payments" in result.stdout and "TOPIC_AUTHORIZATION_FAILED" in output, output
    assert "Traceback" not in result.stderr


def _https_post(secure: SecureCluster, path: str, body: bytes, user: str | None, password: str | None) -> bytes:
    host, port = secure.bootstrap.split(",")[0].split(":")
    context = ssl.create_default_context(cafile=secure.properties()["ssl.ca.location"])
    headers = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n" \
              f"Content-Length: {len(body)}\r\nConnection: close\r\n"
    if user is not None:
        import base64
        headers += "Authorization: Basic " + base64.b64encode(f"{user}:{password}".encode()).decode() + "\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(headers.encode() + b"\r\n" + body)
        reply = b""
        while chunk := tls.recv(4096):
            reply += chunk
    return reply


def test_controlled_shutdown_is_refused_to_anyone_but_the_brokers(secure: SecureCluster) -> None:
    properties = str(secure.properties_path)
    user = f"ops-{uuid.uuid4().hex[:6]}"
    created = subprocess.run([str(ROOT / "scripts" / "kafkalite-configs.sh"), "--bootstrap-server",
                              secure.bootstrap.split(",")[0], "--command-config", properties, "--alter",
                              "--entity-type", "users", "--entity-name", user, "--add-config",
                              "SCRAM-SHA-512=[iterations=8192,password=ops-secret]"],
                             capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stdout + created.stderr
    body = b'{"broker_id": 2}'
    unauthenticated = _https_post(secure, "/v1/admin/controlled_shutdown", body, None, None)
    assert unauthenticated.startswith(b"HTTP/1.1 401") and b"SASL_AUTHENTICATION_FAILED" in unauthenticated
    # an authenticated user without ClusterAction: refused, and broker 2 keeps its leaderships
    refused = _https_post(secure, "/v1/admin/controlled_shutdown", body, user, "ops-secret")
    assert refused.startswith(b"HTTP/1.1 403") and b"CLUSTER_AUTHORIZATION_FAILED" in refused, refused[:300]
    status = _script("status", "--data-dir", str(secure.data), timeout=60)
    assert status.returncode == 0 and status.stdout.count(" running") == 4, status.stdout + status.stderr
    # the brokers' own calls (follower fetches over SASL_SSL) still work: a replicated write is acknowledged
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer({**secure.properties(), "bootstrap.servers": secure.bootstrap,
                                         "acks": "all"})
    delivered: list[object] = []
    producer.produce(f"after-shutdown-{uuid.uuid4().hex[:6]}", b"v",
                     on_delivery=lambda error, message: delivered.append(error))
    assert producer.flush(30) == 0 and delivered == [None]
