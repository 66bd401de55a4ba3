"""The transaction coordinator's seams over the broker: the ``__transaction_state`` log, the
marker channel to partition leaders, and the cluster topology.

- :class:`ReplicaTxnStateLog` appends state records to a ``__transaction_state`` partition this
  broker leads (acks=all: the topic's ``min.insync.replicas`` is
  ``transaction.state.log.min.isr``) and reads one back for loading.
- :class:`BrokerMarkerChannel` writes one transaction's markers: partitions this broker leads
  through the replica service's ``write_txn_markers``, the others through the WriteTxnMarkers
  route of their leader (HTTP, the brokers' own protocol). A partition without a known leader,
  or whose leader cannot be reached, answers NOT_LEADER_OR_FOLLOWER: the coordinator retries.
- :class:`BrokerTxnTopology` answers partition counts and leaders from the metadata cache and
  creates ``__transaction_state`` on first use, like the offsets topic is.

Concurrency: event-loop only; reading a partition's files happens on a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kafkalite import protocol
from kafkalite.broker.admin import AdminService, NewTopic
from kafkalite.broker.group_offsets import OFFSETS_TOPIC, KeyedRecord, ReplicaOffsetLog
from kafkalite.broker.metadata import MetadataCache
from kafkalite.broker.replica import ReplicaManager
from kafkalite.broker.services import TxnMarkerRequest, TxnMarkerResult
from kafkalite.broker.txn_records import TRANSACTION_STATE_TOPIC
from kafkalite.config import BrokerConfig
from kafkalite.errors import (
    BrokerResponseError,
    CoordinatorNotAvailableError,
    KafkaliteError,
    NotCoordinatorError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownServerError,
)
from kafkalite.record.batch import build_batch
from kafkalite.transport import AsyncTransport

log = logging.getLogger(__name__)

_NOT_LEADER = 6

#: Errors of a ``__transaction_state`` write as a transactional client must see them (Kafka's mapping).
_WRITE_ERROR_MAP: dict[int, type[BrokerResponseError]] = {
    3: CoordinatorNotAvailableError, 19: CoordinatorNotAvailableError, 20: CoordinatorNotAvailableError,
    7: CoordinatorNotAvailableError, 6: NotCoordinatorError, 56: NotCoordinatorError,
    10: UnknownServerError, 18: UnknownServerError,
}

LocalMarkerWriter = Callable[[list[TxnMarkerRequest], int], Awaitable[list[TxnMarkerResult]]]


class ReplicaTxnStateLog:
    """:class:`~kafkalite.broker.txn_coordinator.TxnStateLog` over the replica manager."""

    def __init__(self, config: BrokerConfig, replica_manager: ReplicaManager) -> None:
        self.config = config
        self.replica_manager = replica_manager

    async def append(self, partition: int, records: list[KeyedRecord]) -> BrokerResponseError | None:
        batch = build_batch([value for _, value in records], keys=[key for key, _ in records])
        request = protocol.ProduceRequest(-1, self.config.request_timeout_ms,
                                          [protocol.ProducePartition(TRANSACTION_STATE_TOPIC, partition, batch)])
        results = await self.replica_manager.produce(request, allow_internal=True)
        code = results[0].error_code if results else 0
        if code == 0:
            return None
        mapped = _WRITE_ERROR_MAP.get(code)
        message = results[0].error_message
        return mapped(message) if mapped else protocol.error_for(code, message)

    async def read(self, partition: int) -> list[KeyedRecord]:
        hosted = self.replica_manager.partitions.get((TRANSACTION_STATE_TOPIC, partition))
        if hosted is None:
            raise NotCoordinatorError(f"{TRANSACTION_STATE_TOPIC}-{partition} is not hosted here")
        return await asyncio.to_thread(ReplicaOffsetLog._read_log, hosted.log)


def encode_markers(markers: list[TxnMarkerRequest], timeout_ms: int) -> dict[str, Any]:
    """The JSON body of the WriteTxnMarkers route."""
    return {"timeout_ms": timeout_ms, "markers": [
        {"producer_id": marker.producer_id, "producer_epoch": marker.producer_epoch, "committed": marker.committed,
         "coordinator_epoch": marker.coordinator_epoch,
         "partitions": [{"topic": topic, "partition": number} for topic, number in marker.partitions]}
        for marker in markers]}


def decode_marker_results(body: Any) -> list[TxnMarkerResult]:
    """The WriteTxnMarkers route's answer."""
    return [TxnMarkerResult(protocol.require(item, "producer_id", int), {
        (protocol.require(entry, "topic", str), protocol.require(entry, "partition", int)):
            protocol.require(entry, "error_code", int) for entry in protocol.require_objects(item, "partitions")})
        for item in protocol.require_objects(body, "markers")]


class BrokerMarkerChannel:
    """:class:`~kafkalite.broker.txn_coordinator.MarkerChannel` over this broker and its peers."""

    def __init__(self, config: BrokerConfig, metadata: MetadataCache, write_local: LocalMarkerWriter,
                 transport: AsyncTransport) -> None:
        self.config = config
        self.metadata = metadata
        self.write_local = write_local
        self.transport = transport

    async def send(self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                   partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        by_leader: dict[int, list[tuple[str, int]]] = {}
        results: dict[tuple[str, int], int] = {}
        for item in partitions:
            info = self.metadata.partition(*item)
            if info is None:
                results[item] = 3
            elif info.leader < 0:
                results[item] = _NOT_LEADER
            else:
                by_leader.setdefault(info.leader, []).append(item)

        async def one_leader(leader: int, items: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
            marker = TxnMarkerRequest(producer_id, producer_epoch, committed, coordinator_epoch, items)
            timeout_ms = self.config.request_timeout_ms
            try:
                if leader == self.config.broker_id:
                    answers = await self.write_local([marker], timeout_ms)
                else:
                    endpoint = self.metadata.endpoint(leader)
                    if endpoint is None:
                        return dict.fromkeys(items, _NOT_LEADER)
                    body = await self.transport.request_json(endpoint.address, "POST", protocol.WRITE_TXN_MARKERS,
                                                             encode_markers([marker], timeout_ms),
                                                             timeout_ms=timeout_ms + 5000)
                    answers = decode_marker_results(body)
            except KafkaliteError as exc:
                log.info("markers of producer %d to broker %d failed: %s", producer_id, leader, exc)
                return dict.fromkeys(items, _NOT_LEADER)
            errors = answers[0].errors if answers else {}
            return {item: errors.get(item, _NOT_LEADER) for item in items}

        for answer in await asyncio.gather(*(one_leader(leader, items) for leader, items in by_leader.items())):
            results.update(answer)
        return results


class BrokerTxnTopology:
    """:class:`~kafkalite.broker.txn_coordinator.TxnTopology` over the metadata cache and admin service."""

    def __init__(self, config: BrokerConfig, metadata: MetadataCache, admin: AdminService) -> None:
        self.config = config
        self.metadata = metadata
        self.admin = admin

    def _count(self, topic: str) -> int:
        info = self.metadata.topics.get(topic)
        return len(info.partitions) if info and info.partitions else 0

    def state_partition_count(self) -> int:
        return self._count(TRANSACTION_STATE_TOPIC)

    async def create_state_topic(self) -> BrokerResponseError | None:
        config = self.config
        live = len(self.metadata.brokers)
        factor = config.transaction_state_log_replication_factor
        if live < factor:
            return CoordinatorNotAvailableError(
                f"{TRANSACTION_STATE_TOPIC} needs transaction.state.log.replication.factor={factor} live brokers, "
                f"{live} are alive")
        topic = NewTopic(TRANSACTION_STATE_TOPIC, config.transaction_state_log_num_partitions, factor,
                         configs={"cleanup.policy": "compact",
                                  "min.insync.replicas": str(config.transaction_state_log_min_isr),
                                  "segment.bytes": str(config.transaction_state_log_segment_bytes)})
        try:
            await self.admin.create_topic(topic, wait_ms=5000, internal=True)
        except TopicAlreadyExistsError:
            pass
        except RequestTimedOutError:
            return CoordinatorNotAvailableError(f"{TRANSACTION_STATE_TOPIC} is being created")
        except BrokerResponseError as exc:
            return CoordinatorNotAvailableError(f"cannot create {TRANSACTION_STATE_TOPIC}: {exc}")
        await self.metadata.wait_for(lambda: self.state_partition_count() > 0, 5.0)
        return None if self.state_partition_count() else CoordinatorNotAvailableError(
            f"{TRANSACTION_STATE_TOPIC} not ready")

    def coordinator_endpoint(self, partition: int) -> tuple[int, str, int] | None:
        info = self.metadata.partition(TRANSACTION_STATE_TOPIC, partition)
        endpoint = self.metadata.endpoint(info.leader) if info else None
        return None if endpoint is None else (endpoint.broker_id, endpoint.host, endpoint.port)

    def partition_exists(self, topic: str, partition: int) -> bool:
        return self.metadata.partition(topic, partition) is not None

    def offsets_partition(self, group_id: str) -> int:
        """From the topic's partition count, or ``offsets.topic.num.partitions`` (which it will
        be created with) before it exists, as Kafka computes it."""
        count = self._count(OFFSETS_TOPIC) or self.config.offsets_topic_num_partitions
        return protocol.group_partition(group_id, count)
