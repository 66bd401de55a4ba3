"""Run the verifiable producer and consumer as subprocesses and check what they report.

:class:`VerifiableProducer` and :class:`VerifiableConsumer` are those of
:mod:`kafkalite.local.verifiable` (a reader thread parses each JSON line as it arrives, so a
test can wait for events while the tool keeps running), started through
``scripts/kafkalite-verifiable-{producer,consumer}.sh`` so the tests exercise the scripts too.

:func:`check_delivery` compares the producer's acknowledgements with what the consumer read and
returns a :class:`DeliveryReport`: acknowledged values never read (lost), values written at
more than one offset (duplicated), values read at another place than acknowledged (moved),
partitions whose read order differs from the acknowledged order (reordered), and offsets below
the end of a partition that the consumer never saw (missing). :func:`end_offsets`,
:func:`longest_ack_gap` and :func:`consumed_by_partition` are the small cluster-side and
timing helpers the fault tests share.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from kafkalite import protocol
from kafkalite.local import verifiable as _local
from kafkalite.local.verifiable import ToolProcess
from tests.support.cluster import BrokerCluster

ROOT = Path(__file__).resolve().parents[2]
PRODUCER_SCRIPT = ROOT / "scripts" / "kafkalite-verifiable-producer.sh"
CONSUMER_SCRIPT = ROOT / "scripts" / "kafkalite-verifiable-consumer.sh"


class VerifiableProducer(_local.VerifiableProducer):
    """``kafkalite-verifiable-producer.sh`` with running counts of acknowledgements and errors."""

    def program(self) -> list[str]:
        return ["bash", str(PRODUCER_SCRIPT)]


class VerifiableConsumer(_local.VerifiableConsumer):
    """``kafkalite-verifiable-consumer.sh`` with the highest offset read per partition."""

    def program(self) -> list[str]:
        return ["bash", str(CONSUMER_SCRIPT)]


def end_offsets(cluster: BrokerCluster, topic: str, observer: int) -> dict[int, int]:
    """Each partition's end offset for consumers (its high watermark), asked of its leader as
    ``observer`` (a broker that was not the victim of a fault) reports it."""
    offsets: dict[int, int] = {}
    for item in cluster.partitions(topic, observer):
        answer = cluster.call("POST", protocol.LIST_OFFSETS, {"partitions": [
            {"topic": topic, "partition": item["partition"], "timestamp": protocol.LATEST_TIMESTAMP}]},
            broker_id=item["leader"], timeout=10)["partitions"][0]
        if answer["error_code"] != 0:
            raise AssertionError(f"list offsets of {topic}-{item['partition']} failed: {answer}")
        offsets[item["partition"]] = int(answer["offset"])
    return offsets


def longest_ack_gap(producer: VerifiableProducer) -> float | None:
    """The longest time in seconds between two consecutive acknowledgements."""
    times = sorted(int(event["time_ms"]) for event in producer.snapshot()
                   if event.get("name") == "producer_send_success")
    if len(times) < 2:
        return None
    return max(later - earlier for earlier, later in pairwise(times)) / 1000


def consumed_by_partition(consumer: VerifiableConsumer) -> dict[int, list[tuple[int, str]]]:
    """What the consumer read, per partition: the first reading of each offset, in offset order."""
    read: dict[int, dict[int, str]] = {}
    for event in consumer.snapshot():
        if event.get("name") == "records_consumed":
            for record in event["records"]:
                read.setdefault(int(record["partition"]), {}).setdefault(int(record["offset"]), str(record["value"]))
    return {partition: sorted(items.items()) for partition, items in read.items()}


@dataclass(frozen=True)
class Placement:
    """Where a record is: partition and offset."""

    partition: int
    offset: int


@dataclass
class DeliveryReport:
    """What the comparison of acknowledgements and consumed records found (see module docstring)."""

    sent: int = 0
    acked: int = 0
    errors: int = 0
    consumed: int = 0
    lost: dict[str, Placement] = field(default_factory=dict)
    duplicated: dict[str, list[Placement]] = field(default_factory=dict)
    redelivered: int = 0
    moved: dict[str, tuple[Placement, Placement]] = field(default_factory=dict)
    reordered: list[int] = field(default_factory=list)
    missing: dict[int, list[int]] = field(default_factory=dict)
    conflicting: dict[Placement, list[str]] = field(default_factory=dict)
    acked_twice: list[str] = field(default_factory=list)
    unacknowledged_present: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """No acknowledged write lost, moved or duplicated; order kept; nothing committed skipped."""
        return not (self.lost or self.duplicated or self.moved or self.reordered or self.missing
                    or self.conflicting or self.acked_twice)

    def describe(self, limit: int = 20) -> str:
        lines = [(f"sent={self.sent} acked={self.acked} errors={self.errors} consumed={self.consumed} "
                  f"lost={len(self.lost)} duplicated={len(self.duplicated)} redelivered={self.redelivered} "
                  f"moved={len(self.moved)} reordered_partitions={self.reordered} "
                  f"missing_offsets={sum(len(items) for items in self.missing.values())} "
                  f"unacknowledged_present={self.unacknowledged_present} error_kinds={self.error_kinds}")]
        if self.lost:
            sample = sorted(self.lost.items(), key=lambda item: (item[1].partition, item[1].offset))[:limit]
            lines.append("lost (value → acknowledged partition/offset): "
                         + ", ".join(f"{value}→p{place.partition}@{place.offset}" for value, place in sample))
        if self.duplicated:
            sample_items = list(self.duplicated.items())[:limit]
            lines.append("duplicated: " + ", ".join(
                f"{value} at " + "/".join(f"p{place.partition}@{place.offset}" for place in places)
                for value, places in sample_items))
        if self.moved:
            sample_moves = list(self.moved.items())[:limit]
            lines.append("moved (acknowledged → read): " + ", ".join(
                f"{value}: p{acked.partition}@{acked.offset}→p{read.partition}@{read.offset}"
                for value, (acked, read) in sample_moves))
        if self.missing:
            lines.append("missing offsets: " + ", ".join(
                f"p{partition}: {offsets[:limit]}" for partition, offsets in sorted(self.missing.items())))
        if self.conflicting:
            lines.append("one offset, several values: " + ", ".join(
                f"p{place.partition}@{place.offset}: {values}"
                for place, values in list(self.conflicting.items())[:limit]))
        if self.acked_twice:
            lines.append(f"acknowledged twice: {self.acked_twice[:limit]}")
        return "\n".join(lines)


def check_delivery(producer_events: Iterable[dict[str, Any]], consumer_events: Iterable[dict[str, Any]],
                   end_offsets: dict[int, int] | None = None, start_offsets: dict[int, int] | None = None,
                   ) -> DeliveryReport:
    """Compare what the producer had acknowledged with what the consumer read.

    ``end_offsets`` (partition → log end offset readable by consumers, taken after the fault
    healed) and ``start_offsets`` (default 0) bound the offsets every partition must have
    delivered without a hole.
    """
    report = DeliveryReport()
    acked: dict[str, Placement] = {}
    tool_data: dict[str, Any] | None = None
    error_kinds: Counter[str] = Counter()
    for event in producer_events:
        name = event.get("name")
        if name == "producer_send_success":
            value = str(event["value"])
            if value in acked:
                report.acked_twice.append(value)
            acked[value] = Placement(int(event["partition"]), int(event["offset"]))
        elif name == "producer_send_error":
            report.errors += 1
            error_kinds[str(event.get("exception"))] += 1
        elif name == "tool_data":
            tool_data = event
    report.acked = len(acked)
    report.error_kinds = dict(error_kinds)
    report.sent = int(tool_data["sent"]) if tool_data is not None else report.acked + report.errors

    # Every read, in reading order per partition.
    read_order: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for event in consumer_events:
        if event.get("name") != "records_consumed":
            continue
        for record in event.get("records", []):
            read_order[int(record["partition"])].append((int(record["offset"]), str(record["value"])))
            report.consumed += 1

    places_by_value: dict[str, list[Placement]] = defaultdict(list)
    values_by_place: dict[Placement, set[str]] = defaultdict(set)
    for partition, reads in read_order.items():
        seen_offsets: set[int] = set()
        for offset, value in reads:
            place = Placement(partition, offset)
            if offset in seen_offsets and value in values_by_place[place]:
                report.redelivered += 1
                continue
            seen_offsets.add(offset)
            values_by_place[place].add(value)
            places_by_value[value].append(place)
    report.conflicting = {place: sorted(values) for place, values in values_by_place.items() if len(values) > 1}
    report.duplicated = {value: places for value, places in places_by_value.items() if len(places) > 1}
    report.unacknowledged_present = sum(1 for value in places_by_value if value not in acked)

    for value, place in acked.items():
        read_places = places_by_value.get(value)
        if not read_places:
            report.lost[value] = place
        elif place not in read_places:
            report.moved[value] = (place, read_places[0])

    # Order: per partition, the acknowledged values in acknowledged-offset order must be read in
    # that same order (first reading of each).
    acked_by_partition: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for value, place in acked.items():
        acked_by_partition[place.partition].append((place.offset, value))
    for partition, items in sorted(acked_by_partition.items()):
        expected = [value for _, value in sorted(items)]
        wanted = set(expected)
        first_reads: list[str] = []
        seen: set[str] = set()
        for _, value in read_order.get(partition, []):
            if value in wanted and value not in seen:
                seen.add(value)
                first_reads.append(value)
        if first_reads != [value for value in expected if value in seen]:
            report.reordered.append(partition)

    # Nothing committed skipped: every offset from the start to the end offset was read.
    partitions = set(read_order) | set(acked_by_partition) | set(end_offsets or {})
    for partition in sorted(partitions):
        offsets = {offset for offset, _ in read_order.get(partition, [])}
        start = (start_offsets or {}).get(partition, 0)
        end = (end_offsets or {}).get(partition, max(offsets) + 1 if offsets else start)
        holes = [offset for offset in range(start, end) if offset not in offsets]
        if holes:
            report.missing[partition] = holes
    return report


__all__ = ["CONSUMER_SCRIPT", "DeliveryReport", "PRODUCER_SCRIPT", "Placement", "ToolProcess",
           "VerifiableConsumer", "VerifiableProducer", "check_delivery", "consumed_by_partition", "end_offsets",
           "longest_ack_gap"]
