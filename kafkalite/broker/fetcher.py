"""Follower replication: one fetch loop per source broker, as Kafka's replica fetcher threads.

A :class:`ReplicaFetcher` repeatedly sends, on its binary channel to the leader, one long-poll fetch
(marked with this broker's id as ``replica_id``) for every partition it follows from one leader, starting
at each local log end offset and carrying the epoch of the last fetched batch. The leader answers with batches to
append unchanged, its high watermark (adopted up to the local log end), or — when the local log
diverged from the leader's lineage — the epoch and end offset to truncate to (Kafka's KIP-101 /
KIP-279 rule, folded into fetch as in later Kafka versions). Partitions move between fetchers
when leadership changes.

The fetchers know the replica manager only through :class:`FollowerHost` (what they read of
it and the two calls they make), so this module does not import :mod:`kafkalite.broker.replica`.

Concurrency: event-loop only; each fetcher is one asyncio task. Applying a fetched chunk may
wait for a worker thread (CRC check of a big chunk, fsync); the fetcher re-checks that the
partition still follows the same leader before it uses the answer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from kafkalite import protocol
from kafkalite.broker.metadata import LiveBroker, MetadataCache
from kafkalite.broker.partition import Partition, Role
from kafkalite.broker.tls_contexts import inter_broker_context
from kafkalite.config import BrokerConfig
from kafkalite.errors import KafkaliteError, KafkaStorageError, OffsetOutOfRangeError
from kafkalite.transport import AsyncTransport, check_answer

log = logging.getLogger(__name__)

REPLICA_CHANNEL = "replica"


class FollowerHost(Protocol):
    """What the fetchers need of the broker's replica manager."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def broker_id(self) -> int: ...

    @property
    def metadata(self) -> MetadataCache: ...

    async def apply_fetched(self, partition: Partition, result: protocol.FetchResult) -> int:
        """Append a fetched chunk (or truncate as the leader says); returns bytes applied."""
        ...

    def handle_out_of_range(self, partition: Partition, leader_start: int, leader_end: int) -> None:
        """The fetch offset is outside the leader's log: truncate or start over."""
        ...


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(self, manager: FetcherManager, leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._wake = asyncio.Event()
        self._storage_failing: set[str] = set()  # partitions whose last apply hit a storage error
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{leader_id}")

    def add(self, partition: Partition) -> None:
        self.partitions[(partition.topic, partition.partition)] = partition
        self._wake.set()

    def remove(self, partition: Partition) -> None:
        key = (partition.topic, partition.partition)
        if self.partitions.get(key) is partition:
            del self.partitions[key]

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        replica_manager = self.manager.replica_manager
        config = replica_manager.config
        backoff = config.replica_fetch_backoff_ms / 1000
        while True:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            endpoint = replica_manager.metadata.endpoint(self.leader_id)
            if endpoint is None:
                await asyncio.sleep(backoff)
                continue
            snapshot = dict(self.partitions)
            request = protocol.FetchRequest(
                [protocol.FetchPartition(
                    partition.topic, partition.partition, partition.log.log_end_offset,
                    config.replica_fetch_max_bytes, partition.leader_epoch,
                    partition.log.epoch_cache.latest_epoch, partition.log.log_start_offset)
                 for partition in snapshot.values()],
                replica_id=replica_manager.broker_id, max_wait_ms=config.replica_fetch_wait_max_ms,
                min_bytes=config.replica_fetch_min_bytes, max_bytes=config.replica_fetch_max_bytes * 16,
                replica_epoch=self.manager.broker_epoch)
            try:
                connection = await self.manager.transport.connection(endpoint.address, REPLICA_CHANNEL)
                status, body = await connection.submit(
                    protocol.FETCH, [protocol.encode_fetch_request(request)],
                    timeout_ms=config.replica_fetch_wait_max_ms + config.request_timeout_ms)
                results = protocol.decode_fetch_response(check_answer(status, body))
            except KafkaliteError as exc:
                log.debug("fetch from broker %d failed: %s", self.leader_id, exc)
                await asyncio.sleep(backoff)
                continue
            need_backoff = False
            throttled_bytes = 0
            for result in results:
                partition = snapshot.get((result.topic, result.partition))
                if partition is None or self.partitions.get((result.topic, result.partition)) is not partition \
                        or partition.role is not Role.FOLLOWER or partition.leader_id != self.leader_id:
                    continue
                if result.error_code == 0:
                    try:
                        applied = await replica_manager.apply_fetched(partition, result)
                        if self._throttled(partition):
                            throttled_bytes += applied
                    except KafkaStorageError as exc:
                        # A full or failed log dir: the storage layer already said so; one line
                        # per partition until it applies data again, not one per fetch.
                        if partition.name not in self._storage_failing:
                            self._storage_failing.add(partition.name)
                            log.warning("%s: cannot apply replicated data until the log dir recovers: %s",
                                        partition.name, exc)
                        need_backoff = True
                    except KafkaliteError as exc:
                        log.error("%s: cannot apply replicated data: %s", partition.name, exc)
                        need_backoff = True
                    else:
                        if partition.name in self._storage_failing:
                            self._storage_failing.discard(partition.name)
                            log.info("%s: replicated data applies again", partition.name)
                elif result.error_code == OffsetOutOfRangeError.errno:
                    replica_manager.handle_out_of_range(partition, result.log_start_offset, result.high_watermark)
                else:
                    need_backoff = True
            if need_backoff:
                await asyncio.sleep(min(backoff, 0.2))
            rate = self._throttle_rate()
            if throttled_bytes and rate > 0:
                await asyncio.sleep(throttled_bytes / rate)

    def _throttle_rate(self) -> float:
        """``follower.replication.throttled.rate`` (bytes/s) from the dynamic broker configs."""
        value = self.manager.replica_manager.metadata.broker_configs.get("follower.replication.throttled.rate")
        try:
            return float(value) if value else 0.0
        except ValueError:
            return 0.0

    def _throttled(self, partition: Partition) -> bool:
        """Throttling applies to replicas being added by a reassignment (Kafka's throttled replicas)."""
        info = self.manager.replica_manager.metadata.partition(partition.topic, partition.partition)
        return info is not None and self.manager.replica_manager.broker_id in info.adding


class FetcherManager:
    """Assigns followed partitions to per-leader fetchers."""

    def __init__(self, replica_manager: FollowerHost) -> None:
        self.replica_manager = replica_manager
        self.fetchers: dict[int, ReplicaFetcher] = {}
        # This broker's epoch (the czxid of its registration), sent with every fetch: leaders
        # refuse follower fetches without the current one. Set by the broker on registration.
        self.broker_epoch = protocol.NO_BROKER_EPOCH
        self.transport = AsyncTransport(request_timeout_ms=replica_manager.config.request_timeout_ms,
                                        connections_per_host=2, client_id=f"broker-{replica_manager.broker_id}",
                                        ssl_context=inter_broker_context(replica_manager.config))

    def add_partition(self, partition: Partition) -> None:
        self.remove_partition(partition)
        fetcher = self.fetchers.get(partition.leader_id)
        if fetcher is None:
            fetcher = self.fetchers[partition.leader_id] = ReplicaFetcher(self, partition.leader_id)
        fetcher.add(partition)

    def remove_partition(self, partition: Partition) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(partition)

    def on_brokers_changed(self, live: dict[int, LiveBroker]) -> None:
        for fetcher in self.fetchers.values():
            fetcher._wake.set()

    async def stop(self) -> None:
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        await self.transport.close()
