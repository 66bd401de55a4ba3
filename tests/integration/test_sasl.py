"""SASL authentication and the users/clients config entities on one real broker: credentials
created with kafkalite-configs.sh and kept in ZooKeeper in Kafka's format."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from kafkalite.client import KafkaAdminClient
from kafkalite.security import scram
from tests.support import kafka_wire as wire
from tests.support.cluster import ROOT, BrokerCluster, free_port

pytestmark = pytest.mark.integration
SCRIPTS = ROOT / "scripts"
USER, PASSWORD = "carol", "carol-secret"
TOPIC = "secured"


class SaslBroker:
    def __init__(self, cluster: BrokerCluster, zookeeper_hosts: str, chroot: str) -> None:
        self.cluster = cluster
        self.zookeeper_hosts = zookeeper_hosts
        self.chroot = chroot
        self.plain = cluster.bootstrap.split(",")[0]
        self.sasl_port = 0

    def sasl_addresses(self) -> list[str]:
        return [f"127.0.0.1:{properties['listeners'].rsplit(':', 1)[1]}"
                for properties in self.cluster.per_broker_properties.values()]

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def read_znode(self, path: str) -> bytes:
        client = KazooClient(hosts=self.zookeeper_hosts + self.chroot, timeout=10)
        client.start(timeout=10)
        try:
            data, _ = client.get(path)
            return bytes(data)
        finally:
            client.stop()
            client.close()


ADMIN_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
              'password="admin-secret";')


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[SaslBroker]:  # type: ignore[no-untyped-def]
    """Two brokers, each with a PLAINTEXT and a SASL_PLAINTEXT listener; they replicate over SASL
    (SCRAM-SHA-512 as ``admin``, whose credential is written to ZooKeeper before they start, as
    Kafka's documentation does it)."""
    chroot = f"/sasl-{uuid.uuid4().hex[:8]}"
    bootstrap_admin = KazooClient(hosts=zookeeper.connect_string, timeout=10)
    bootstrap_admin.start(timeout=10)
    try:
        bootstrap_admin.create(f"{chroot}/config/users/admin", json.dumps({"version": 1, "config": {
            "SCRAM-SHA-512": scram.new_credential("SCRAM-SHA-512", "admin-secret").to_text()}}).encode(),
            makepath=True)
    finally:
        bootstrap_admin.stop()
        bootstrap_admin.close()
    cluster = BrokerCluster(tmp_path_factory.mktemp("sasl"), f"{zookeeper.connect_string}{chroot}", size=2)
    sasl_ports = {broker_id: free_port() for broker_id in cluster.brokers}
    for broker_id, process in cluster.brokers.items():
        cluster.per_broker_properties[broker_id] = {
            "listeners": f"PLAINTEXT://127.0.0.1:{process.port},SASL_PLAINTEXT://127.0.0.1:{sasl_ports[broker_id]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": ADMIN_JAAS}
    cluster.start()
    try:
        handle = SaslBroker(cluster, zookeeper.connect_string, chroot)
        handle.sasl_port = sasl_ports[min(sasl_ports)]
        admin = KafkaAdminClient(bootstrap_servers=handle.plain)
        try:
            admin.alter_entity_configs(USER, None, {
                mechanism: scram.new_credential(mechanism, PASSWORD).to_text() for mechanism in scram.SCRAM_MECHANISMS})
        finally:
            admin.close()
        cluster.create_topic(TOPIC, partitions=1, replication_factor=2)
        cluster.wait_in_sync(TOPIC, timeout=30)  # the follower fetches over SASL with the broker's credentials
        yield handle
    finally:
        cluster.stop()
    assert cluster.error_lines() == []


def configs(*arguments: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(SCRIPTS / "kafkalite-configs.sh"), *arguments], capture_output=True, text=True,
                            timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_scram_credentials_made_by_the_tool_are_stored_as_kafka_stores_them(broker: SaslBroker) -> None:
    added = configs("--bootstrap-server", broker.plain, "--alter", "--entity-type", "users", "--entity-name",
                    "alice", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret],"
                    "SCRAM-SHA-512=[password=alice-secret]")
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == "Completed updating config for user alice."
    document = json.loads(broker.read_znode("/config/users/alice"))
    assert document["version"] == 1 and set(document["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert b"alice-secret" not in broker.read_znode("/config/users/alice")
    sha256 = scram.ScramCredential.from_text(document["config"]["SCRAM-SHA-256"])
    assert sha256.iterations == 8192 and scram.verify_password("SCRAM-SHA-256", sha256, "alice-secret")
    assert document["config"]["SCRAM-SHA-512"].endswith(",iterations=4096")
    described = configs("--bootstrap-server", broker.plain, "--describe", "--entity-type", "users",
                        "--entity-name", "alice")
    assert described.returncode == 0, described.stderr
    assert described.stdout.strip() == ("SCRAM credential configs for user-principal 'alice' are "
                                        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096")
    assert "salt" not in described.stdout + described.stderr


def test_user_and_client_entities_with_defaults_and_notifications(broker: SaslBroker) -> None:
    added = configs("--bootstrap-server", broker.plain, "--alter", "--entity-type", "users", "--entity-name",
                    "bob", "--entity-type", "clients", "--entity-default", "--add-config", "producer_byte_rate=1024")
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == "Completed updating config for user bob, default client."
    assert json.loads(broker.read_znode("/config/users/bob/clients/<default>")) == {
        "version": 1, "config": {"producer_byte_rate": "1024"}}
    assert configs("--bootstrap-server", broker.plain, "--alter", "--entity-type", "clients", "--entity-name",
                   "c1", "--add-config", "consumer_byte_rate=2048").returncode == 0
    described = configs("--bootstrap-server", broker.plain, "--describe", "--entity-type", "clients")
    assert described.stdout.strip() == "Quota configs for client-id 'c1' are consumer_byte_rate=2048"
    refused = configs("--bootstrap-server", broker.plain, "--alter", "--entity-type", "clients", "--entity-name",
                      "c1", "--add-config", "SCRAM-SHA-256=[password=x]")
    assert refused.returncode == 1 and "SCRAM-SHA-256" in refused.stderr
    bad = configs("--bootstrap-server", broker.plain, "--alter", "--entity-type", "users", "--entity-name",
                  "bob", "--add-config", "SCRAM-SHA-256=[iterations=10,password=x]")
    assert bad.returncode == 2 and "iterations" in bad.stderr


def _exchange(connection: socket.socket, api_key: int, version: int, body: Any, correlation_id: int = 1) -> Any:
    connection.sendall(wire.request_frame(api_key, version, correlation_id, body))
    received = b""
    while len(received) < 4 or len(received) < 4 + struct.unpack_from(">i", received)[0]:
        chunk = connection.recv(65536)
        if not chunk:
            return None  # closed by the broker
        received += chunk
    return wire.read_response(received, api_key, version)[1]


def _closed(connection: socket.socket) -> bool:
    connection.settimeout(10)
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_confluent_kafka_produces_and_consumes_over_sasl(broker: SaslBroker, mechanism: str) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    security = {"bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": PASSWORD}
    producer = confluent_kafka.Producer({**security, "acks": "all"})
    values = [f"{mechanism}-{index}".encode() for index in range(3)]
    for value in values:
        producer.produce(TOPIC, value=value)
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({**security, "group.id": f"g-{mechanism}", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    received: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while not set(values) <= set(received) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received.append(message.value())
    finally:
        consumer.close()
    assert set(values) <= set(received)


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("SCRAM-SHA-512", USER, "wrong"), ("SCRAM-SHA-256", "nobody", PASSWORD), ("PLAIN", USER, "wrong"),
    ("PLAIN", "nobody", "x")])
def test_wrong_password_and_unknown_user_are_refused_and_nothing_is_served(
        broker: SaslBroker, mechanism: str, user: str, password: str) -> None:
    with socket.create_connection(("127.0.0.1", broker.sasl_port), timeout=10) as connection:
        handshake = _exchange(connection, 17, 1, wire.request(17, 1, {"mechanism": mechanism}))
        assert handshake.error_code == 0 and mechanism in handshake.mechanisms
        if mechanism == "PLAIN":
            token = scram.plain_token(user, password)
        else:
            client = scram.ScramClient(mechanism, user, password)
            first = _exchange(connection, 36, 2, wire.request(36, 2, {"auth_bytes": client.client_first()}), 2)
            assert first.error_code == 0
            token = client.client_final(first.auth_bytes)
        answer = _exchange(connection, 36, 2, wire.request(36, 2, {"auth_bytes": token}), 3)
        assert answer.error_code == 58 and answer.error_message
        assert _closed(connection)


def test_requests_before_authentication_close_the_connection(broker: SaslBroker) -> None:
    with socket.create_connection(("127.0.0.1", broker.sasl_port), timeout=10) as connection:
        versions = _exchange(connection, 18, 3, wire.request(18, 3, {"client_software_name": "t",
                                                                     "client_software_version": "1"}))
        assert versions.error_code == 0
        assert _exchange(connection, 3, 12, wire.metadata_request(12, None), 2) is None
    with socket.create_connection(("127.0.0.1", broker.sasl_port), timeout=10) as connection:
        unsupported = _exchange(connection, 17, 1, wire.request(17, 1, {"mechanism": "GSSAPI"}))
        assert unsupported.error_code == 33
        assert set(unsupported.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert _closed(connection)
    with socket.create_connection(("127.0.0.1", broker.sasl_port), timeout=10) as connection:
        assert _exchange(connection, 17, 1, wire.request(17, 1, {"mechanism": "PLAIN"})).error_code == 0
        answer = _exchange(connection, 36, 2, wire.request(36, 2, {"auth_bytes": scram.plain_token(USER, PASSWORD)}))
        assert answer.error_code == 0
        metadata = _exchange(connection, 3, 12, wire.metadata_request(12, None), 3)
        assert TOPIC in {topic.name for topic in metadata.topics}


def test_kafkalite_clients_authenticate_over_http_and_its_channel(broker: SaslBroker) -> None:
    from kafkalite.client import KafkaConsumer, KafkaProducer, TopicPartition

    security = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_plain_username": USER, "sasl_plain_password": PASSWORD}
    producer = KafkaProducer(bootstrap_servers=broker.sasl_bootstrap, **security)
    try:
        metadata = producer.send(TOPIC, value=b"over-http").get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.sasl_bootstrap, enable_auto_commit=False, **security)
    try:
        partition = TopicPartition(TOPIC, 0)
        consumer.assign([partition])
        consumer.seek(partition, metadata.offset)
        records = consumer.poll(timeout_ms=10_000, max_records=1)
        assert [record.value for record in records.get(partition, [])] == [b"over-http"]
    finally:
        consumer.close()


def test_http_without_or_with_wrong_credentials_is_refused_with_401(broker: SaslBroker) -> None:
    import urllib.error
    import urllib.request

    from kafkalite.errors import SaslAuthenticationFailedError
    from kafkalite.transport import basic_authorization

    base = f"http://{broker.sasl_bootstrap}"
    for authorization in (None, basic_authorization(USER, "wrong"), basic_authorization("nobody", PASSWORD),
                          "Bearer token"):
        request = urllib.request.Request(f"{base}/v1/metadata")
        if authorization is not None:
            request.add_header("Authorization", authorization)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
        body = json.loads(refused.value.read())
        assert body["error"] == "SASL_AUTHENTICATION_FAILED" and body["error_code"] == 58
        assert "topics" not in body
    with urllib.request.urlopen(f"{base}/health", timeout=10) as health:
        assert health.status == 200
    request = urllib.request.Request(f"{base}/v1/metadata")
    request.add_header("Authorization", basic_authorization(USER, PASSWORD))
    with urllib.request.urlopen(request, timeout=10) as answer:
        document = json.loads(answer.read())
    assert TOPIC in {topic["name"] for topic in document["topics"]}
    # the addresses of the listener asked: a client that came in on SASL stays on SASL
    assert sorted(item["port"] for item in document["brokers"]) == sorted(
        int(line.split(":")[-1]) for line in broker.sasl_addresses())
    from kafkalite.client import KafkaAdminClient as Admin

    for options in ({}, {"security_protocol": "SASL_PLAINTEXT", "sasl_plain_username": USER,
                         "sasl_plain_password": "wrong"}):
        admin = Admin(bootstrap_servers=broker.sasl_bootstrap, request_timeout_ms=5000, **options)
        try:
            with pytest.raises(SaslAuthenticationFailedError):
                admin.list_topics()
        finally:
            admin.close()


def test_kafka_python_scram_producer_and_consumer(broker: SaslBroker) -> None:
    kafka = pytest.importorskip("kafka")
    security = {"bootstrap_servers": broker.sasl_bootstrap, "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": USER, "sasl_plain_password": PASSWORD}
    producer = kafka.KafkaProducer(acks="all", **security)
    try:
        metadata = producer.send(TOPIC, value=b"kafka-python").get(timeout=30)
    finally:
        producer.close()
    consumer = kafka.KafkaConsumer(enable_auto_commit=False, **security)
    try:
        partition = kafka.TopicPartition(TOPIC, 0)
        consumer.assign([partition])
        consumer.seek(partition, metadata.offset)
        records = consumer.poll(timeout_ms=10_000, max_records=1)
        assert [record.value for record in records.get(partition, [])] == [b"kafka-python"]
    finally:
        consumer.close()


def test_confluent_admin_manages_scram_credentials_over_the_kafka_protocol(broker: SaslBroker) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka import admin as confluent_admin

    security = {"bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD}
    client = confluent_admin.AdminClient(security)
    upsert = confluent_admin.UserScramCredentialUpsertion(
        "dave", confluent_admin.ScramCredentialInfo(confluent_admin.ScramMechanism.SCRAM_SHA_256, 8192), b"dave-pw")
    client.alter_user_scram_credentials([upsert])["dave"].result(timeout=30)
    described = client.describe_user_scram_credentials(["dave", "nobody"])
    infos = described["dave"].result(timeout=30).scram_credential_infos
    assert [(info.mechanism, info.iterations) for info in infos] == [
        (confluent_admin.ScramMechanism.SCRAM_SHA_256, 8192)]
    with pytest.raises(confluent_kafka.KafkaException, match=r"RESOURCE_NOT_FOUND|does not exist"):
        described["nobody"].result(timeout=30)
    document = json.loads(broker.read_znode("/config/users/dave"))
    assert set(document["config"]) == {"SCRAM-SHA-256"} and b"dave-pw" not in broker.read_znode("/config/users/dave")
    # the credential the client derived authenticates its user
    producer = confluent_kafka.Producer({**security, "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "dave",
                                         "sasl.password": "dave-pw"})
    producer.produce(TOPIC, value=b"from-dave")
    assert producer.flush(30) == 0
    deletion = confluent_admin.UserScramCredentialDeletion("dave", confluent_admin.ScramMechanism.SCRAM_SHA_256)
    client.alter_user_scram_credentials([deletion])["dave"].result(timeout=30)
    with pytest.raises(confluent_kafka.KafkaException):
        client.alter_user_scram_credentials([deletion])["dave"].result(timeout=30)


def test_a_kafkalite_producer_with_a_wrong_password_fails_with_the_named_error(broker: SaslBroker) -> None:
    from kafkalite.client import KafkaProducer
    from kafkalite.errors import SaslAuthenticationFailedError

    started = time.monotonic()
    with pytest.raises(SaslAuthenticationFailedError):
        producer = KafkaProducer(bootstrap_servers=broker.sasl_bootstrap, security_protocol="SASL_PLAINTEXT",
                                 sasl_plain_username=USER, sasl_plain_password="wrong", max_block_ms=20_000)
        try:
            producer.send(TOPIC, value=b"never").get(timeout=20)
        finally:
            producer.close()
    assert time.monotonic() - started < 10  # refused at once, not retried until max_block_ms
