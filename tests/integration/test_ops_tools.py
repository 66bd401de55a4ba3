"""The operations tools against a live 3-broker cluster, run as users run them (the scripts, as
subprocesses): get-offsets after producing, configs round trips for a topic, a broker and the
broker default, a preferred election after a leader moved, broker-api-versions, and the
ZooKeeper shell; plus every tool's error paths (exit 2 with "Error:" for bad flags, exit 1 for
unknown topics and failed operations, never a traceback)."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkalite import KafkaProducer, __version__
from tests.support.cluster import ROOT, BrokerCluster

pytestmark = pytest.mark.integration
SCRIPTS = ROOT / "scripts"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    brokers = BrokerCluster(tmp_path_factory.mktemp("ops-tools"),
                            f"{zookeeper.connect_string}/ops-{uuid.uuid4().hex[:8]}", size=3).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def run(script: str, *arguments: str, stdin: str | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run one script; a Python traceback on stderr fails the test whatever the exit code."""
    result = subprocess.run([str(SCRIPTS / script), *arguments], input=stdin, capture_output=True, text=True,
                            timeout=timeout)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return result.stdout.strip().splitlines()


def create_topic(cluster: BrokerCluster, name: str, partitions: int = 3) -> None:
    created = run("kafkalite-topics.sh", "--create", "--bootstrap-server", cluster.bootstrap, "--topic", name,
                  "--partitions", str(partitions), "--replication-factor", "3")
    assert created.returncode == 0, created.stderr
    cluster.wait_in_sync(name)


def test_get_offsets_after_producing(cluster: BrokerCluster) -> None:
    create_topic(cluster, "offsets")
    # Recent timestamps (older ones would fall to retention.ms at once), one second apart.
    base = int(time.time() * 1000) - 60_000
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    try:
        for index in range(5):
            producer.send("offsets", value=b"p0-%d" % index, partition=0, timestamp_ms=base + 1000 * index)
        for index in range(2):
            producer.send("offsets", value=b"p1-%d" % index, partition=1, timestamp_ms=base + 1000 * index)
        producer.flush(30)
    finally:
        producer.close()
    bootstrap = cluster.bootstrap.split(",")[0]

    latest = run("kafkalite-get-offsets.sh", "--bootstrap-server", bootstrap, "--topic", "offsets")
    assert latest.returncode == 0, latest.stderr
    assert lines(latest) == ["offsets:0:5", "offsets:1:2", "offsets:2:0"]
    # Kafka's older flag, a regular expression and a partition list, earliest offsets.
    earliest = run("kafkalite-get-offsets.sh", "--broker-list", bootstrap, "--topic", "offs.*", "--partitions", "0,1",
                   "--time", "-2")
    assert earliest.returncode == 0 and lines(earliest) == ["offsets:0:0", "offsets:1:0"], earliest.stderr
    # By timestamp: partition 1 has nothing at or after base + 2000 and partition 2 is empty: left out.
    by_time = run("kafkalite-get-offsets.sh", "--bootstrap-server", bootstrap, "--topic", "offsets",
                  "--time", str(base + 2000))
    assert by_time.returncode == 0 and lines(by_time) == ["offsets:0:2"], by_time.stdout
    newest = run("kafkalite-get-offsets.sh", "--bootstrap-server", bootstrap, "--topic", "offsets",
                 "--time", "max-timestamp")
    assert lines(newest) == ["offsets:0:4", "offsets:1:1"], newest.stdout
    ranged = run("kafkalite-get-offsets.sh", "--bootstrap-server", bootstrap, "--topic-partitions", "offsets:1-")
    assert lines(ranged) == ["offsets:1:2", "offsets:2:0"], ranged.stdout
    everything = run("kafkalite-get-offsets.sh", "--bootstrap-server", bootstrap, "--exclude-internal-topics")
    assert "offsets:0:5" in lines(everything) and not any(line.startswith("__") for line in lines(everything))

    unknown = run("kafkalite-get-offsets.sh", "--bootstrap-server", bootstrap, "--topic", "no-such-topic")
    assert unknown.returncode == 1
    assert "Error: Could not match any topic-partitions with the specified filters" in unknown.stderr
    no_partition = run("kafkalite-get-offsets.sh", "--bootstrap-server", bootstrap, "--topic", "offsets",
                       "--partitions", "7")
    assert no_partition.returncode == 1 and "Could not match" in no_partition.stderr


def test_topic_configs_round_trip(cluster: BrokerCluster) -> None:
    create_topic(cluster, "configured", partitions=1)
    bootstrap = cluster.bootstrap
    empty = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--describe", "--topic", "configured")
    assert empty.returncode == 0 and lines(empty) == ["Dynamic configs for topic configured are:"]
    added = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "topics",
                "--entity-name", "configured", "--add-config", "retention.ms=86400000,cleanup.policy=[compact,delete]")
    assert added.returncode == 0, added.stderr
    assert lines(added) == ["Completed updating config for topic configured."]
    described = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--describe", "--entity-type", "topics",
                    "--entity-name", "configured")
    assert lines(described) == [
        "Dynamic configs for topic configured are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete}",
        "  retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000}",
    ]
    topics_view = run("kafkalite-topics.sh", "--bootstrap-server", bootstrap, "--describe", "--topic", "configured")
    assert "Configs: cleanup.policy=compact,delete,retention.ms=86400000" in topics_view.stdout
    every = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--describe", "--topic", "configured", "--all")
    assert lines(every)[0] == "All configs for topic configured are:"
    assert "  segment.bytes=1073741824 sensitive=false synonyms={DEFAULT_CONFIG:log.segment.bytes=1073741824}" \
        in lines(every)

    deleted = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--alter", "--topic", "configured",
                  "--delete-config", "cleanup.policy")
    assert deleted.returncode == 0 and lines(deleted) == ["Completed updating config for topic configured."]
    after = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--describe", "--topic", "configured")
    assert lines(after) == ["Dynamic configs for topic configured are:",
                            "  retention.ms=86400000 sensitive=false "
                            "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000}"]
    # Kafka's rule: deleting a config that has no dynamic value is an error.
    again = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--alter", "--topic", "configured",
                "--delete-config", "cleanup.policy")
    assert again.returncode == 1 and "Error: Invalid config(s): cleanup.policy" in again.stderr
    unknown_name = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--alter", "--topic", "configured",
                       "--add-config", "no.such.config=1")
    assert unknown_name.returncode == 1 and "INVALID_CONFIG" in unknown_name.stderr
    bad_value = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--alter", "--topic", "configured",
                    "--add-config", "retention.ms=soon")
    assert bad_value.returncode == 1 and "INVALID_CONFIG" in bad_value.stderr
    for action in (["--describe"], ["--alter", "--add-config", "retention.ms=1"]):
        missing = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, *action, "--topic", "no-such-topic")
        assert missing.returncode == 1 and "The topic 'no-such-topic' does not exist." in missing.stderr


def test_broker_configs_round_trip(cluster: BrokerCluster, tmp_path: Path) -> None:
    bootstrap = cluster.bootstrap.split(",")[0]
    added = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--alter", "--broker", "2",
                "--add-config", "log.retention.ms=3600000")
    assert added.returncode == 0 and lines(added) == ["Completed updating config for broker 2."], added.stderr
    described = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--describe", "--entity-type", "brokers",
                    "--entity-name", "2")
    assert lines(described) == [
        "Dynamic configs for broker 2 are:",
        "  log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000}"]
    static = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--describe", "--broker", "2", "--all")
    assert "  broker.id=2 sensitive=false synonyms={STATIC_BROKER_CONFIG:broker.id=2}" in lines(static)

    # The cluster-wide default, from a properties file; every broker falls back to it.
    properties = tmp_path / "defaults.properties"
    properties.write_text("# cluster default\nlog.retention.bytes=1073741824\n")
    default = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "brokers",
                  "--entity-default", "--add-config-file", str(properties))
    assert default.returncode == 0, default.stderr
    assert lines(default) == ["Completed updating default config for brokers in the cluster."]
    shown = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--describe", "--broker-defaults")
    assert lines(shown) == [
        "Default configs for brokers in the cluster are:",
        "  log.retention.bytes=1073741824 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.bytes=1073741824}"]
    all_brokers = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--describe", "--entity-type", "brokers")
    headers = [line for line in lines(all_brokers) if not line.startswith("  ")]
    assert headers == [f"Dynamic configs for broker {broker_id} are:" for broker_id in (1, 2, 3)]
    assert lines(all_brokers).count(
        "  log.retention.bytes=1073741824 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.bytes=1073741824}") == 3

    for arguments in (["--broker", "2", "--delete-config", "log.retention.ms"],
                      ["--entity-type", "brokers", "--entity-default", "--delete-config", "log.retention.bytes"]):
        removed = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--alter", *arguments)
        assert removed.returncode == 0, removed.stderr
    cleared = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--describe", "--entity-type", "brokers")
    assert not [line for line in lines(cleared) if line.startswith("  ")], cleared.stdout

    read_only = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--alter", "--broker", "2",
                    "--add-config", "broker.id=7")
    assert read_only.returncode == 1 and "INVALID_CONFIG" in read_only.stderr
    unknown_broker = run("kafkalite-configs.sh", "--bootstrap-server", bootstrap, "--describe", "--broker", "42")
    assert unknown_broker.returncode == 1 and "broker 42 is not in the cluster" in unknown_broker.stderr


def _leader(cluster: BrokerCluster, topic: str, partition: int) -> int:
    return int(cluster.partitions(topic)[partition]["leader"])


def test_preferred_election_after_a_leader_moved(cluster: BrokerCluster, tmp_path: Path) -> None:
    create_topic(cluster, "elected")
    bootstrap = cluster.bootstrap
    partition = 0
    preferred = int(cluster.partitions("elected")[partition]["replicas"][0])
    assert _leader(cluster, "elected", partition) == preferred
    already = run("kafkalite-leader-election.sh", "--bootstrap-server", bootstrap, "--election-type", "preferred",
                  "--topic", "elected", "--partition", str(partition))
    assert already.returncode == 0, already.stderr
    assert lines(already) == [f"Valid replica already elected for partitions elected-{partition}"]

    broker = cluster.brokers[preferred]
    assert broker.stop() == 0
    try:
        cluster.wait_for(lambda: _leader(cluster, "elected", partition) not in (-1, preferred), 30, "leader moved")
        unavailable = run("kafkalite-leader-election.sh", "--bootstrap-server", bootstrap, "--election-type",
                          "PREFERRED", "--topic", "elected", "--partition", str(partition))
        assert unavailable.returncode == 1
        assert (f"Error completing leader election (PREFERRED) for partition: elected-{partition}: "
                f"PREFERRED_LEADER_NOT_AVAILABLE") in unavailable.stdout
        assert "Error: 1 replica(s) could not be elected" in unavailable.stderr
    finally:
        broker.start()
        broker.wait_ready()
    cluster.wait_in_sync("elected")
    assert _leader(cluster, "elected", partition) != preferred  # auto.leader.rebalance.enable=false

    elected = run("kafkalite-leader-election.sh", "--bootstrap-server", bootstrap, "--election-type", "preferred",
                  "--topic", "elected", "--partition", str(partition))
    assert elected.returncode == 0, elected.stdout + elected.stderr
    assert lines(elected) == [f"Successfully completed leader election (PREFERRED) for partitions elected-{partition}"]
    cluster.wait_for(lambda: _leader(cluster, "elected", partition) == preferred, 10, "preferred leader back")

    everything = run("kafkalite-leader-election.sh", "--bootstrap-server", bootstrap, "--election-type", "preferred",
                     "--all-topic-partitions")
    assert everything.returncode == 0, everything.stdout + everything.stderr
    assert all(f"elected-{number}" in everything.stdout for number in range(3))

    request = tmp_path / "election.json"
    request.write_text(json.dumps({"partitions": [{"topic": "elected", "partition": 1},
                                                  {"topic": "no-such-topic", "partition": 0}]}))
    mixed = run("kafkalite-leader-election.sh", "--bootstrap-server", bootstrap, "--election-type", "preferred",
                "--path-to-json-file", str(request))
    assert mixed.returncode == 1
    assert "Valid replica already elected for partitions elected-1" in mixed.stdout
    assert ("Error completing leader election (PREFERRED) for partition: no-such-topic-0: "
            "UNKNOWN_TOPIC_OR_PARTITION") in mixed.stdout
    unknown = run("kafkalite-leader-election.sh", "--bootstrap-server", bootstrap, "--election-type", "preferred",
                  "--topic", "no-such-topic", "--partition", "0")
    assert unknown.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in unknown.stdout


def test_broker_api_versions(cluster: BrokerCluster) -> None:
    result = run("kafkalite-broker-api-versions.sh", "--bootstrap-server", cluster.bootstrap.split(",")[0])
    assert result.returncode == 0, result.stderr
    blocks = re.findall(r"^(127\.0\.0\.1:(\d+)) \(id: (\d+) rack: null\) -> \(\n(.*?)\n\)$", result.stdout,
                        re.MULTILINE | re.DOTALL)
    assert [(address, int(broker_id)) for address, _, broker_id, _ in blocks] == [
        (broker.address, broker_id) for broker_id, broker in sorted(cluster.brokers.items())]
    for _, _, _, body in blocks:
        routes = body.split(",\n")
        assert "\t/health" in routes and "\t/v1/produce [usable: v1]" in routes
        assert "\t/v1/admin/elect_leaders [usable: v1]" in routes
    version = run("kafkalite-broker-api-versions.sh", "--bootstrap-server", cluster.bootstrap, "--version")
    assert version.returncode == 0 and version.stdout.strip() == __version__
    nobody = run("kafkalite-broker-api-versions.sh", "--bootstrap-server", "127.0.0.1:1", timeout=120)
    assert nobody.returncode == 1 and nobody.stderr.startswith("Error")


def test_zookeeper_shell(cluster: BrokerCluster) -> None:
    create_topic(cluster, "znodes", partitions=1)
    server = cluster.zookeeper_connect
    ids = run("zookeeper-shell.sh", server, "ls", "/brokers/ids")
    assert ids.returncode == 0, ids.stderr
    assert lines(ids) == ["[1, 2, 3]"]
    state = run("zookeeper-shell.sh", server, "get", "/brokers/topics/znodes/partitions/0/state")
    assert state.returncode == 0, state.stderr
    payload = json.loads(state.stdout)
    assert payload["leader"] in (1, 2, 3) and sorted(payload["isr"]) == [1, 2, 3]
    stat = run("zookeeper-shell.sh", server, "stat", "/brokers/ids/1")
    assert stat.returncode == 0 and re.search(r"^ephemeralOwner = 0x[1-9a-f]", stat.stdout, re.MULTILINE)
    assert re.search(r"^numChildren = 0$", stat.stdout, re.MULTILINE)
    with_stat = run("zookeeper-shell.sh", server, "get", "-s", "/brokers/topics/znodes")
    assert json.loads(lines(with_stat)[0])["partitions"] and "dataVersion = " in with_stat.stdout
    tree = run("zookeeper-shell.sh", server, "ls", "-R", "/brokers/topics/znodes")
    assert lines(tree) == ["/brokers/topics/znodes", "/brokers/topics/znodes/partitions",
                           "/brokers/topics/znodes/partitions/0", "/brokers/topics/znodes/partitions/0/state"]

    missing = run("zookeeper-shell.sh", server, "get", "/no/such/node")
    assert missing.returncode == 1 and "Node does not exist: /no/such/node" in missing.stderr
    relative = run("zookeeper-shell.sh", server, "ls", "brokers")
    assert relative.returncode == 2 and "Path must start with / character" in relative.stderr
    unknown = run("zookeeper-shell.sh", server, "rmr", "/brokers")
    assert unknown.returncode == 2 and "unknown command 'rmr'" in unknown.stderr
    # Interactive: commands from standard input; a failed one makes the exit code 1.
    session = run("zookeeper-shell.sh", server, stdin="ls /brokers/ids\nget /controller\n\nstat /missing\nquit\n"
                                                      "ls /never-run\n")
    assert session.returncode == 1
    assert lines(session)[0] == "[1, 2, 3]" and json.loads(lines(session)[1])["brokerid"] in (1, 2, 3)
    assert "Node does not exist: /missing" in session.stderr and "never-run" not in session.stderr
    clean = run("zookeeper-shell.sh", server, stdin="ls /brokers\n")
    assert clean.returncode == 0 and lines(clean) == ["[ids, topics]"]


@pytest.mark.parametrize("script, arguments, message", [
    ("kafkalite-get-offsets.sh", ["--topic", "t"], "--bootstrap-server is required"),
    ("kafkalite-get-offsets.sh", ["--bootstrap-server", "127.0.0.1:1", "--partitions", "a"],
     "--partitions expects a comma separated list of numeric partition ids"),
    ("kafkalite-get-offsets.sh", ["--bootstrap-server", "127.0.0.1:1", "--time", "yesterday"], "--time must be"),
    ("kafkalite-get-offsets.sh", ["--bootstrap-server", "127.0.0.1:1", "--topic", "("], "invalid topic regular"),
    ("kafkalite-get-offsets.sh", ["--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--topic-partitions", "t:0"],
     "--topic-partitions cannot be used with --topic"),
    ("kafkalite-get-offsets.sh", ["--bootstrap-server", "127.0.0.1:1", "--bogus"], "unrecognized arguments"),
    ("kafkalite-configs.sh", ["--bootstrap-server", "127.0.0.1:1", "--topic", "t"], "one of the arguments"),
    ("kafkalite-configs.sh", ["--bootstrap-server", "127.0.0.1:1", "--describe"], "--entity-type is required"),
    ("kafkalite-configs.sh", ["--bootstrap-server", "127.0.0.1:1", "--describe", "--entity-type", "ips"],
     "users and clients only, not ips"),
    ("kafkalite-configs.sh", ["--bootstrap-server", "127.0.0.1:1", "--alter", "--entity-type", "users",
                              "--entity-type", "topics", "--entity-name", "t", "--add-config", "a=1"],
     "cannot be combined with users or clients"),
    ("kafkalite-configs.sh", ["--bootstrap-server", "127.0.0.1:1", "--describe", "--broker", "two"],
     "must be a valid integer broker id"),
    ("kafkalite-configs.sh", ["--bootstrap-server", "127.0.0.1:1", "--alter", "--topic", "t"],
     "At least one of --add-config, --add-config-file, or --delete-config"),
    ("kafkalite-configs.sh", ["--bootstrap-server", "127.0.0.1:1", "--alter", "--topic", "t", "--add-config", "oops"],
     "--add-config expects key=value"),
    ("kafkalite-configs.sh", ["--bootstrap-server", "127.0.0.1:1", "--alter", "--entity-type", "topics",
                              "--entity-default", "--add-config", "a=1"], "--entity-default applies to"),
    ("kafkalite-configs.sh", ["--describe", "--topic", "t"], "--bootstrap-server is required"),
    ("kafkalite-leader-election.sh", ["--bootstrap-server", "127.0.0.1:1", "--all-topic-partitions"],
     "Missing required option(s): --election-type"),
    ("kafkalite-leader-election.sh", ["--bootstrap-server", "127.0.0.1:1", "--election-type", "unclean",
                                      "--all-topic-partitions"], "invalid choice"),
    ("kafkalite-leader-election.sh", ["--bootstrap-server", "127.0.0.1:1", "--election-type", "preferred"],
     "One and only one of the following options is required"),
    ("kafkalite-leader-election.sh", ["--bootstrap-server", "127.0.0.1:1", "--election-type", "preferred",
                                      "--topic", "t"], "--partition"),
    ("kafkalite-leader-election.sh", ["--bootstrap-server", "127.0.0.1:1", "--election-type", "preferred",
                                      "--path-to-json-file", "/no/such/file.json"], "cannot read --path-to-json-file"),
    ("kafkalite-broker-api-versions.sh", [], "--bootstrap-server is required"),
    ("kafkalite-broker-api-versions.sh", ["--bootstrap-server", "127.0.0.1:1", "--bogus"], "unrecognized arguments"),
    ("zookeeper-shell.sh", [], "the ZooKeeper server is required"),
    ("zookeeper-shell.sh", ["bad host:x", "ls", "/"], "malformed host"),
])
def test_usage_errors(script: str, arguments: list[str], message: str) -> None:
    result = run(script, *arguments)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Error:" in result.stderr and message in result.stderr, result.stderr


def test_election_file_errors(tmp_path: Path) -> None:
    for content, message in (("{not json", "is not valid JSON"),
                             ('{"partitions": [{"topic": "t"}]}', 'needs a string "topic" and an integer "partition"'),
                             ('{"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}',
                              "duplicate partitions: t-0")):
        request = tmp_path / "election.json"
        request.write_text(content)
        result = run("kafkalite-leader-election.sh", "--bootstrap-server", "127.0.0.1:1", "--election-type",
                     "preferred", "--path-to-json-file", str(request))
        assert result.returncode == 2 and message in result.stderr, result.stderr


def test_zookeeper_shell_unreachable_server() -> None:
    result = run("zookeeper-shell.sh", "127.0.0.1:1", "ls", "/", timeout=60)
    assert result.returncode == 1
    assert "Error: connect to 127.0.0.1:1: no ZooKeeper session" in result.stderr
    assert "Connection dropped" not in result.stderr
