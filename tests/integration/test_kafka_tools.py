"""Non-Python Kafka clients, and a guide's client snippets, against real kafkalite brokers.

kcat (librdkafka's command line tool) lists metadata, produces keyed lines, reads them back and
consumes as a group member; kafkajs (Node) and kafka-python run the producer and consumer snippets
of a Kafka guide (tests/js/seed003_*.js, tests/seed_snippets/) with only ``localhost:9092``
replaced by the test cluster's address. scripts/install.sh installs kcat and kafkajs.
Every test checks the records (keys, values, order within each partition) and that no broker
logged an ERROR.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cluster import ROOT, BrokerCluster, running_cluster

pytestmark = pytest.mark.integration

JS_DIR = ROOT / "tests" / "js"
SNIPPETS = ROOT / "tests" / "seed_snippets"
KCAT = shutil.which("kcat")


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    """A fresh three-broker cluster per test: the guide's snippets share the topic ``orders``
    and the group ``order-processing``, and each pair writes a value the other cannot parse."""
    with running_cluster(tmp_path_factory, zookeeper, "kafka-tools") as brokers:
        yield brokers



def _create_topic(cluster: BrokerCluster, name: str, partitions: int = 3) -> str:
    cluster.create_topic(name, partitions=partitions, replication_factor=3)
    cluster.wait_for(lambda: all(item["leader"] > 0 for item in cluster.partitions(name)), 30,
                     f"leaders for {name}")

    def every_broker_knows_it() -> bool:  # every broker answers Metadata for it before a client asks
        return all(len(cluster.partitions(name, broker_id)) == partitions for broker_id in cluster.brokers)

    cluster.wait_for(every_broker_knows_it, 30, f"every broker's metadata of {name}")
    return name


def _first_address(cluster: BrokerCluster) -> str:
    return cluster.bootstrap.split(",")[0]


def _read_until(process: subprocess.Popen[bytes], done: Callable[[list[str]], bool], timeout: float) -> list[str]:
    """Lines ``process`` writes to stdout until ``done(lines)`` holds, it exits, or ``timeout``."""
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    buffered = b""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while not done(lines) and time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break
            buffered += chunk
            *complete, buffered = buffered.split(b"\n")
            lines.extend(line.decode(errors="replace") for line in complete)
    finally:
        selector.close()
    return lines


def _stop(process: subprocess.Popen[bytes], sig: int) -> None:
    if process.poll() is None:
        process.send_signal(sig)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    finally:
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _interrupt(process: subprocess.Popen[bytes]) -> str:
    """Ctrl-C as a user gives it: SIGINT, and again every 4 s while the process runs (20 s at
    most, then SIGKILL); a process that hangs in its shutdown still fails the caller's exit-status
    check. Returns what the process wrote to standard error."""
    deadline = time.monotonic() + 20
    while process.poll() is None and time.monotonic() < deadline:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=4)
        except subprocess.TimeoutExpired:
            continue
    if process.poll() is None:
        process.kill()
        process.wait(timeout=10)
    errors = process.stderr.read().decode(errors="replace") if process.stderr is not None else ""
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    return errors


def _per_partition(records: list[tuple[int, int, str, str]]) -> dict[int, list[tuple[int, str, str]]]:
    by_partition: dict[int, list[tuple[int, str, str]]] = {}
    for partition, offset, key, value in records:
        by_partition.setdefault(partition, []).append((offset, key, value))
    return by_partition


def _kcat_read(cluster: BrokerCluster, topic: str) -> list[tuple[int, int, str, str]]:
    """(partition, offset, key, value) of every record of ``topic``, read by kcat to the end."""
    assert KCAT is not None
    output = subprocess.run([KCAT, "-C", "-b", cluster.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
                             "-f", "%p\t%o\t%k\t%s\n"], capture_output=True, timeout=60, check=True)
    records = []
    for line in output.stdout.decode().splitlines():
        partition, offset, key, value = line.split("\t", 3)
        records.append((int(partition), int(offset), key, value))
    return records


def test_kcat_metadata_produce_consume_and_group(cluster: BrokerCluster) -> None:
    assert KCAT is not None, "kcat is missing: scripts/install.sh installs it"
    topic = _create_topic(cluster, f"kcat-{uuid.uuid4().hex[:8]}")

    listing = subprocess.run([KCAT, "-L", "-b", cluster.bootstrap], capture_output=True, timeout=60, check=True)
    text = listing.stdout.decode()
    assert " 3 brokers:" in text
    for broker_id, broker in cluster.brokers.items():
        assert re.search(rf"broker {broker_id} at [^\s]+:{broker.port}\b", text), text
    assert f'topic "{topic}" with 3 partitions:' in text

    lines = [f"key-{index % 5}:value-{index}" for index in range(60)]
    subprocess.run([KCAT, "-P", "-b", cluster.bootstrap, "-t", topic, "-K:"],
                   input=("\n".join(lines) + "\n").encode(), timeout=60, check=True)

    exact = subprocess.run([KCAT, "-C", "-b", cluster.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
                            "-f", "%k:%s\n"], capture_output=True, timeout=60, check=True)
    read_back = exact.stdout.decode().splitlines()
    assert sorted(read_back) == sorted(lines)

    records = _kcat_read(cluster, topic)
    key_partitions: dict[str, set[int]] = {}
    for partition, _, key, _ in records:
        key_partitions.setdefault(key, set()).add(partition)
    assert all(len(partitions) == 1 for partitions in key_partitions.values())
    for entries in _per_partition(records).values():
        assert [offset for offset, _, _ in entries] == list(range(len(entries)))
        # within a partition the records are in the order kcat produced them
        assert [f"{key}:{value}" for _, key, value in entries] == [
            line for line in lines if line.split(":")[0] in {key for _, key, _ in entries}]

    group = subprocess.Popen([KCAT, "-b", cluster.bootstrap, "-G", f"group-{uuid.uuid4().hex[:6]}", "-u", "-q",
                              "-X", "auto.offset.reset=earliest", "-f", "%p\t%o\t%k\t%s\n", topic],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        consumed = _read_until(group, lambda seen: len(seen) >= len(lines), 90)
    finally:
        _stop(group, signal.SIGINT)
    as_member = []
    for line in consumed:
        fields = line.split("\t", 3)
        as_member.append((int(fields[0]), int(fields[1]), fields[2], fields[3]))
    assert sorted(as_member) == sorted(records)
    for entries in _per_partition(as_member).values():
        assert [offset for offset, _, _ in entries] == list(range(len(entries)))


def _snippet(text: str, cluster: BrokerCluster) -> str:
    assert text.count("localhost:9092") == 1
    return text.replace("localhost:9092", _first_address(cluster))


def test_kafkajs_guide_producer_and_consumer(cluster: BrokerCluster, tmp_path: Path) -> None:
    assert shutil.which("node") is not None, "node is missing: Node 20 is a prerequisite (README)"
    assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "kafkajs is missing: scripts/install.sh installs it"
    _create_topic(cluster, "orders")
    _create_topic(cluster, "analytics", partitions=1)
    env = {**os.environ, "NODE_PATH": str(JS_DIR / "node_modules"), "KAFKAJS_NO_PARTITIONER_WARNING": "1"}

    producer_js = tmp_path / "producer.js"
    producer_js.write_text(_snippet((JS_DIR / "seed003_producer.js").read_text(), cluster))
    produced = subprocess.run(["node", str(producer_js)], capture_output=True, timeout=120, env=env)
    # the snippet reports failure only through console.error; kafkajs logs JSON lines (levels up to WARN here)
    complaints = [line for line in produced.stderr.decode().splitlines()
                  if not line.startswith("{") or '"level":"ERROR"' in line]
    assert produced.returncode == 0 and complaints == [], produced.stderr.decode()

    orders = _kcat_read(cluster, "orders") if KCAT else None
    if orders is not None:
        assert sorted((key, json.loads(value)["orderId"]) for _, _, key, value in orders) == [
            ("CUST-1", "ORD-002"), ("CUST-2", "ORD-003"), ("CUST-42", "ORD-001")]
        assert [json.loads(value) for _, _, _, value in _kcat_read(cluster, "analytics")] == [
            {"event": "order_created", "count": 2}]

    # The consumer snippet runs until it is stopped, by design: it is stopped once it has
    # processed the three orders.
    consumer_js = tmp_path / "consumer.js"
    consumer_js.write_text(_snippet((JS_DIR / "seed003_consumer.js").read_text(), cluster))
    consumer = subprocess.Popen(["node", str(consumer_js)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        lines = _read_until(consumer, lambda seen: sum(line.endswith(" processed") for line in seen) >= 3, 120)
    finally:
        _stop(consumer, signal.SIGTERM)
    printed = [line for line in lines if not line.startswith("{")]  # kafkajs's own log lines are JSON
    seen: list[tuple[int, int, str, str]] = []
    for index, line in enumerate(printed):
        match = re.fullmatch(r"Partition: (\d+), Offset: (\d+), Key: (.*)", line)
        if match:
            assert printed[index + 1].startswith("Processing: ")
            order_id = printed[index + 1].removeprefix("Processing: ")
            assert printed[index + 2] == f"Order {order_id} processed"
            seen.append((int(match[1]), int(match[2]), match[3], order_id))
    assert sorted((key, order_id) for _, _, key, order_id in seen) == [
        ("CUST-1", "ORD-002"), ("CUST-2", "ORD-003"), ("CUST-42", "ORD-001")], lines
    for entries in _per_partition(seen).values():
        assert [offset for offset, _, _ in entries] == list(range(len(entries)))
    if orders is not None:
        assert sorted(seen) == sorted((p, o, k, json.loads(v)["orderId"]) for p, o, k, v in orders)


def test_kafka_python_guide_producer_and_consumer(cluster: BrokerCluster, tmp_path: Path) -> None:
    _create_topic(cluster, "orders")
    producer_py = tmp_path / "producer.py"
    producer_py.write_text(_snippet((SNIPPETS / "kafka_python_producer.py.txt").read_text(), cluster))
    produced = subprocess.run([sys.executable, str(producer_py)], capture_output=True, timeout=120, cwd=tmp_path)
    assert produced.returncode == 0, produced.stderr.decode()
    match = re.fullmatch(r"Sent to partition (\d+) at offset 0\n", produced.stdout.decode())
    assert match, produced.stdout.decode()
    partition = int(match[1])

    # As printed, the consumer defines process_order after the loop that calls it, so the first
    # record would end it with a NameError: the definition is moved before the loop, unchanged.
    # It consumes until interrupted, and stops cleanly on KeyboardInterrupt (SIGINT).
    text = _snippet((SNIPPETS / "kafka_python_consumer.py.txt").read_text(), cluster)
    definition = text[text.index("def process_order(order):"):]
    text = text.replace(definition, "").replace("try:\n", definition + "\ntry:\n", 1)
    consumer_py = tmp_path / "consumer.py"
    consumer_py.write_text(text)
    # SIGINT at its default, as in a terminal: a test runner started in the background (a shell's
    # `cmd &`) hands its children SIGINT ignored, and Python then installs no KeyboardInterrupt.
    consumer = subprocess.Popen([sys.executable, "-u", str(consumer_py)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=tmp_path,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # the committed offset is the one kafka-python committed (the snippet commits after printing,
    # so the interrupt waits for the commit to be visible), and the headers are stored
    from kafka import KafkaConsumer, TopicPartition

    reader = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id="order-processing", enable_auto_commit=False)
    committed = None
    try:
        lines = _read_until(consumer, lambda seen: "Order ORD-001 processed" in seen, 120)
        deadline = time.monotonic() + 30
        while committed != 1 and consumer.poll() is None and time.monotonic() < deadline:
            committed = reader.committed(TopicPartition("orders", partition))
    finally:
        reader.close()
        errors = _interrupt(consumer)
    assert lines == [f"Partition: {partition}, Offset: 0, Key: b'CUST-42'", "Processing order: ORD-001",
                     "Order ORD-001 processed"]
    assert consumer.returncode == 0, errors
    assert committed == 1
    if KCAT:
        assert subprocess.run([KCAT, "-C", "-b", cluster.bootstrap, "-t", "orders", "-o", "beginning", "-e", "-q",
                               "-f", "%k|%h|%s\n"], capture_output=True, timeout=60, check=True).stdout.decode() == (
            'CUST-42|source=order-service,version=1.0|{"order_id": "ORD-001", "customer_id": "CUST-42", '
            '"items": ["widget", "gadget"], "total": 149.99}\n')
