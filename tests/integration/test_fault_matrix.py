"""The fault-injection matrix: no acknowledged write is lost, duplicated or reordered when a
broker fails under load.

Three real brokers and a real ZooKeeper; per scenario a fresh topic with two partitions,
replication factor 3, ``min.insync.replicas=2``, unclean election off. The verifiable producer
(acks=all, idempotence, unbounded retries) writes at a bounded rate and the verifiable
consumer reads concurrently while one broker, chosen by its role, fails:

* roles — the partition *leader* (it leads both partitions, is not the controller), a pure
  *follower* (leads nothing, is not the controller), the *controller* (it also leads
  partition 0 and follows partition 1);
* faults — *clean shutdown* (SIGTERM, controlled shutdown; restarted only after writes went on
  without it), *kill -9* (same, SIGKILL), *clean bounce* (SIGTERM then restart at once),
  *hard bounce* (SIGKILL then restart at once).

Each scenario checks, after the victim is back and the producer stopped: every acknowledged
value was read exactly once at the acknowledged partition and offset, in acknowledged order,
no offset below the end was skipped, every replica holds the same records, and every ISR is
complete again (read from a broker that was not the victim). Per-scenario figures are printed
and, when all twelve scenarios ran, written to ``docs/fault-matrix.md``.

One cluster serves the whole module; each scenario first heals it (every broker running and
registered by its current process, one controller known everywhere). Two more tests use the
same cluster: a fault sequence the matrix does not reach (a broker that led a partition
without writing to it must replicate as a follower afterwards) and the verifiable consumer's
group mode (commits, a second member resuming from them).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from kafkalite import protocol
from kafkalite.record.batch import decode_all
from tests.integration.test_cluster import produce
from tests.support.cluster import BrokerCluster, BrokerProcess
from tests.support.verifiable import (
    VerifiableConsumer,
    VerifiableProducer,
    check_delivery,
    consumed_by_partition,
    end_offsets,
    longest_ack_gap,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "docs" / "fault-matrix.md"
SESSION_TIMEOUT_MS = 6000
THROUGHPUT = 500  # records per second
ACKS_PER_PHASE = 500  # acknowledgements before the fault, during it and after the heal
MAX_MESSAGES = 20_000  # a safety bound; the producer is stopped long before
TOPIC_CONFIGS = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
ROLES = ("leader", "follower", "controller")
FAULTS = ("clean_shutdown", "hard_kill", "clean_bounce", "hard_bounce")
FAULT_TITLES = {"clean_shutdown": "clean shutdown (SIGTERM)", "hard_kill": "kill -9",
                "clean_bounce": "clean bounce", "hard_bounce": "hard bounce"}


@dataclass
class ScenarioResult:
    """The figures of one scenario (one row of the matrix table)."""

    role: str
    fault: str
    victim: int = -1
    sent: int = 0
    acked: int = 0
    errors: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    missing: int = 0
    unacknowledged_present: int = 0
    longest_ack_gap_s: float | None = None
    time_to_full_isr_s: float | None = None
    outcome: str = "not finished"
    notes: list[str] = field(default_factory=list)

    def row(self) -> str:
        def seconds(value: float | None) -> str:
            return "—" if value is None else f"{value:.1f}"
        return (f"| {self.role} | {FAULT_TITLES[self.fault]} | {self.victim} | {self.sent} | {self.acked} | "
                f"{self.errors} | {self.lost} | {self.duplicated} | {self.reordered} | {self.missing} | "
                f"{seconds(self.longest_ack_gap_s)} | {seconds(self.time_to_full_isr_s)} | {self.outcome} |")


TABLE_HEADER = ("| victim role | fault | broker | sent | acked | send errors | lost | duplicated | "
                "reordered partitions | skipped offsets | longest ack gap (s) | time to full ISR (s) | result |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def render_table(results: dict[tuple[str, str], ScenarioResult]) -> str:
    rows = [results[(role, fault)].row() for role in ROLES for fault in FAULTS if (role, fault) in results]
    return "\n".join([TABLE_HEADER, *rows])


def render_document(results: dict[tuple[str, str], ScenarioResult], elapsed_s: float) -> str:
    notes = [f"- {result.role} / {FAULT_TITLES[result.fault]}: {note}"
             for result in results.values() for note in result.notes]
    origin = ("Written by `tests/integration/test_fault_matrix.py` on every full run (all twelve scenarios); "
              "do not edit by hand.")
    setup = (f"Setup: 3 brokers and one ZooKeeper on loopback, `zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}`, "
             "`replica.lag.time.max.ms=6000`, unclean leader election off. Per scenario a fresh topic with 2 "
             "partitions, replication factor 3, `min.insync.replicas=2`. The verifiable producer sends unique "
             f"values at {THROUGHPUT} records/s with acks=all, idempotence on and unbounded retries; the verifiable "
             "consumer reads concurrently from the earliest offset.")
    victims = ("Victims: *leader* leads both partitions (not the controller); *follower* leads nothing (not the "
               "controller); *controller* is the active controller and also leads partition 0. Faults: *clean "
               "shutdown* is SIGTERM (controlled shutdown) and *kill -9* is SIGKILL, each with the broker kept down "
               f"until {ACKS_PER_PHASE} more writes were acknowledged without it, then restarted; *clean bounce* "
               "and *hard bounce* restart the broker right after SIGTERM / SIGKILL. Every scenario then waits for "
               f"{ACKS_PER_PHASE} more acknowledgements with the full ISR before the producer is stopped.")
    columns = ("Columns: *lost* = acknowledged values never read back; *duplicated* = values written at more than "
               "one offset; *reordered partitions* = partitions read in another order than acknowledged; *skipped "
               "offsets* = offsets below the end of a partition that the consumer never received; *longest ack "
               "gap* = the longest time without any acknowledgement; *time to full ISR* = from the victim's "
               "restart until its new process had registered in ZooKeeper and every partition's ISR held all "
               "three replicas again (seen by a broker that was not the victim; after kill -9 the registration "
               "waits for the killed process's session to expire). A *pass* also means every replica holds "
               "exactly the records the consumer read.")
    return "\n".join([
        "# Fault-injection matrix", "", origin, "", setup, "", victims, "", columns, "",
        render_table(results), "", f"Wall time of the run: {elapsed_s:.0f} s.", "",
        *(["## Notes", "", *notes, ""] if notes else []),
    ])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    directory = tmp_path_factory.mktemp("fault-matrix")
    brokers = BrokerCluster(directory, f"{zookeeper.connect_string}/fault-matrix-{uuid.uuid4().hex[:8]}", size=3,
                            session_timeout_ms=SESSION_TIMEOUT_MS,
                            extra_properties={"unclean.leader.election.enable": "false"}).start()
    try:
        yield brokers
    finally:
        brokers.stop()


@pytest.fixture(scope="module")
def registrations(cluster: BrokerCluster) -> Iterator[Registrations]:
    watcher = Registrations(cluster.zookeeper_connect)
    try:
        yield watcher
    finally:
        watcher.close()


@pytest.fixture(scope="module")
def matrix_results(request: pytest.FixtureRequest) -> Iterator[dict[tuple[str, str], ScenarioResult]]:
    """Collects every scenario's figures; prints the table at the end and, after a full run,
    rewrites docs/fault-matrix.md."""
    results: dict[tuple[str, str], ScenarioResult] = {}
    started = time.monotonic()
    yield results
    elapsed = time.monotonic() - started
    if not results:
        return
    table = render_table(results)
    lines = ["", "Fault-injection matrix:", *table.splitlines(),
             *(f"  {result.role} / {result.fault}: {note}" for result in results.values() for note in result.notes)]
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        print("\n".join(lines), flush=True)
    if len(results) == len(ROLES) * len(FAULTS):
        DOCUMENT.parent.mkdir(parents=True, exist_ok=True)
        DOCUMENT.write_text(render_document(results, elapsed))


# --- cluster helpers ------------------------------------------------------------------------------


class Registrations:
    """Reads the brokers' registration znodes: a restarted broker counts as back only once its
    own registration replaced the one its killed predecessor's session left behind."""

    def __init__(self, zookeeper_connect: str) -> None:
        self.client = KazooClient(hosts=zookeeper_connect, timeout=10.0)
        self.client.start(timeout=15)

    def creation(self, broker_id: int) -> int | None:
        """The zxid that created ``/brokers/ids/<id>`` (the broker epoch), None if absent."""
        stat = self.client.exists(f"/brokers/ids/{broker_id}")
        return None if stat is None else int(stat.czxid)

    def wait_renewed(self, cluster: BrokerCluster, broker_id: int, previous: int | None, timeout: float) -> None:
        cluster.wait_for(lambda: self.creation(broker_id) not in (None, previous), timeout,
                         f"broker {broker_id} registered by its new process")

    def close(self) -> None:
        self.client.stop()
        self.client.close()


def heal(cluster: BrokerCluster, registrations: Registrations) -> int:
    """Start every broker that is down and wait until all are registered (by the running
    processes) and one controller is known everywhere; returns the controller id."""
    for broker in cluster.brokers.values():
        if not broker.alive:
            previous = registrations.creation(broker.broker_id)
            broker.start()
            broker.wait_ready()
            registrations.wait_renewed(cluster, broker.broker_id, previous, SESSION_TIMEOUT_MS / 1000 + 30)
    for broker in cluster.brokers.values():
        broker.wait_ready()

    def agreed() -> int | None:
        controllers = set()
        for broker_id in cluster.brokers:
            described = cluster.describe(broker_id)
            if len(described["brokers"]) != cluster.size or described["controller_id"] <= 0:
                return None
            controllers.add(described["controller_id"])
        return controllers.pop() if len(controllers) == 1 else None
    return int(cluster.wait_for(agreed, 60, "every broker registered and one controller known everywhere"))


def plan(role: str, controller: int, broker_ids: list[int]) -> tuple[int, dict[str, list[int]]]:
    """The victim for ``role`` and a replica assignment that gives it exactly that role."""
    others = sorted(broker_id for broker_id in broker_ids if broker_id != controller)
    if role == "leader":
        victim, peer = others
        return victim, {"0": [victim, peer, controller], "1": [victim, controller, peer]}
    if role == "follower":
        peer, victim = others
        return victim, {"0": [peer, victim, controller], "1": [controller, victim, peer]}
    first, second = others
    return controller, {"0": [controller, first, second], "1": [first, controller, second]}


def create_topic(cluster: BrokerCluster, name: str, assignment: dict[str, list[int]]) -> None:
    answer = cluster.call("POST", protocol.CREATE_TOPICS, {"topics": [{
        "name": name, "replica_assignment": assignment, "configs": TOPIC_CONFIGS}], "timeout_ms": 30000})
    entry = answer["topics"][0]
    assert entry["error_code"] == 0, entry


def replica_values(broker: BrokerProcess, topic: str, partition: int) -> list[tuple[int, str]]:
    """The (offset, value) pairs in one replica's segment files."""
    directory = broker.directory / "data" / f"{topic}-{partition}"
    data = b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))
    return [(record.offset, (record.value or b"").decode("utf-8", "backslashreplace")) for record in decode_all(data)]


def log_excerpts(cluster: BrokerCluster, lines: int = 25) -> str:
    return "\n".join(f"--- broker {broker.broker_id} log tail\n{broker.log_tail(lines)}"
                     for broker in cluster.brokers.values())


# --- the checker itself ------------------------------------------------------------------------


def test_checker_flags_loss_duplication_reordering_and_holes() -> None:
    """The delivery check is not vacuous: each kind of damage is reported (no cluster needed)."""
    def acked(value: str, partition: int, offset: int) -> dict[str, Any]:
        return {"name": "producer_send_success", "topic": "t", "partition": partition, "offset": offset,
                "key": None, "value": value, "time_ms": 0}

    def read(*records: tuple[int, int, str]) -> dict[str, Any]:
        return {"name": "records_consumed", "count": len(records), "partitions": [],
                "records": [{"partition": p, "offset": o, "key": None, "value": v} for p, o, v in records]}

    produced = [acked("a", 0, 0), acked("b", 0, 1), acked("c", 0, 2), acked("d", 1, 0),
                {"name": "tool_data", "sent": 5, "acked": 4}]
    healthy = check_delivery(produced, [read((0, 0, "a"), (1, 0, "d"), (0, 1, "b"), (0, 2, "c"))], {0: 3, 1: 1})
    assert healthy.clean and healthy.sent == 5 and healthy.acked == 4
    lost = check_delivery(produced, [read((0, 0, "a"), (0, 1, "b"), (0, 2, "c"))], {0: 3, 1: 1})
    assert set(lost.lost) == {"d"} and lost.missing == {1: [0]} and not lost.clean
    duplicated = check_delivery(produced, [read((0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (0, 3, "b"),
                                                (1, 0, "d"))], {0: 4, 1: 1})
    assert set(duplicated.duplicated) == {"b"} and not duplicated.clean
    redelivered = check_delivery(produced, [read((0, 0, "a"), (0, 1, "b"), (0, 1, "b"), (0, 2, "c"),
                                                 (1, 0, "d"))], {0: 3, 1: 1})
    assert redelivered.clean and redelivered.redelivered == 1
    moved = check_delivery(produced, [read((0, 0, "a"), (0, 1, "c"), (0, 2, "b"), (1, 0, "d"))], {0: 3, 1: 1})
    assert set(moved.moved) == {"b", "c"} and moved.reordered == [0] and not moved.clean
    holes = check_delivery(produced, [read((0, 0, "a"), (0, 2, "c"), (1, 0, "d"))], {0: 3, 1: 1})
    assert set(holes.lost) == {"b"} and holes.missing == {0: [1]}
    extra = check_delivery(produced, [read((0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (0, 3, "x"), (1, 0, "d"))],
                           {0: 4, 1: 1})
    assert extra.clean and extra.unacknowledged_present == 1


# --- the matrix ---------------------------------------------------------------------------------


def inject(fault: str, victim: BrokerProcess) -> None:
    if fault in ("clean_shutdown", "clean_bounce"):
        victim.stop(timeout=60)
    else:
        victim.kill()
    if fault in ("clean_bounce", "hard_bounce"):
        victim.start()


def wait_in_sync_timed(cluster: BrokerCluster, topic: str, observer: int, since: float) -> float:
    cluster.wait_in_sync(topic, timeout=60, broker_id=observer)
    return time.monotonic() - since


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("role", ROLES)
def test_no_acknowledged_write_is_lost(cluster: BrokerCluster, registrations: Registrations,
                                       matrix_results: dict[tuple[str, str], ScenarioResult],
                                       tmp_path: Path, role: str, fault: str) -> None:
    result = ScenarioResult(role, fault)
    matrix_results[(role, fault)] = result
    controller = heal(cluster, registrations)
    victim_id, assignment = plan(role, controller, sorted(cluster.brokers))
    result.victim = victim_id
    victim = cluster.brokers[victim_id]
    observer = next(broker_id for broker_id in sorted(cluster.brokers) if broker_id != victim_id)
    topic = f"matrix-{role}-{fault.replace('_', '-')}"
    create_topic(cluster, topic, assignment)
    cluster.wait_in_sync(topic, timeout=30, broker_id=observer)

    consumer = VerifiableConsumer(cluster.bootstrap, topic, tmp_path / "consumer.stderr")
    producer = VerifiableProducer(cluster.bootstrap, topic, tmp_path / "producer.stderr", max_messages=MAX_MESSAGES,
                                  throughput=THROUGHPUT, value_prefix=f"{role}-{fault}")
    try:
        consumer.start().wait_for_event("startup_complete", 30)
        producer.start().wait_for_event("startup_complete", 30)
        producer.wait_for_acks(ACKS_PER_PHASE, 60)

        registered_before = registrations.creation(victim_id)
        fault_at = time.monotonic()
        inject(fault, victim)
        restarted_at = fault_at if fault.endswith("bounce") else None
        with producer.condition:
            acked_at_fault = producer.acked
        producer.wait_for_acks(acked_at_fault + ACKS_PER_PHASE, 60)  # writes go on without the victim
        if restarted_at is None:
            restarted_at = time.monotonic()
            victim.start()
        victim.wait_ready(60)
        registrations.wait_renewed(cluster, victim_id, registered_before, SESSION_TIMEOUT_MS / 1000 + 30)
        result.time_to_full_isr_s = wait_in_sync_timed(cluster, topic, observer, restarted_at)
        with producer.condition:
            acked_when_healed = producer.acked
        producer.wait_for_acks(acked_when_healed + ACKS_PER_PHASE, 60)  # and after the heal

        try:
            producer.terminate(60)  # its close waits at most 30 s after SIGTERM
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the verifiable producer did not exit within 60 s of SIGTERM\n"
                                 f"{producer.stderr_tail()}") from None
        tool_data = producer.tool_data()
        assert tool_data is not None, f"the producer printed no tool_data\n{producer.stderr_tail()}"
        cluster.wait_in_sync(topic, timeout=60, broker_id=observer)
        ends = end_offsets(cluster, topic, observer)
        consumer.wait_until_read(ends, 60)
        consumer.terminate(60)
        report = check_delivery(producer.snapshot(), consumer.snapshot(), ends)
        result.sent, result.acked, result.errors = report.sent, report.acked, report.errors
        result.lost, result.duplicated = len(report.lost), len(report.duplicated)
        result.reordered = len(report.reordered)
        result.missing = sum(len(offsets) for offsets in report.missing.values())
        result.unacknowledged_present = report.unacknowledged_present
        result.longest_ack_gap_s = longest_ack_gap(producer)
        if report.unacknowledged_present:
            result.notes.append(f"{report.unacknowledged_present} value(s) read that were never acknowledged "
                                f"(send errors: {report.error_kinds})")

        # Every replica holds exactly what the consumer read.
        read = consumed_by_partition(consumer)

        def replicas_agree() -> bool:
            return all(replica_values(broker, topic, partition) == read.get(partition, [])
                       for broker in cluster.brokers.values() for partition in ends)
        try:
            cluster.wait_for(replicas_agree, 20, "every replica holding the records the consumer read")
        except TimeoutError:
            differing = {(broker.broker_id, partition): len(replica_values(broker, topic, partition))
                         for broker in cluster.brokers.values() for partition in ends
                         if replica_values(broker, topic, partition) != read.get(partition, [])}
            result.notes.append(f"replicas differ from what was read (records per replica): {differing}")
            raise AssertionError(f"replicas differ from the consumer's view: {differing}\n"
                                 f"{log_excerpts(cluster)}") from None

        assert report.clean, f"{role}/{fault} (victim {victim_id}):\n{report.describe()}\n{log_excerpts(cluster)}"
        assert report.errors == 0, (f"{role}/{fault}: {report.errors} send errors {report.error_kinds}\n"
                                    f"{producer.stderr_tail()}")
        assert tool_data["acked"] == report.acked == tool_data["sent"], tool_data
        result.outcome = "pass"
    except BaseException as exc:
        if result.outcome != "pass":
            result.outcome = "FAIL"
            summary = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            result.notes.append(f"failed: {type(exc).__name__}: {summary[:300]}")
        raise
    finally:
        for tool in (producer, consumer):
            tool.kill()


# --- a fault sequence the matrix does not reach: leadership lost before any write ----------------


def test_follower_that_led_without_writing_catches_up(cluster: BrokerCluster, registrations: Registrations) -> None:
    """Broker B takes over a partition when A shuts down, writes nothing, and loses leadership
    to A again by a preferred election: as a follower it must replicate what A writes next and
    stay in the ISR."""
    controller = heal(cluster, registrations)
    first, second = sorted(broker_id for broker_id in cluster.brokers if broker_id != controller)
    topic = "empty-epoch-follower"
    create_topic(cluster, topic, {"0": [first, second, controller]})
    cluster.wait_in_sync(topic, timeout=30, broker_id=controller)
    for index in range(5):
        assert produce(cluster, topic, 0, [b"before-%d" % index]).error_code == 0
    registered_before = registrations.creation(first)
    cluster.brokers[first].stop(timeout=60)  # controlled shutdown: `second` leads a new epoch, writes nothing
    assert cluster.partitions(topic, controller)[0]["leader"] == second
    cluster.brokers[first].start()
    cluster.brokers[first].wait_ready()
    registrations.wait_renewed(cluster, first, registered_before, SESSION_TIMEOUT_MS / 1000 + 30)
    cluster.wait_in_sync(topic, timeout=30, broker_id=controller)
    answer = cluster.call("POST", protocol.ELECT_LEADERS, {"partitions": [{"topic": topic, "partition": 0}]},
                          broker_id=controller)
    assert answer["partitions"][0]["result"] == "NONE", answer
    cluster.wait_for(lambda: cluster.partitions(topic, controller)[0]["leader"] == first, 20, "preferred leader back")
    for index in range(5):
        assert produce(cluster, topic, 0, [b"after-%d" % index]).error_code == 0
    expected = [f"before-{index}" for index in range(5)] + [f"after-{index}" for index in range(5)]

    def replicated() -> bool:
        # A produce retried across the leadership change may be written twice (these sends are
        # not idempotent): the follower must hold exactly the leader's log, which holds them all.
        follower = [value for _, value in replica_values(cluster.brokers[second], topic, 0)]
        leader = [value for _, value in replica_values(cluster.brokers[first], topic, 0)]
        return follower == leader and [value for index, value in enumerate(leader)
                                       if value not in leader[:index]] == expected
    cluster.wait_for(replicated, 15, f"broker {second} replicating the new leader's writes")
    cluster.wait_in_sync(topic, timeout=30, broker_id=controller)


def test_verifiable_consumers_in_a_group_resume_from_committed_offsets(
        cluster: BrokerCluster, registrations: Registrations, tmp_path: Path) -> None:
    """The tools' group mode: a consumer commits after each poll, a second member of the same
    group starts where the first stopped; together they read every acknowledged value once."""
    controller = heal(cluster, registrations)
    topic = "verifiable-group"
    cluster.create_topic(topic, partitions=2, replication_factor=3, configs=TOPIC_CONFIGS)
    cluster.wait_in_sync(topic, timeout=30, broker_id=controller)
    producer = VerifiableProducer(cluster.bootstrap, topic, tmp_path / "producer.stderr", max_messages=1000,
                                  value_prefix="group")
    first = VerifiableConsumer(cluster.bootstrap, topic, tmp_path / "first.stderr", group_id="verifiers",
                               max_messages=400)
    second = VerifiableConsumer(cluster.bootstrap, topic, tmp_path / "second.stderr", group_id="verifiers",
                                timeout_ms=5000)
    try:
        producer.start()
        assert producer.wait(120) == 0, producer.stderr_tail()
        first.start()
        assert first.wait(120) == 0, first.stderr_tail()
        commits = [event for event in first.snapshot() if event.get("name") == "offsets_committed"]
        assert commits and all(event["success"] for event in commits), commits
        committed = {item["partition"]: item["offset"] for event in commits for item in event["offsets"]}
        assert sum(committed.values()) == first.consumed == 400
        second.start()
        assert second.wait(120) == 0, second.stderr_tail()
        ends = end_offsets(cluster, topic, controller)
        assert sum(ends.values()) == 1000
        report = check_delivery(producer.snapshot(), first.snapshot() + second.snapshot(), ends)
        assert report.clean and report.redelivered == 0 and report.consumed == 1000, report.describe()
        assert {event["name"] for event in second.snapshot()} >= {"startup_complete", "partitions_assigned",
                                                                  "records_consumed", "offsets_committed",
                                                                  "shutdown_complete"}
    finally:
        for tool in (producer, first, second):
            tool.kill()
