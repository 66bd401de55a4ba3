"""Client quotas on one real broker: quotas set with kafkalite-configs.sh hold a client id to its
byte rate (binary and JSON routes) and its request_percentage over both front ends while another
client on the same broker runs free. The broker
runs with ``zookeeper.set.acl=true`` and digest authentication, so the same broker shows that
its znodes are not writable by an unauthenticated ZooKeeper client.

The broker measures rates over ``quota.window.num=2`` windows of 1 s here. Kafka's default of 11
windows counts at least 10 s of history, so a fresh client gets ~10 s worth of quota up front
and the rate of a bounded run (a few seconds) says little; with 2 windows the credit is 1 s and a
7 s run settles on the quota (tests/unit/test_quota.py covers the 11-window arithmetic).
"""

from __future__ import annotations

import base64
import json
import re
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from kafkalite.client import KafkaConsumer, KafkaProducer
from tests.support import kafka_wire
from tests.support.cluster import ROOT, BrokerCluster, free_port

pytestmark = pytest.mark.integration
SCRIPTS = ROOT / "scripts"
QUOTA = 1_048_576  # producer_byte_rate: 1 MiB/s
RUN_SECONDS = 7.0
VALUE = b"q" * 32 * 1024
TOPIC = "quota-topic"
BROKER_DIGEST = "kafkalite-broker:broker-secret"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    """One broker with a PLAINTEXT and a SASL_PLAINTEXT listener (SCRAM-SHA-256 users)."""
    chroot = f"/quotas-{uuid.uuid4().hex[:8]}"
    brokers = BrokerCluster(tmp_path_factory.mktemp("quotas"), zookeeper.connect_string + chroot, size=1,
                            extra_properties={"quota.window.num": "2", "quota.window.size.seconds": "1",
                                              "zookeeper.set.acl": "true", "zookeeper.digest.auth": BROKER_DIGEST})
    sasl_port = free_port()
    brokers.per_broker_properties[1] = {
        "listeners": f"PLAINTEXT://127.0.0.1:{brokers.brokers[1].port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "SCRAM-SHA-256"}
    brokers.start()
    brokers.sasl_bootstrap = f"127.0.0.1:{sasl_port}"  # type: ignore[attr-defined]
    try:
        configs(brokers, "--alter", "--entity-type", "clients", "--entity-name", "throttled",
                "--add-config", f"producer_byte_rate={QUOTA}")
        configs(brokers, "--alter", "--entity-type", "clients", "--entity-name", "ck-throttled",
                "--add-config", f"producer_byte_rate={QUOTA}")
        configs(brokers, "--alter", "--entity-type", "clients", "--entity-name", "slow-reader",
                "--add-config", f"consumer_byte_rate={QUOTA}")
        deadline = time.monotonic() + 20
        while "slow-reader" not in configs(brokers, "--describe", "--entity-type", "clients").stdout:
            assert time.monotonic() < deadline, "the broker never saw the quotas"
            time.sleep(0.1)
        yield brokers
    finally:
        brokers.stop()
    assert brokers.error_lines() == []


def configs(cluster: BrokerCluster, *arguments: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(SCRIPTS / "kafkalite-configs.sh"), "--bootstrap-server", cluster.bootstrap,
                             *arguments], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result


def produce_for(send: Callable[[], int], finish: Callable[[], None], seconds: float,
                limit: int = 64 * 1024 * 1024) -> float:
    """Send for ``seconds`` (at most ``limit`` bytes), wait for everything to be acknowledged:
    bytes per second overall."""
    started = time.monotonic()
    sent = 0
    while time.monotonic() - started < seconds and sent < limit:
        sent += send()
    finish()
    return sent / (time.monotonic() - started)


def kafkalite_rate(cluster: BrokerCluster, client_id: str, rates: dict[str, float]) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, client_id=client_id, acks=1,
                             buffer_memory=512 * 1024, batch_size=64 * 1024, linger_ms=5)
    try:
        def send() -> int:
            producer.send(TOPIC, VALUE)
            return len(VALUE)
        rates[client_id] = produce_for(send, lambda: producer.flush(timeout=30), RUN_SECONDS)
    finally:
        producer.close()


def test_a_client_id_is_held_to_its_producer_byte_rate_and_another_is_not(cluster: BrokerCluster) -> None:
    rates: dict[str, float] = {}
    threads = [threading.Thread(target=kafkalite_rate, args=(cluster, client_id, rates))
               for client_id in ("throttled", "free")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert set(rates) == {"throttled", "free"}
    print(f"kafkalite producer rates (B/s): throttled {rates['throttled']:.0f}, free {rates['free']:.0f}")
    assert rates["throttled"] == pytest.approx(QUOTA, rel=0.2), rates
    assert rates["free"] > 3 * QUOTA, rates


def test_confluent_kafka_honours_throttle_time_over_the_kafka_protocol(cluster: BrokerCluster) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    throttles: list[int] = []

    def statistics(text: str) -> None:
        for broker in json.loads(text).get("brokers", {}).values():
            throttles.append(int(broker.get("throttle", {}).get("max", 0)))

    producer = confluent_kafka.Producer({
        "bootstrap.servers": cluster.bootstrap, "client.id": "ck-throttled", "acks": 1,
        "queue.buffering.max.kbytes": 512, "linger.ms": 5, "statistics.interval.ms": 500,
        "stats_cb": statistics})

    def send() -> int:
        try:
            producer.produce(TOPIC, VALUE)
        except BufferError:
            producer.poll(0.01)
            return 0
        producer.poll(0)
        return len(VALUE)

    def finish() -> None:
        assert producer.flush(30) == 0

    rate = produce_for(send, finish, RUN_SECONDS)
    producer.poll(0.6)
    print(f"confluent-kafka producer rate {rate:.0f} B/s, largest throttle_time_ms {max(throttles, default=0)}")
    assert rate == pytest.approx(QUOTA, rel=0.2)
    assert max(throttles, default=0) > 0, "no answer carried throttle_time_ms"


def test_a_consumer_is_held_to_its_consumer_byte_rate(cluster: BrokerCluster) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, client_id="filler", acks=1)
    try:
        for _ in range(16 * 1024 * 1024 // len(VALUE)):
            producer.send("quota-read", VALUE)
        producer.flush(timeout=30)
    finally:
        producer.close()
    # Fetches of at most 256 KiB: a fetch larger than a window's worth of quota is throttled
    # whole (its records dropped) more often than it gets through.
    consumer = KafkaConsumer("quota-read", bootstrap_servers=cluster.bootstrap, client_id="slow-reader",
                             auto_offset_reset="earliest", max_partition_fetch_bytes=256 * 1024)
    try:
        received = 0
        started = time.monotonic()
        while time.monotonic() - started < RUN_SECONDS:
            for records in consumer.poll(timeout_ms=200).values():
                received += sum(len(record.value) for record in records)
        rate = received / (time.monotonic() - started)
    finally:
        consumer.close()
    print(f"kafkalite consumer rate {rate:.0f} B/s")
    assert rate == pytest.approx(QUOTA, rel=0.2)
    with urllib.request.urlopen(f"http://{cluster.bootstrap.split(',')[0]}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    throttled = re.search(r'^kafkalite_server_quota_throttled_responses_total\{quota="consumer_byte_rate"\} (\S+)$',
                          metrics, re.MULTILINE)
    assert throttled is not None and float(throttled.group(1)) > 0


def kazoo(cluster: BrokerCluster, auth: str | None = None) -> KazooClient:
    client = KazooClient(hosts=cluster.zookeeper_connect, timeout=10,
                         auth_data=[("digest", auth)] if auth is not None else None)
    client.start(timeout=10)
    return client


def test_znodes_written_by_the_broker_are_readable_but_not_writable_without_its_credentials(
        cluster: BrokerCluster) -> None:
    configs(cluster, "--alter", "--entity-type", "users", "--entity-name", "carol",
            "--add-config", "producer_byte_rate=2048")
    anonymous = kazoo(cluster)
    try:
        registration, _ = anonymous.get("/brokers/ids/1")
        assert json.loads(registration)["port"] > 0
        assert anonymous.get_children("/brokers/ids") == ["1"]
        with pytest.raises(NoAuthError):
            anonymous.set("/brokers/ids/1", b"{}")
        with pytest.raises(NoAuthError):
            anonymous.delete("/brokers/ids/1")
        with pytest.raises(NoAuthError):
            anonymous.create("/brokers/topics/planted", b"{}")
        with pytest.raises(NoAuthError):  # credentials and user quotas: creator only, not even read
            anonymous.get("/config/users/carol")
        assert anonymous.get("/config/clients/throttled")[0]  # client quotas are readable
    finally:
        anonymous.stop()
        anonymous.close()
    broker_identity = kazoo(cluster, BROKER_DIGEST)
    try:
        assert json.loads(broker_identity.get("/config/users/carol")[0])["config"] == {"producer_byte_rate": "2048"}
    finally:
        broker_identity.stop()
        broker_identity.close()


def kafka_call(cluster: BrokerCluster, api_key: int, fields: dict[str, Any]) -> Any:
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(kafka_wire.request_frame(api_key, 1, 7, kafka_wire.request(api_key, 1, fields)))
        frame = connection.recv(4, socket.MSG_WAITALL)
        frame += connection.recv(int.from_bytes(frame, "big"), socket.MSG_WAITALL)
    return kafka_wire.read_response(frame, api_key, 1)[1]


def test_client_quotas_are_described_and_altered_over_the_kafka_protocol(cluster: BrokerCluster) -> None:
    altered = kafka_call(cluster, 49, {"entries": [{
        "entity": [{"entity_type": "client-id", "entity_name": "wire-client"}],
        "ops": [{"key": "consumer_byte_rate", "value": 4096.0, "remove": False}]}], "validate_only": False})
    assert [entry.error_code for entry in altered.entries] == [0]
    described = kafka_call(cluster, 48, {"components": [
        {"entity_type": "client-id", "match_type": 0, "match": "throttled"}], "strict": True})
    assert [([(item.entity_type, item.entity_name) for item in entry.entity],
             [(value.key, value.value) for value in entry.values]) for entry in described.entries] == [
        ([("client-id", "throttled")], [("producer_byte_rate", float(QUOTA))])]
    assert "consumer_byte_rate=4096" in configs(cluster, "--describe", "--entity-type", "clients",
                                                "--entity-name", "wire-client").stdout


def test_a_user_quota_follows_the_authenticated_principal_not_the_client_id(cluster: BrokerCluster) -> None:
    """``/config/users/quota-user`` throttles that SASL user; the same client id on the
    PLAINTEXT listener (User:ANONYMOUS) is not throttled."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    configs(cluster, "--alter", "--entity-type", "users", "--entity-name", "quota-user",
            "--add-config", "SCRAM-SHA-256=[password=quota-pw],producer_byte_rate=4096")

    def largest_throttle(options: dict[str, Any]) -> int:
        throttles: list[int] = []

        def statistics(text: str) -> None:
            for broker in json.loads(text).get("brokers", {}).values():
                throttles.append(int(broker.get("throttle", {}).get("max", 0)))

        producer = confluent_kafka.Producer({**options, "client.id": "shared-app", "acks": 1, "linger.ms": 0,
                                             "statistics.interval.ms": 200, "stats_cb": statistics})
        for _ in range(2):
            producer.produce(TOPIC, VALUE)
            assert producer.flush(30) == 0
        producer.poll(0.5)
        return max(throttles, default=0)

    sasl = {"bootstrap.servers": cluster.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",  # type: ignore[attr-defined]
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "quota-user", "sasl.password": "quota-pw"}
    assert largest_throttle(sasl) > 0
    assert largest_throttle({"bootstrap.servers": cluster.bootstrap}) == 0


def set_client_quota(cluster: BrokerCluster, client_id: str, quota: str) -> None:
    """Set ``quota`` (``key=value,...``) for ``client_id`` and wait until the broker describes it."""
    configs(cluster, "--alter", "--entity-type", "clients", "--entity-name", client_id, "--add-config", quota)
    deadline = time.monotonic() + 20
    while not all(item in configs(cluster, "--describe", "--entity-type", "clients", "--entity-name",
                                  client_id).stdout for item in quota.split(",")):
        assert time.monotonic() < deadline, f"the broker never described {quota} for {client_id}"
        time.sleep(0.1)


def _metadata_throttles(cluster: BrokerCluster, client_id: str, count: int) -> list[int]:
    """The throttle_time_ms of ``count`` Metadata answers to ``client_id`` on one connection."""
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    throttles: list[int] = []
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        for correlation_id in range(count):
            connection.sendall(kafka_wire.request_frame(3, 9, correlation_id, kafka_wire.metadata_request(9, None),
                                                        client_id=client_id))
            frame = connection.recv(4, socket.MSG_WAITALL)
            frame += connection.recv(int.from_bytes(frame, "big"), socket.MSG_WAITALL)
            answer = kafka_wire.read_response(frame, 3, 9)[1]
            throttles.append(int(answer.throttle_time.total_seconds() * 1000))
    return throttles


def test_request_percentage_throttles_a_busy_client_on_both_front_ends_and_not_another(
        cluster: BrokerCluster) -> None:
    """``request_percentage=0.01`` allows 0.1 ms of broker time per second: a client id that sends
    Metadata requests back to back is answered with throttle_time_ms (Kafka protocol) or held
    with a Throttle-Time-Ms header (HTTP); another client id on the same broker never is."""
    set_client_quota(cluster, "busy-client", "request_percentage=0.01")
    busy = _metadata_throttles(cluster, "busy-client", 3)
    assert max(busy) > 0, busy
    assert max(busy) <= 1000, busy  # a request throttle is capped at one quota window (1 s here)
    assert _metadata_throttles(cluster, "free-client", 3) == [0] * 3

    def http_throttles(agent: str) -> list[int]:
        throttles = []
        for _ in range(3):
            request = urllib.request.Request(f"http://{cluster.bootstrap.split(',')[0]}/v1/metadata",
                                             headers={"User-Agent": agent})
            with urllib.request.urlopen(request, timeout=30) as response:
                throttles.append(int(response.headers.get("Throttle-Time-Ms", "0")))
        return throttles

    assert max(http_throttles("kafkalite/busy-client")) > 0
    assert http_throttles("kafkalite/free-client") == [0] * 3


def test_the_json_records_routes_count_against_the_byte_rates(cluster: BrokerCluster) -> None:
    set_client_quota(cluster, "json-writer", "producer_byte_rate=1024,consumer_byte_rate=1024")
    address = cluster.bootstrap.split(",")[0]
    value = base64.b64encode(b"j" * 4096).decode()

    def call(method: str, path: str, agent: str, body: Any = None) -> tuple[Any, int]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://{address}{path}", data=data, method=method,
                                         headers={"User-Agent": agent, "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read()), int(response.headers.get("Throttle-Time-Ms", "0"))

    produced, throttle = call("POST", f"/v1/topics/{TOPIC}/records", "kafkalite/json-writer",
                              {"records": [{"value": value, "partition": 0}], "acks": 1})
    assert throttle > 0, produced  # 4 KiB against 1 KiB/s with one second of credit
    offset = produced["offsets"][0]["offset"]
    path = f"/v1/topics/{TOPIC}/partitions/0/records?offset={offset}"
    fetched, throttle = call("GET", path, "kafkalite/json-writer")
    assert throttle > 0 and fetched["records"], fetched
    assert call("GET", path, "kafkalite/json-free")[1] == 0
