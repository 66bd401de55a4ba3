"""The docker-compose stack (compose/): the file is always validated with Debian's
docker-compose (installed with apt when missing); then, where a Docker engine can be started
here, the stack really runs.

The real path starts a private ``dockerd`` (its own data root, exec root and socket; no bridge,
no iptables changes), builds the base image with compose/build-base-image.sh (debootstrap, no
registry; the root tarball is cached in /var/cache/kafkalite-ci, or $KAFKALITE_CI_CACHE, so
later runs only import it), builds the images from a copy of the repository's files, brings
ZooKeeper and three brokers up on free loopback ports (host networking), waits for the
healthchecks, runs a produce/consume round trip through them with our scripts, recreates a
broker container to show its data lives on the named volume, and tears everything down:
``docker-compose down -v``, the daemon stopped, its data root removed.

Without root, or when the daemon cannot start, the test is skipped with the reason, after the
validation passed.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import ROOT, HttpError, free_port, http

pytestmark = pytest.mark.integration
COMPOSE_FILE = ROOT / "compose" / "docker-compose.yml"
MONITORING_FILE = ROOT / "compose" / "monitoring.yml"
SECURE_FILE = ROOT / "compose" / "secure.yml"
SCRIPTS = ROOT / "scripts"
CACHE_DIR = Path(os.environ.get("KAFKALITE_CI_CACHE", "/var/cache/kafkalite-ci"))
APT_TIMEOUT_SECONDS = 300
BASE_IMAGE_TIMEOUT_SECONDS = 360  # a first debootstrap takes 3-4 minutes here; later runs import the cached root
BUILD_TIMEOUT_SECONDS = 180
UP_TIMEOUT_SECONDS = 120
HEALTHY_TIMEOUT_SECONDS = 90
WHOLE_TEST_TIMEOUT_SECONDS = 590


def _command(arguments: list[str], timeout: float, env: dict[str, str] | None = None,
             stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command with a time limit; a failure (when ``check``) shows its output."""
    result = subprocess.run(arguments, capture_output=True, text=True, timeout=timeout, env=env, input=stdin)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(arguments)} exited {result.returncode}\n"
                             f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}")
    return result


def _install_debian_packages(packages: list[str]) -> str | None:
    """apt-get install ``packages``; None when done, else why it could not be done."""
    if os.geteuid() != 0:
        return f"{', '.join(packages)} missing and not root to install them"
    environment = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "-o", "DPkg::Lock::Timeout=120", "install", "-y", "-q", "--no-install-recommends", *packages]
    try:
        if _command(install, APT_TIMEOUT_SECONDS, environment, check=False).returncode == 0:
            return None
        _command(["apt-get", "-o", "DPkg::Lock::Timeout=120", "update", "-q"], APT_TIMEOUT_SECONDS, environment,
                 check=False)
        result = _command(install, APT_TIMEOUT_SECONDS, environment, check=False)
    except subprocess.TimeoutExpired:
        return f"apt-get install {' '.join(packages)} did not finish in {APT_TIMEOUT_SECONDS} s"
    if result.returncode != 0:
        return f"apt-get install {' '.join(packages)} failed: {result.stderr.strip()[-500:]}"
    return None


def _require_docker_compose() -> str:
    path = shutil.which("docker-compose")
    if path is None:
        problem = _install_debian_packages(["docker-compose"])
        assert problem is None, f"cannot validate the compose file: {problem}"
        path = shutil.which("docker-compose")
    assert path is not None, "docker-compose is not on PATH after installing it"
    return path


def validate_compose_file() -> None:
    """``docker-compose config -q`` (no engine needed) with and without the spark profile, and
    the properties the stack relies on in the rendered file."""
    compose = _require_docker_compose()
    environment = {key: value for key, value in os.environ.items() if not key.startswith("KAFKALITE_")}
    for profile in ([], ["--profile", "spark"]):
        _command([compose, "-f", str(COMPOSE_FILE), *profile, "config", "-q"], 60, environment)
    services = _command([compose, "-f", str(COMPOSE_FILE), "--profile", "spark", "config", "--services"], 60,
                        environment).stdout.split()
    assert sorted(services) == ["broker-1", "broker-2", "broker-3", "spark-job", "zookeeper"]
    volumes = _command([compose, "-f", str(COMPOSE_FILE), "config", "--volumes"], 60, environment).stdout.split()
    assert sorted(volumes) == ["broker-1-data", "broker-2-data", "broker-3-data", "zookeeper-data"]
    ports = {"KAFKALITE_ZOOKEEPER_PORT": "32181", "KAFKALITE_BROKER1_PORT": "39092",
             "KAFKALITE_BROKER2_PORT": "39093", "KAFKALITE_BROKER3_PORT": "39094",
             "KAFKALITE_BASE_IMAGE": "example/base:1"}
    rendered = _command([compose, "-f", str(COMPOSE_FILE), "config"], 60, {**environment, **ports}).stdout
    assert rendered.count("network_mode: host") == 5  # every service, the Spark job too
    assert rendered.count("condition: service_healthy") == 6  # brokers on ZooKeeper, the job on the brokers
    for port in ("39092", "39093", "39094"):
        assert f"KAFKALITE_ADVERTISED_LISTENERS: PLAINTEXT://127.0.0.1:{port}" in rendered
        assert f"http://127.0.0.1:{port}/ready" in rendered
    assert "KAFKALITE_ZOOKEEPER_CONNECT: 127.0.0.1:32181/kafkalite" in rendered
    assert "BASE_IMAGE: example/base:1" in rendered
    assert "profiles:\n    - spark" in rendered  # the Spark job only runs with --profile spark
    defaults = _command([compose, "-f", str(COMPOSE_FILE), "config"], 60, environment).stdout
    assert "BASE_IMAGE: python:3.11-slim-bookworm" in defaults and "PLAINTEXT://127.0.0.1:9092" in defaults
    # Prometheus and Grafana, added with compose/monitoring.yml
    monitored = [compose, "-f", str(COMPOSE_FILE), "-f", str(MONITORING_FILE)]
    _command([*monitored, "config", "-q"], 60, environment)
    services = _command([*monitored, "config", "--services"], 60, environment).stdout.split()
    assert {"prometheus", "grafana", "broker-1"} <= set(services)
    rendered = _command([*monitored, "config"], 60, {**environment, "KAFKALITE_PROMETHEUS_PORT": "39090"}).stdout
    assert "--web.listen-address=127.0.0.1:39090" in rendered
    assert "KAFKALITE_PROMETHEUS_URL: http://127.0.0.1:39090" in rendered
    # the secure variant: SASL_SSL everywhere, brokers after the one-shot security setup, no plaintext port
    secured = [compose, "-f", str(COMPOSE_FILE), "-f", str(SECURE_FILE)]
    _command([*secured, "config", "-q"], 60, environment)
    services = _command([*secured, "config", "--services"], 60, environment).stdout.split()
    assert {"broker-1", "broker-2", "broker-3", "security-setup", "zookeeper"} <= set(services)
    rendered = _command([*secured, "config"], 60, {**environment, **ports,
                                                   "KAFKALITE_SECURE_DIR": "/srv/secure"}).stdout
    assert rendered.count("condition: service_completed_successfully") == 3
    assert "PLAINTEXT://" not in rendered and "http://" not in rendered
    for port in ("39092", "39093", "39094"):
        assert f"KAFKALITE_ADVERTISED_LISTENERS: SASL_SSL://127.0.0.1:{port}" in rendered
        assert f"https://127.0.0.1:{port}/ready" in rendered
    assert "KAFKALITE_EXTRA_CONFIG: /srv/secure/security/server.properties" in rendered
    assert "/srv/secure:/srv/secure:ro" in rendered
    assert "127.0.0.1:32181/kafkalite" in rendered


class DockerDaemon:
    """A private dockerd: own data root, exec root and socket; no bridge or iptables changes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.socket = directory / "docker.sock"
        self.log_path = directory / "dockerd.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def start(self, timeout: float = 60.0) -> str | None:
        """Start and wait for ``docker info``; None when ready, else why not (daemon stopped)."""
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            return "dockerd is not installed"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [dockerd, "--data-root", str(self.directory / "data"), "--exec-root", str(self.directory / "exec"),
                 "--host", self.host, "--pidfile", str(self.directory / "dockerd.pid"), "--bridge=none",
                 "--iptables=false", "--ip6tables=false", "--log-level=warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            result = subprocess.run(["docker", "--host", self.host, "info", "--format", "{{.ServerVersion}}"],
                                    capture_output=True, text=True, timeout=30)
            if result.returncode == 0:
                return None
            time.sleep(0.5)
        reason = f"dockerd did not become ready (exit code {self.process.poll()}): {self.log_tail()}"
        self.stop()
        return reason

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM (then SIGKILL), unmount what it left, remove its directories."""
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        self.process = None
        mounts = []
        try:
            for line in Path("/proc/self/mounts").read_text().splitlines():
                mount_point = line.split()[1].replace("\\040", " ")
                if mount_point.startswith(str(self.directory) + "/"):
                    mounts.append(mount_point)
        except OSError:
            pass
        for mount_point in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mount_point], capture_output=True, timeout=30)
        shutil.rmtree(self.directory, ignore_errors=True)


def _stage_repository(destination: Path) -> None:
    """Copy the repository's files (tracked and new, not ignored: no .venv, no var/) as the
    build context, so the images hold exactly what would be committed."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, timeout=60)
    if listed.returncode == 0:
        names = [name for name in listed.stdout.decode().split("\0") if name]
    else:  # not a git checkout: what the Dockerfile copies
        names = [str(path.relative_to(ROOT)) for folder in ("kafkalite", "scripts", "config", "compose")
                 for path in (ROOT / folder).rglob("*") if path.is_file() and "__pycache__" not in path.parts]
        names += ["setup.cfg", "pyproject.toml", "README.md"]
    for name in names:
        source = ROOT / name
        if not source.is_file():
            continue
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def _health(compose: list[str], environment: dict[str, str], host: str) -> dict[str, str]:
    identifiers = _command([*compose, "ps", "-q"], 60, environment).stdout.split()
    if not identifiers:
        return {}
    inspected = _command(["docker", "--host", host, "inspect", "--format",
                          "{{.Name}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}", *identifiers],
                         60, environment).stdout
    return dict(line.strip().lstrip("/").split(" ", 1) for line in inspected.splitlines() if line.strip())


def _wait_healthy(compose: list[str], environment: dict[str, str], host: str, count: int) -> None:
    deadline = time.monotonic() + HEALTHY_TIMEOUT_SECONDS
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = _health(compose, environment, host)
        if len(states) == count and all(state == "healthy" for state in states.values()):
            return
        time.sleep(1)
    logs = _command([*compose, "logs", "--no-color", "--tail", "20"], 60, environment, check=False).stdout
    raise AssertionError(f"containers not healthy after {HEALTHY_TIMEOUT_SECONDS} s: {states}\n{logs[-6000:]}")


def _script(name: str, *arguments: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    result = _command([str(SCRIPTS / name), *arguments], 120, stdin=stdin, check=False)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, f"{name} {' '.join(arguments)}: {result.stderr}"
    return result


@pytest.fixture(scope="module")
def compose_file_valid() -> None:
    validate_compose_file()


#: Run with ``python3 -c`` inside a container (standard library only): sends a Kafka Metadata v0
#: request to HOST PORT and prints the ``host:port`` of every broker in the answer.
METADATA_V0_PROBE = """
import socket, struct, sys
body = struct.pack(">hhih", 3, 0, 1, 5) + b"probe" + struct.pack(">i", 0)
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as connection:
    connection.sendall(struct.pack(">i", len(body)) + body)
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
        chunk = connection.recv(65536)
        if not chunk:
            sys.exit("connection closed")
        data += chunk
offset = 8
(count,) = struct.unpack_from(">i", data, offset)
offset += 4
for _ in range(count):
    node, length = struct.unpack_from(">ih", data, offset)
    offset += 6
    host = data[offset:offset + length].decode()
    offset += length
    (port,) = struct.unpack_from(">i", data, offset)
    offset += 4
    print(f"{host}:{port}")
"""


def test_compose_file_is_valid() -> None:
    """``config -q`` passes with and without the spark profile; the rendered file has the five
    services, four volumes, host networking, health-gated start order and interpolated ports
    (each checked by an assert in :func:`validate_compose_file`)."""
    validate_compose_file()


@pytest.fixture
def docker_daemon(compose_file_valid: None) -> Iterator[DockerDaemon]:
    if os.geteuid() != 0:
        pytest.skip("the compose stack needs root here: to start dockerd and to debootstrap its base image")
    missing = [package for package, command in (("docker.io", "dockerd"), ("debootstrap", "debootstrap"))
               if shutil.which(command) is None]
    if missing:
        problem = _install_debian_packages(missing)
        if problem is not None:
            pytest.skip(f"no Docker engine here: {problem}")
    daemon = DockerDaemon(Path(tempfile.mkdtemp(prefix="kl-dockerd-", dir="/tmp")))
    problem = daemon.start()
    if problem is not None:
        pytest.skip(f"no Docker engine could start here: {problem}")
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.mark.timeout(WHOLE_TEST_TIMEOUT_SECONDS)
def test_compose_stack_round_trip(docker_daemon: DockerDaemon, tmp_path: Path) -> None:
    started = time.monotonic()
    environment = {key: value for key, value in os.environ.items() if not key.startswith("KAFKALITE_")}
    environment.update(DOCKER_HOST=docker_daemon.host, COMPOSE_DOCKER_CLI_BUILD="0", DOCKER_BUILDKIT="0",
                       KAFKALITE_CI_CACHE=str(CACHE_DIR))
    base = _command([str(ROOT / "compose" / "build-base-image.sh"), "--cache-dir", str(CACHE_DIR)],
                    BASE_IMAGE_TIMEOUT_SECONDS, environment)
    base_image = base.stdout.strip().splitlines()[-1]
    base_seconds = time.monotonic() - started

    context = tmp_path / "repository"
    _stage_repository(context)
    ports = [free_port() for _ in range(4)]
    suffix = uuid.uuid4().hex[:8]
    environment.update(KAFKALITE_BASE_IMAGE=base_image, KAFKALITE_TAG=f"ci-{suffix}",
                       KAFKALITE_ZOOKEEPER_PORT=str(ports[0]), KAFKALITE_BROKER1_PORT=str(ports[1]),
                       KAFKALITE_BROKER2_PORT=str(ports[2]), KAFKALITE_BROKER3_PORT=str(ports[3]))
    compose = [_require_docker_compose(), "-p", f"klci{suffix}", "-f", str(context / "compose" / "docker-compose.yml")]
    build_started = time.monotonic()
    _command([*compose, "build"], BUILD_TIMEOUT_SECONDS, environment)
    build_seconds = time.monotonic() - build_started
    try:
        up_started = time.monotonic()
        _command([*compose, "up", "-d", "--no-build"], UP_TIMEOUT_SECONDS, environment)
        _wait_healthy(compose, environment, docker_daemon.host, 4)
        up_seconds = time.monotonic() - up_started
        brokers = [f"127.0.0.1:{port}" for port in ports[1:]]
        bootstrap = ",".join(brokers)

        def cluster_ready() -> bool:
            try:
                answer = http(brokers[0], "GET", "/v1/admin/describe_cluster", timeout=5)
            except (OSError, HttpError):
                return False
            return len(answer["brokers"]) == 3 and int(answer["controller_id"]) > 0

        deadline = time.monotonic() + 60
        while not cluster_ready():
            assert time.monotonic() < deadline, "the brokers in containers did not form a cluster"
            time.sleep(0.5)

        # The round trip, from this machine, with our scripts, through the advertised listeners.
        _script("kafkalite-topics.sh", "--bootstrap-server", bootstrap, "--create", "--topic", "compose-orders",
                "--partitions", "3", "--replication-factor", "3")
        _script("kafkalite-console-producer.sh", "--bootstrap-server", bootstrap, "--topic", "compose-orders",
                "--property", "parse.key=true", "--property", "key.separator=:", "--producer-property", "acks=all",
                stdin="alice:order-1\nbob:order-2\ncarol:order-3\n")
        consumed = _script("kafkalite-console-consumer.sh", "--bootstrap-server", bootstrap, "--topic",
                           "compose-orders", "--from-beginning", "--max-messages", "3", "--timeout-ms", "30000",
                           "--property", "print.key=true")
        assert sorted(consumed.stdout.strip().splitlines()) == ["alice\torder-1", "bob\torder-2", "carol\torder-3"]
        offsets = _script("kafkalite-get-offsets.sh", "--bootstrap-server", brokers[1], "--topic", "compose-orders")
        assert sum(int(line.rsplit(":", 1)[1]) for line in offsets.stdout.split()) == 3
        znodes = _script("zookeeper-shell.sh", f"127.0.0.1:{ports[0]}/kafkalite", "ls", "/brokers/ids")
        assert znodes.stdout.strip() == "[1, 2, 3]"
        # Unmodified Kafka clients on the same addresses: kafka-python from this machine, and a
        # Kafka Metadata request from inside a container, which must be told the same advertised
        # addresses (host networking: no "NoBrokersAvailable behind Docker").
        from kafka import KafkaConsumer

        kafka_consumer = KafkaConsumer("compose-orders", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                       consumer_timeout_ms=30_000, group_id="compose-kafka-python")
        try:
            read = []
            for record in kafka_consumer:
                read.append((record.key, record.value))
                if len(read) == 3:
                    break
        finally:
            kafka_consumer.close()
        assert sorted(read) == [(b"alice", b"order-1"), (b"bob", b"order-2"), (b"carol", b"order-3")]
        host, port = brokers[1].rsplit(":", 1)
        advertised = _command([*compose, "exec", "-T", "broker-2", "python3", "-c", METADATA_V0_PROBE, host, port],
                              60, environment)
        assert sorted(advertised.stdout.split()) == sorted(brokers), advertised.stdout
        # The tools are in the image too.
        inside = _command([*compose, "exec", "-T", "broker-2", "kafkalite-topics.sh", "--bootstrap-server",
                           brokers[1], "--list"], 60, environment)
        assert "compose-orders" in inside.stdout.split()

        # A new broker-2 container finds its logs on the named volume.
        _command([*compose, "rm", "-s", "-f", "broker-2"], 120, environment)
        _command([*compose, "up", "-d", "--no-build", "broker-2"], UP_TIMEOUT_SECONDS, environment)
        listing = _command([*compose, "exec", "-T", "broker-2", "ls", "/var/lib/kafkalite/data"], 60, environment)
        assert {f"compose-orders-{number}" for number in range(3)} <= set(listing.stdout.split())
        _wait_healthy(compose, environment, docker_daemon.host, 4)
        again = _script("kafkalite-console-consumer.sh", "--bootstrap-server", brokers[1], "--topic",
                        "compose-orders", "--from-beginning", "--max-messages", "3", "--timeout-ms", "30000")
        assert sorted(again.stdout.split()) == ["order-1", "order-2", "order-3"]
        print(f"compose stack: base image {base_seconds:.0f} s, build {build_seconds:.0f} s, "
              f"up until healthy {up_seconds:.0f} s")
    finally:
        _command([*compose, "down", "-v", "--remove-orphans", "--timeout", "30"], 180, environment, check=False)
