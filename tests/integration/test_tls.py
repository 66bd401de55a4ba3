"""TLS listeners on real brokers: two brokers with a PLAINTEXT listener (the test harness's
health checks) and an SSL one that is also the inter-broker listener, so follower fetches and
forwarded calls run over TLS. kafkalite's clients (HTTP + WebSocket channel over TLS),
confluent-kafka and kcat (Kafka protocol over TLS) produce and consume on the SSL listener; a
plaintext client, a client trusting another CA and a client checking a host name the
certificate does not carry are refused before anything is served; a setting the broker cannot
honour stops it with an error naming the setting."""

from __future__ import annotations

import asyncio
import io
import shutil
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kafkalite import KafkaConsumer, KafkaProducer, TopicPartition
from kafkalite.errors import KafkaConnectionError
from kafkalite.security import certs, tls
from kafkalite.transport import AsyncTransport
from tests.support.cluster import ROOT, BrokerCluster, free_port

pytestmark = pytest.mark.integration


@dataclass
class TlsCluster:
    brokers: BrokerCluster
    ssl_ports: dict[int, int]
    ca: Path
    other_ca: Path
    client_cert: Path
    client_key: Path

    @property
    def bootstrap(self) -> str:
        return ",".join(f"localhost:{port}" for port in self.ssl_ports.values())


def _topic(cluster: TlsCluster) -> str:
    name = f"tls-{uuid.uuid4().hex[:10]}"
    cluster.brokers.create_topic(name, partitions=2, replication_factor=2)
    cluster.brokers.wait_in_sync(name)
    return name


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[TlsCluster]:  # type: ignore[no-untyped-def]
    directory = tmp_path_factory.mktemp("tls-pki")
    ca = certs.make_ca(directory)
    other_ca = certs.make_ca(directory, common_name="another-ca", name="other-ca")
    # valid for "localhost" only: 127.0.0.1 is a name the certificate does not carry
    server = certs.make_server_certificate(ca, directory, hostnames=["localhost"], password="broker-secret")
    client = certs.make_client_certificate(ca, directory, "alice")
    properties = {"security.inter.broker.protocol": "SSL", "ssl.keystore.type": "PEM",
                  "ssl.keystore.location": str(server.keystore_path), "ssl.key.password": "broker-secret",
                  "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.certificate_path),
                  "ssl.client.auth": "requested", "min.insync.replicas": "2"}
    connect = f"{zookeeper.connect_string}/tls-{uuid.uuid4().hex[:8]}"
    brokers = BrokerCluster(tmp_path_factory.mktemp("tls"), connect, size=2, extra_properties=properties)
    ssl_ports = {broker_id: free_port() for broker_id in brokers.brokers}
    for broker_id, broker in brokers.brokers.items():
        brokers.per_broker_properties[broker_id] = {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{ssl_ports[broker_id]}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SSL://localhost:{ssl_ports[broker_id]}"}
    brokers.start()
    try:
        yield TlsCluster(brokers, ssl_ports, ca.certificate_path, other_ca.certificate_path,
                         client.certificate_path, client.key_path)
    finally:
        brokers.stop()
    assert brokers.error_lines() == []


def test_kafkalite_clients_over_tls_with_replication_over_tls(cluster: TlsCluster) -> None:
    topic = _topic(cluster)
    options = {"bootstrap_servers": cluster.bootstrap, "security_protocol": "SSL", "ssl_cafile": str(cluster.ca)}
    producer = KafkaProducer(acks="all", ssl_certfile=str(cluster.client_cert), ssl_keyfile=str(cluster.client_key),
                             **options)
    try:
        futures = [producer.send(topic, key=f"k{index % 5}".encode(), value=f"v{index}".encode())
                   for index in range(200)]
        producer.flush(30)
        offsets = [future.get(timeout=30) for future in futures]
    finally:
        producer.close()
    assert len(offsets) == 200
    # acks=all with min.insync.replicas=2: the follower fetched every record over TLS
    assert all(len(item["isr"]) == 2 for item in cluster.brokers.partitions(topic))
    consumer = KafkaConsumer(consumer_timeout_ms=10_000, **options)
    try:
        partitions = [TopicPartition(topic, number) for number in range(2)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        values = []
        for record in consumer:
            values.append(record.value)
            if len(values) == 200:
                break
    finally:
        consumer.close()
    assert sorted(values) == sorted(f"v{index}".encode() for index in range(200))


@pytest.mark.parametrize("listener", ["SSL", "PLAINTEXT"])
def test_fetch_answers_of_many_pieces_arrive_whole(cluster: TlsCluster, listener: str) -> None:
    """Answers longer than a write piece (the broker writes them piece by piece) reach the
    consumer byte for byte, over TLS and plaintext alike."""
    topic = _topic(cluster)
    options: dict[str, object] = ({"bootstrap_servers": cluster.bootstrap, "security_protocol": "SSL",
                                   "ssl_cafile": str(cluster.ca)} if listener == "SSL"
                                  else {"bootstrap_servers": cluster.brokers.bootstrap})
    values = [(b"%06d" % index) * 1700 for index in range(900)]  # about 9 MB in 10 KiB values
    producer = KafkaProducer(acks="all", linger_ms=20, batch_size=1 << 20, **options)
    try:
        for index, value in enumerate(values):
            producer.send(topic, value=value, partition=index % 2)
        producer.flush(60)
    finally:
        producer.close()
    consumer = KafkaConsumer(consumer_timeout_ms=20_000, max_partition_fetch_bytes=4 << 20,
                             fetch_max_bytes=8 << 20, **options)
    try:
        partitions = [TopicPartition(topic, number) for number in range(2)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        got: dict[int, list[bytes]] = {0: [], 1: []}
        for record in consumer:
            got[record.partition].append(record.value)
            if len(got[0]) + len(got[1]) == len(values):
                break
    finally:
        consumer.close()
    assert got[0] == values[0::2] and got[1] == values[1::2]


def test_confluent_kafka_over_tls(cluster: TlsCluster) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = _topic(cluster)
    settings = {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(cluster.ca)}
    producer = confluent_kafka.Producer({**settings, "acks": "all", "enable.idempotence": True})
    delivered: list[bytes] = []
    failures: list[str] = []
    for index in range(50):
        producer.produce(topic, value=f"c{index}".encode(), on_delivery=lambda error, message: (
            failures.append(str(error)) if error is not None else delivered.append(message.value())))
    assert producer.flush(30) == 0
    assert failures == [] and len(delivered) == 50
    consumer = confluent_kafka.Consumer({**settings, "group.id": f"tls-{uuid.uuid4().hex[:6]}",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, number, confluent_kafka.OFFSET_BEGINNING)
                     for number in range(2)])
    seen: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(seen) < 50 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                seen.append(message.value())
    finally:
        consumer.close()
    assert sorted(seen) == sorted(delivered)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_over_tls(cluster: TlsCluster) -> None:
    topic = _topic(cluster)
    common = ["kcat", "-b", cluster.bootstrap, "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={cluster.ca}",
              "-t", topic]
    subprocess.run([*common, "-P", "-p", "0"], input=b"one\ntwo\n", check=True, timeout=30)
    read = subprocess.run([*common, "-C", "-p", "0", "-o", "beginning", "-c", "2", "-e"], capture_output=True,
                          check=True, timeout=30)
    assert read.stdout.split() == [b"one", b"two"]


def _raw_answer(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(payload)
        received = b""
        while chunk := connection.recv(4096):
            received += chunk
    return received


def test_plaintext_clients_on_the_tls_port_get_nothing(cluster: TlsCluster) -> None:
    port = next(iter(cluster.ssl_ports.values()))
    http_answer = _raw_answer(port, b"GET /v1/metadata HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert b"HTTP/1.1" not in http_answer and b"brokers" not in http_answer
    api_versions = b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x01\x00\x04test"
    kafka_answer = _raw_answer(port, api_versions)
    assert len(kafka_answer) < 16  # at most a TLS alert, then the connection is closed
    # the plaintext kafkalite client is refused too (no fallback)
    with pytest.raises(KafkaConnectionError):
        _transport_get(tls_context=None, address=f"localhost:{port}")


def _transport_get(tls_context: ssl.SSLContext | None, address: str) -> bytes:
    """GET /health with kafkalite's transport (TLS with ``tls_context``, plain TCP without)."""
    async def call() -> bytes:
        transport = AsyncTransport(request_timeout_ms=5000, connect_timeout_ms=5000, ssl_context=tls_context)
        try:
            return await transport.request(address, "GET", "/health")
        finally:
            await transport.close()
    return asyncio.run(call())


def test_wrong_ca_and_wrong_host_name_are_refused(cluster: TlsCluster) -> None:
    port = next(iter(cluster.ssl_ports.values()))
    assert _transport_get(tls.client_context(ssl_cafile=str(cluster.ca)), f"localhost:{port}")
    with pytest.raises(KafkaConnectionError, match="certificate verify failed"):
        _transport_get(tls.client_context(ssl_cafile=str(cluster.other_ca)), f"localhost:{port}")
    with pytest.raises(KafkaConnectionError, match="certificate verify failed"):
        _transport_get(tls.client_context(ssl_cafile=str(cluster.ca)), f"127.0.0.1:{port}")
    # without host-name checks the same address is served
    assert _transport_get(tls.client_context(ssl_cafile=str(cluster.ca), ssl_check_hostname=False),
                          f"127.0.0.1:{port}")


def test_a_setting_the_broker_cannot_honour_stops_it(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(f"broker.id=9\nlisteners=SSL://127.0.0.1:{free_port()}\nzookeeper.connect=127.0.0.1:1\n"
                      f"log.dirs={tmp_path / 'data'}\nssl.keystore.type=JKS\n"
                      "ssl.keystore.location=/etc/kafka/broker.jks\n")
    result = subprocess.run([sys.executable, "-m", "kafkalite.broker", str(config)], cwd=ROOT, capture_output=True,
                            timeout=60)
    output = (result.stdout + result.stderr).decode(errors="replace")
    assert result.returncode == 2, output
    assert "ssl.keystore.type=JKS is not supported" in output
    assert "Traceback" not in output


def test_tools_honour_command_config_over_tls(cluster: TlsCluster, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from kafkalite.tools import console_consumer, console_producer, topics
    from kafkalite.tools.common import EXIT_FAILED, run_cli

    client_properties = tmp_path / "client.properties"  # confluent-kafka's names, as admin.properties has them
    client_properties.write_text(f"security.protocol=SSL\nssl.ca.location={cluster.ca}\n")
    topic = f"tls-tool-{uuid.uuid4().hex[:8]}"
    common = ["--bootstrap-server", cluster.bootstrap]
    assert topics.main([*common, "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "2",
                        "--command-config", str(client_properties)]) == 0
    cluster.brokers.wait_in_sync(topic)
    assert console_producer.main([*common, "--topic", topic, "--producer.config", str(client_properties)],
                                 stdin=io.StringIO("alpha\nbeta\n")) == 0
    output = io.StringIO()
    assert console_consumer.main([*common, "--topic", topic, "--from-beginning", "--max-messages", "2",
                                  "--timeout-ms", "20000", "--consumer.config", str(client_properties)],
                                 out=output) == 0
    assert output.getvalue().split() == ["alpha", "beta"]
    # without the file the tool speaks plaintext to the TLS port and is refused: an error, not a hang
    assert run_cli(topics.main, [*common, "--list"]) == EXIT_FAILED
    assert "no broker answered" in capsys.readouterr().err


def test_http_metadata_advertises_the_listener_the_client_came_in_on(cluster: TlsCluster) -> None:
    from kafkalite import KafkaAdminClient

    plain_ports = {broker_id: broker.port for broker_id, broker in cluster.brokers.brokers.items()}
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, security_protocol="SSL",
                             ssl_cafile=str(cluster.ca))
    try:
        over_tls = {(item["broker_id"], item["host"], item["port"]) for item in admin.describe_cluster()["brokers"]}
    finally:
        admin.close()
    assert over_tls == {(broker_id, "localhost", port) for broker_id, port in cluster.ssl_ports.items()}
    # a plaintext client on the PLAINTEXT listener is told plaintext addresses (the inter-broker
    # listener is SSL) and produces and consumes, group coordinator included
    topic = _topic(cluster)
    plain = ",".join(f"127.0.0.1:{port}" for port in plain_ports.values())
    producer = KafkaProducer(bootstrap_servers=plain, acks="all")
    try:
        producer.send(topic, b"plain").get(30)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=plain, group_id=f"plain-{uuid.uuid4().hex[:6]}",
                             auto_offset_reset="earliest", consumer_timeout_ms=15_000)
    try:
        assert next(iter(consumer)).value == b"plain"
    finally:
        consumer.close()
