"""SASL authentication and the users/clients config entities on one real broker: credentials
created with kafkalite-configs.sh and kept in ZooKeeper in Kafka's format."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from kafkalite.security import scram
from tests.support.cluster import ROOT, BrokerCluster

pytestmark = pytest.mark.integration
SCRIPTS = ROOT / "scripts"


class SaslBroker:
    def __init__(self, cluster: BrokerCluster, zookeeper_hosts: str, chroot: str) -> None:
        self.cluster = cluster
        self.zookeeper_hosts = zookeeper_hosts
        self.chroot = chroot
        self.plain = cluster.bootstrap.split(",")[0]

    def read_znode(self, path: str) -> bytes:
        client = KazooClient(hosts=self.zookeeper_hosts + self.chroot, timeout=10)
        client.start(timeout=10)
        try:
            data, _ = client.get(path)
            return bytes(data)
        finally:
            client.stop()
            client.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[SaslBroker]:  # type: ignore[no-untyped-def]
    chroot = f"/sasl-{uuid.uuid4().hex[:8]}"
    cluster = BrokerCluster(tmp_path_factory.mktemp("sasl"), f"{zookeeper.connect_string}{chroot}", size=1)
    cluster.start()
    try:
        yield SaslBroker(cluster, zookeeper.connect_string, chroot)
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
