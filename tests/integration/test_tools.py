"""The seeds' tutorial with our scripts against a live cluster: create, list, describe, alter,
delete topics; produce lines with and without keys (stdin and file); consume from the
beginning; and the tools' error paths (exit codes, no tracebacks)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import ROOT, BrokerCluster

pytestmark = pytest.mark.integration
SCRIPTS = ROOT / "scripts"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    brokers = BrokerCluster(tmp_path_factory.mktemp("tools"),
                            f"{zookeeper.connect_string}/tools-{uuid.uuid4().hex[:8]}", size=3).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def run(script: str, *arguments: str, stdin: str | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(SCRIPTS / script), *arguments], input=stdin, capture_output=True, text=True,
                            timeout=timeout)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_topic_tutorial(cluster: BrokerCluster) -> None:
    bootstrap = cluster.bootstrap.split(",")[0]
    created = run("kafkalite-topics.sh", "--create", "--bootstrap-server", bootstrap, "--topic", "orders",
                  "--partitions", "6", "--replication-factor", "3", "--config", "retention.ms=86400000")
    assert created.returncode == 0 and created.stdout.strip() == "Created topic orders."
    again = run("kafkalite-topics.sh", "--create", "--bootstrap-server", bootstrap, "--topic", "orders",
                "--partitions", "6")
    assert again.returncode == 1 and "Topic 'orders' already exists." in again.stderr
    quiet = run("kafkalite-topics.sh", "--create", "--if-not-exists", "--bootstrap-server", bootstrap, "--topic",
                "orders", "--partitions", "3")
    assert quiet.returncode == 0
    listed = run("kafkalite-topics.sh", "--list", "--bootstrap-server", bootstrap)
    assert "orders" in listed.stdout.split()
    cluster.wait_in_sync("orders")
    described = run("kafkalite-topics.sh", "--describe", "--bootstrap-server", bootstrap, "--topic", "orders")
    lines = described.stdout.strip().splitlines()
    assert lines[0].startswith("Topic: orders\tTopicId: ") and "PartitionCount: 6\tReplicationFactor: 3" in lines[0]
    assert "retention.ms=86400000" in lines[0]
    assert len(lines) == 7 and all("\tLeader: " in line and "\tIsr: " in line for line in lines[1:])
    altered = run("kafkalite-topics.sh", "--alter", "--bootstrap-server", bootstrap, "--topic", "orders",
                  "--partitions", "10")
    assert altered.returncode == 0
    cluster.wait_in_sync("orders")
    described = run("kafkalite-topics.sh", "--describe", "--bootstrap-server", bootstrap, "--topic", "orders")
    assert "PartitionCount: 10" in described.stdout
    shrink = run("kafkalite-topics.sh", "--alter", "--bootstrap-server", bootstrap, "--topic", "orders",
                 "--partitions", "2")
    assert shrink.returncode == 1 and "INVALID_PARTITIONS" in shrink.stderr
    under = run("kafkalite-topics.sh", "--describe", "--under-replicated-partitions", "--bootstrap-server", bootstrap)
    assert under.returncode == 0 and under.stdout.strip() == ""
    deleted = run("kafkalite-topics.sh", "--delete", "--bootstrap-server", bootstrap, "--topic", "orders")
    assert deleted.returncode == 0
    cluster.wait_for(lambda: "orders" not in run("kafkalite-topics.sh", "--list", "--bootstrap-server",
                                                 bootstrap).stdout.split(), 20, "topic gone")
    missing = run("kafkalite-topics.sh", "--describe", "--bootstrap-server", bootstrap, "--topic", "orders")
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_old_zookeeper_flag_still_finds_the_brokers(cluster: BrokerCluster) -> None:
    created = run("kafkalite-topics.sh", "--zookeeper", cluster.zookeeper_connect, "--create", "--topic",
                  "via-zookeeper", "--partitions", "3", "--replication-factor", "1")
    assert created.returncode == 0, created.stderr
    listed = run("kafkalite-topics.sh", "--zookeeper", cluster.zookeeper_connect, "--list", "--exclude-internal")
    assert "via-zookeeper" in listed.stdout.split()


def test_produce_with_and_without_keys_then_consume(cluster: BrokerCluster, tmp_path: Path) -> None:
    bootstrap = cluster.bootstrap
    run("kafkalite-topics.sh", "--create", "--bootstrap-server", bootstrap, "--topic", "my-topic-name",
        "--partitions", "3", "--replication-factor", "3")
    cluster.wait_in_sync("my-topic-name")
    plain = run("kafkalite-console-producer.sh", "--broker-list", bootstrap, "--topic", "my-topic-name",
                stdin="first message\nsecond message\n")
    assert plain.returncode == 0, plain.stderr
    keyed = run("kafkalite-console-producer.sh", "--bootstrap-server", bootstrap, "--topic", "my-topic-name",
                "--property", "parse.key=true", "--property", "key.separator=:", stdin="user1:login\nuser2:logout\n")
    assert keyed.returncode == 0, keyed.stderr
    messages = tmp_path / "my-messages.txt"
    messages.write_text("user1:purchase\nuser3:login\n")
    from_file = run("kafkalite-console-producer.sh", "--bootstrap-server", bootstrap, "--topic", "my-topic-name",
                    "--property", "parse.key=true", "--property", "key.separator=:", "--property", f"file={messages}",
                    "--compression-codec", "lz4", "--producer-property", "linger.ms=5")
    assert from_file.returncode == 0, from_file.stderr
    consumed = run("kafkalite-console-consumer.sh", "--bootstrap-server", bootstrap, "--topic", "my-topic-name",
                   "--from-beginning", "--max-messages", "6", "--timeout-ms", "20000",
                   "--property", "print.key=true", "--property", "print.partition=true",
                   "--property", "print.offset=true")
    assert consumed.returncode == 0 and "Processed a total of 6 messages" in consumed.stderr
    rows = [line.split("\t") for line in consumed.stdout.strip().splitlines()]
    assert sorted((row[2], row[3]) for row in rows) == sorted([
        ("null", "first message"), ("null", "second message"), ("user1", "login"), ("user2", "logout"),
        ("user1", "purchase"), ("user3", "login")])
    partitions_of = {}
    for row in rows:
        partitions_of.setdefault(row[2], set()).add(row[0])
    assert len(partitions_of["user1"]) == 1  # one key, one partition
    # A single partition from a given offset, with timestamps.
    partition_number = rows[0][0].split(":")[1]
    one = run("kafkalite-console-consumer.sh", "--bootstrap-server", bootstrap, "--topic", "my-topic-name",
              "--partition", partition_number, "--offset", "0", "--timeout-ms", "3000",
              "--property", "print.timestamp=true")
    assert one.returncode == 0 and all(line.startswith("CreateTime:") for line in one.stdout.strip().splitlines())
    missing_separator = run("kafkalite-console-producer.sh", "--bootstrap-server", bootstrap, "--topic",
                            "my-topic-name", "--property", "parse.key=true", stdin="no separator here\n")
    assert missing_separator.returncode == 2 and "No key separator found on line number 1" in missing_separator.stderr


@pytest.mark.parametrize("script, arguments, code, message", [
    ("kafkalite-topics.sh", ["--list"], 2, "--bootstrap-server is required"),
    ("kafkalite-topics.sh", ["--bootstrap-server", "x:1"], 2, "one of the arguments"),
    ("kafkalite-topics.sh", ["--bootstrap-server", "127.0.0.1:1", "--create", "--topic", "t", "--partitions", "x"],
     2, "invalid int value"),
    ("kafkalite-topics.sh", ["--bootstrap-server", "127.0.0.1:1", "--create", "--topic", "t", "--config", "oops"],
     2, "--config expects key=value"),
    ("kafkalite-console-producer.sh", ["--bootstrap-server", "127.0.0.1:1"], 2, "--topic"),
    ("kafkalite-console-producer.sh", ["--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--producer-property",
                                       "no.such.thing=1"], 2, "unknown producer property"),
    ("kafkalite-console-consumer.sh", ["--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--offset", "5"], 2,
     "--offset needs --partition"),
    ("kafkalite-console-consumer.sh", ["--bootstrap-server", "x:1", "--topic", "t", "--bogus"], 2,
     "unrecognized arguments"),
])
def test_usage_errors(script: str, arguments: list[str], code: int, message: str) -> None:
    result = run(script, *arguments)
    assert result.returncode == code and message in result.stderr, result.stderr


def test_invalid_topic_name_and_unreachable_broker(cluster: BrokerCluster) -> None:
    bad = run("kafkalite-topics.sh", "--create", "--bootstrap-server", cluster.bootstrap, "--topic", "bad name!")
    assert bad.returncode == 1 and "INVALID_TOPIC_EXCEPTION" in bad.stderr
    nobody = run("kafkalite-topics.sh", "--list", "--bootstrap-server", "127.0.0.1:1", timeout=120)
    assert nobody.returncode == 1 and nobody.stderr.startswith("Error")


def test_console_consumer_isolation_level_hides_aborted_transactions(cluster: BrokerCluster) -> None:
    from kafkalite import KafkaProducer

    bootstrap = cluster.bootstrap.split(",")[0]
    topic = f"isolation-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    cluster.wait_in_sync(topic)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=f"tx-{topic}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"aborted")
        producer.flush()  # on the broker before the abort (an abort drops what is not sent yet)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"committed")
        producer.commit_transaction()
    finally:
        producer.close()
    read = {level: run("kafkalite-console-consumer.sh", "--bootstrap-server", bootstrap, "--topic", topic,
                       "--from-beginning", "--timeout-ms", "5000", *(["--isolation-level", level] if level else []))
            for level in (None, "read_committed")}
    assert all(result.returncode == 0 for result in read.values()), {key: r.stderr for key, r in read.items()}
    assert read[None].stdout.split() == ["aborted", "committed"]  # read_uncommitted, Kafka's default
    assert read["read_committed"].stdout.split() == ["committed"]
