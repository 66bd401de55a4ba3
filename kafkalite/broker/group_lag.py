"""Consumer lag computed by the broker: per group this broker coordinates and per partition
with a committed offset, the partition's high watermark minus the committed offset (what
``kafka-consumer-groups.sh --describe`` shows as LAG), so ``GET /metrics`` needs no external
lag checker.

The high watermark of a partition this broker leads is read from its replica; the others are
asked of their leaders with one ListOffsets (latest) request per leader, concurrently and within
``timeout_ms``. A partition whose leader is unknown or does not answer is left out of the
answer (a missing series, not a made-up figure).

Concurrency: event-loop only; :meth:`ConsumerLag.compute` reads the coordinator's groups and
the replicas on the loop, and awaits only the requests to other brokers.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from kafkalite import protocol
from kafkalite.broker.group_coordinator import GroupCoordinator
from kafkalite.broker.metadata import MetadataCache
from kafkalite.broker.partition import Role
from kafkalite.broker.replica import ReplicaManager
from kafkalite.errors import KafkaliteError
from kafkalite.transport import AsyncTransport

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One group's position on one partition."""

    group_id: str
    topic: str
    partition: int
    committed_offset: int
    log_end_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.log_end_offset - self.committed_offset)


class ConsumerLag:
    """Lag of the groups this broker coordinates (see the module docstring)."""

    def __init__(self, broker_id: int, groups: GroupCoordinator, replica_manager: ReplicaManager,
                 metadata: MetadataCache, transport: AsyncTransport) -> None:
        self.broker_id = broker_id
        self.groups = groups
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.transport = transport

    async def compute(self, timeout_ms: int) -> list[PartitionLag]:
        committed = self.groups.committed_positions()
        wanted = sorted({(topic, number) for _, topic, number, _ in committed})
        ends: dict[tuple[str, int], int] = {}
        remote: dict[int, list[tuple[str, int]]] = {}
        for key in wanted:
            partition = self.replica_manager.partitions.get(key)
            if partition is not None and partition.role is Role.LEADER:
                ends[key] = partition.high_watermark
                continue
            info = self.metadata.partition(*key)
            if info is not None and info.leader >= 0 and info.leader != self.broker_id:
                remote.setdefault(info.leader, []).append(key)
        if remote:
            ends.update(await offsets_at_leaders(self.metadata, self.transport, remote, LATEST_TIMESTAMP, timeout_ms))
        return [PartitionLag(group_id, topic, number, offset, ends[(topic, number)])
                for group_id, topic, number, offset in committed if (topic, number) in ends]


async def offsets_at_leaders(metadata: MetadataCache, transport: AsyncTransport,
                             by_leader: dict[int, list[tuple[str, int]]], timestamp: int,
                             timeout_ms: int) -> dict[tuple[str, int], int]:
    """The offsets for ``timestamp`` (-1 latest, -2 earliest, else the first at or after it)
    of partitions grouped by their leader: one ListOffsets request per leader, concurrently.
    A leader that is unknown or does not answer, and a partition answered with an error, are
    left out."""

    async def ask(leader: int, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        endpoint = metadata.endpoint(leader)
        if endpoint is None:
            return {}
        body = {"isolation_level": protocol.READ_UNCOMMITTED,
                "partitions": [{"topic": topic, "partition": number, "timestamp": timestamp}
                               for topic, number in keys]}
        try:
            answer = await transport.request_json(endpoint.address, "POST", protocol.LIST_OFFSETS, body,
                                                  timeout_ms=timeout_ms)
        except KafkaliteError as exc:
            log.debug("broker %d did not answer ListOffsets: %s", leader, exc)
            return {}
        return {(str(item["topic"]), int(item["partition"])): int(item["offset"])
                for item in answer.get("partitions", []) if int(item.get("error_code", 0)) == 0}

    found: dict[tuple[str, int], int] = {}
    for answer in await asyncio.gather(*(ask(leader, keys) for leader, keys in by_leader.items())):
        found.update(answer)
    return found
