"""Real broker processes on loopback, for the benchmarks and the integration tests.

:class:`BrokerCluster` writes a ``server.properties`` per broker (free loopback ports, its own
log directory, a ZooKeeper chroot of its own), starts ``python -m kafkalite.broker`` processes
(with the interpreter and the ``kafkalite`` package of this process) and waits until every
broker is registered and a controller is elected. Brokers can be stopped gracefully (SIGTERM),
killed (SIGKILL), frozen (SIGSTOP) and restarted with the same id and data. A small synchronous
HTTP helper (:meth:`BrokerCluster.call`) talks to the JSON API. Processes never outlive this
interpreter (atexit cleanup). The settings shorten Kafka's timeouts so failures are seen
quickly; ``extra_properties`` overrides them.

Concurrency: a cluster object is driven by one thread at a time (its owner's).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self

import kafkalite
from kafkalite.local.zookeeper import free_ports

#: The directory holding the ``kafkalite`` package this process imports: the broker
#: processes get it as PYTHONPATH, so they run the same code (a checkout or site-packages).
PACKAGE_PARENT = Path(kafkalite.__file__).resolve().parents[1]
_LIVE: set[subprocess.Popen[bytes]] = set()


def _cleanup() -> None:
    for process in list(_LIVE):
        if process.poll() is None:
            process.kill()
            process.wait()


atexit.register(_cleanup)


def free_port() -> int:
    """A loopback port that was free a moment ago, below the ephemeral range (see free_ports)."""
    return free_ports(1)[0]


class HttpError(Exception):
    """A non-2xx answer of :func:`http`: its status and (parsed when JSON) body."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


def http(address: str, method: str, path: str, body: Any = None, raw: bytes | None = None,
         timeout: float = 30.0, content_type: str = "application/json",
         headers: Mapping[str, str] | None = None) -> Any:
    """One request; JSON in and out (``raw`` sends bytes; ``headers`` are added). Non-2xx raises HttpError."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(f"http://{address}{path}", data=data, method=method,
                                     headers={"Content-Type": content_type, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = response.read()
            if response.headers.get("Content-Type", "").startswith("application/json"):
                return json.loads(payload)
            return payload
    except urllib.error.HTTPError as exc:
        payload = exc.read()
        try:
            parsed: Any = json.loads(payload)
        except ValueError:
            parsed = payload
        raise HttpError(exc.code, parsed) from None


class BrokerProcess:
    """One broker of a :class:`BrokerCluster`: its config, data directory, log and process."""

    def __init__(self, cluster: BrokerCluster, broker_id: int, port: int) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.port = port
        self.directory = cluster.directory / f"broker-{broker_id}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log_path = self.directory / "broker.log"
        self.config_path = self.directory / "server.properties"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def write_config(self) -> None:
        properties = {
            "broker.id": str(self.broker_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.directory / "data"),
            "zookeeper.connect": self.cluster.zookeeper_connect,
            "zookeeper.session.timeout.ms": str(self.cluster.session_timeout_ms),
            "zookeeper.connection.timeout.ms": "10000",
            "num.partitions": "1",
            "default.replication.factor": str(min(3, self.cluster.size)),
            "offsets.topic.replication.factor": str(min(3, self.cluster.size)),
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": str(min(3, self.cluster.size)),
            "transaction.state.log.min.isr": str(min(2, self.cluster.size)),
            "transaction.state.log.num.partitions": "10",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            "replica.lag.time.max.ms": "6000",
            "replica.fetch.wait.max.ms": "200",
            "replica.fetch.backoff.ms": "200",
            "controlled.shutdown.retry.backoff.ms": "200",
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000",
            "log.retention.check.interval.ms": "1000",
            "auto.leader.rebalance.enable": "false",
        }
        properties.update(self.cluster.extra_properties)
        properties.update(self.cluster.per_broker_properties.get(self.broker_id, {}))
        self.config_path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))

    def start(self) -> None:
        self.write_config()
        environment = dict(os.environ, PYTHONPATH=str(PACKAGE_PARENT))
        with open(self.log_path, "ab") as log_file:  # the broker keeps its own descriptor
            self.process = subprocess.Popen([sys.executable, "-m", "kafkalite.broker", str(self.config_path)],
                                            cwd=self.directory, stdout=log_file, stderr=subprocess.STDOUT,
                                            env=environment)
        log_file.close()
        _LIVE.add(self.process)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise RuntimeError(f"broker {self.broker_id} exited:\n{self.log_tail()}")
            try:
                http(self.address, "GET", "/health", timeout=2)
                return
            except (OSError, HttpError):
                time.sleep(0.1)
        raise TimeoutError(f"broker {self.broker_id} not ready after {timeout} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (graceful, controlled shutdown) and wait."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        _LIVE.discard(self.process)
        return code

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process is not None:
            _LIVE.discard(self.process)

    def freeze(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class BrokerCluster:
    """N broker processes against one ZooKeeper connect string (with its own chroot)."""

    def __init__(self, directory: Path, zookeeper_connect: str, size: int = 3, *, session_timeout_ms: int = 6000,
                 extra_properties: dict[str, str] | None = None,
                 per_broker_properties: dict[int, dict[str, str]] | None = None) -> None:
        self.directory = directory
        self.zookeeper_connect = zookeeper_connect
        self.size = size
        self.session_timeout_ms = session_timeout_ms
        self.extra_properties = dict(extra_properties or {})
        self.per_broker_properties = dict(per_broker_properties or {})
        self.brokers = {broker_id: BrokerProcess(self, broker_id, free_port()) for broker_id in range(1, size + 1)}

    def start(self, timeout: float = 60.0) -> Self:
        for broker in self.brokers.values():
            broker.start()
        for broker in self.brokers.values():
            broker.wait_ready(timeout)
        self.wait_for(lambda: len(self.describe()["brokers"]) == self.size and self.controller_id() > 0,
                      timeout, "all brokers registered and a controller elected")
        return self

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.kill() if not broker.alive else None
        for broker in self.brokers.values():
            if broker.alive:
                try:
                    broker.stop(timeout=30)
                except subprocess.TimeoutExpired:
                    broker.kill()

    def kill_all(self) -> None:
        for broker in self.brokers.values():
            broker.kill()

    @property
    def bootstrap(self) -> str:
        return ",".join(broker.address for broker in self.brokers.values())

    def any_live(self) -> BrokerProcess:
        for broker in self.brokers.values():
            if broker.alive:
                return broker
        raise RuntimeError("no live broker")

    def call(self, method: str, path: str, body: Any = None, broker_id: int | None = None, **kwargs: Any) -> Any:
        broker = self.brokers[broker_id] if broker_id is not None else self.any_live()
        return http(broker.address, method, path, body, **kwargs)

    def describe(self, broker_id: int | None = None) -> Any:
        return self.call("GET", "/v1/admin/describe_cluster", broker_id=broker_id, timeout=5)

    def controller_id(self, broker_id: int | None = None) -> int:
        try:
            return int(self.describe(broker_id)["controller_id"])
        except (OSError, HttpError):
            return -1

    def metadata(self, topics: list[str] | None = None, broker_id: int | None = None) -> Any:
        return self.call("POST", "/v1/metadata", {"topics": topics}, broker_id=broker_id, timeout=10)

    def partitions(self, topic: str, broker_id: int | None = None) -> list[dict[str, Any]]:
        topics = self.metadata([topic], broker_id)["topics"]
        return sorted(topics[0]["partitions"], key=lambda item: item["partition"])

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     configs: dict[str, str] | None = None) -> Any:
        answer = self.call("POST", "/v1/admin/create_topics", {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": replication_factor,
            "configs": configs or {}}], "timeout_ms": 30000})
        entry = answer["topics"][0]
        if entry["error_code"] != 0:
            raise HttpError(200, entry)
        return entry

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                value = predicate()
                if value:
                    return value
            except (OSError, HttpError, KeyError, IndexError) as exc:
                last_error = exc
            time.sleep(0.1)
        tails = "\n".join(f"--- broker {broker.broker_id}\n{broker.log_tail(15)}" for broker in self.brokers.values())
        raise TimeoutError(f"timed out waiting for {what} (last error: {last_error})\n{tails}")

    def wait_in_sync(self, topic: str, timeout: float = 30.0, broker_id: int | None = None) -> list[dict[str, Any]]:
        def in_sync() -> list[dict[str, Any]] | None:
            partitions = self.partitions(topic, broker_id)
            if partitions and all(item["leader"] >= 0 and sorted(item["isr"]) == sorted(item["replicas"])
                                  for item in partitions):
                return partitions
            return None
        return self.wait_for(in_sync, timeout, f"{topic} fully in sync")  # type: ignore[no-any-return]


__all__ = ["PACKAGE_PARENT", "BrokerCluster", "BrokerProcess", "HttpError", "free_port", "http"]
