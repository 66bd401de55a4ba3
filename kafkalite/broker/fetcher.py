"""Follower replication: one fetch loop per source broker, as Kafka's replica fetcher threads.

A :class:`ReplicaFetcher` repeatedly sends, on its binary channel to the leader, one long-poll fetch
(marked with this broker's id as ``replica_id``) for the partitions it follows from one leader, in a
fetch session (:mod:`kafkalite.broker.fetch_session`): the first fetch carries every partition, each
later one only the partitions whose position (local log end offset, leader epoch, epoch of the last
fetched batch, log start) changed. The leader answers, for the partitions with news, batches to
append unchanged, its high watermark (adopted up to the local log end), or — when the local log
diverged from the leader's lineage — the epoch and end offset to truncate to (Kafka's KIP-101 /
KIP-279 rule, folded into fetch as in later Kafka versions). An idle follower costs one parked
fetch per leader, whatever its partition count. Partitions move between fetchers when
leadership changes.

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
from kafkalite.broker.fetch_session import next_epoch
from kafkalite.broker.metadata import LiveBroker, MetadataCache
from kafkalite.broker.partition import Partition, Role
from kafkalite.broker.tls_contexts import inter_broker_context
from kafkalite.config import BrokerConfig
from kafkalite.errors import KafkaliteError, KafkaStorageError, OffsetOutOfRangeError
from kafkalite.transport import AsyncTransport, check_answer

log = logging.getLogger(__name__)

REPLICA_CHANNEL = "replica"
#: Every this often a fetcher compares every partition's position with what its leader was told.
FULL_CHECK_SECONDS = 60.0


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


def _position(partition: Partition) -> tuple[int, int, int, int]:
    """What a fetch tells the leader of a partition: log end, leader epoch, last fetched epoch and
    log start."""
    partition_log = partition.log
    return (partition_log.log_end_offset, partition.leader_epoch, partition_log.epoch_cache.latest_epoch,
            partition_log.log_start_offset)


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker, in a fetch session:
    after a full fetch, each fetch carries only the partitions whose position changed (and those
    it stopped following); the leader keeps the rest. Every :data:`FULL_CHECK_SECONDS` it compares
    every partition's position with what the leader was told, so a change made outside the
    fetcher reaches the leader too."""

    def __init__(self, manager: FetcherManager, leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._wake = asyncio.Event()
        self._storage_failing: set[str] = set()  # partitions whose last apply hit a storage error
        # The fetch session: its id and the epoch of the next fetch (0 and 0: the next fetch is
        # a full one), the positions the leader holds, the partitions to tell it of next.
        self.session_id = 0
        self.session_epoch = 0
        self._told: dict[tuple[str, int], tuple[int, int, int, int]] = {}
        self._to_tell: set[tuple[str, int]] = set()
        self._forgotten: set[tuple[str, int]] = set()
        self._last_full_check = 0.0
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{leader_id}")

    def add(self, partition: Partition) -> None:
        key = (partition.topic, partition.partition)
        self.partitions[key] = partition
        self._forgotten.discard(key)
        self._to_tell.add(key)
        self._wake.set()

    def remove(self, partition: Partition) -> None:
        key = (partition.topic, partition.partition)
        if self.partitions.get(key) is partition:
            del self.partitions[key]
            self._to_tell.discard(key)
            if self._told.pop(key, None) is not None:
                self._forgotten.add(key)

    def reset_session(self) -> None:
        """Open a new session with the next fetch (after a failed fetch or a refused session)."""
        self.session_id = 0
        self.session_epoch = 0

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    def _next_request(self, config: BrokerConfig, broker_id: int) -> protocol.FetchRequest:
        """The next fetch of the session (a full one when no session is open)."""
        now = asyncio.get_running_loop().time()
        if self.session_id == 0:  # a full fetch opens the session
            self._told.clear()
            self._forgotten.clear()
            self._to_tell = set(self.partitions)
            self._last_full_check = now
        elif now - self._last_full_check >= FULL_CHECK_SECONDS:
            self._last_full_check = now
            self._to_tell.update(key for key, partition in self.partitions.items()
                                 if self._told.get(key) != _position(partition))
        items = []
        for key in self._to_tell:
            partition = self.partitions.get(key)
            if partition is None:
                continue
            position = self._told[key] = _position(partition)
            items.append(protocol.FetchPartition(partition.topic, partition.partition, position[0],
                                                 config.replica_fetch_max_bytes, position[1], position[2],
                                                 position[3]))
        session = protocol.FetchSessionRequest(self.session_id, self.session_epoch, sorted(self._forgotten))
        self._to_tell = set()
        self._forgotten = set()
        request = protocol.FetchRequest(
            items, replica_id=broker_id, max_wait_ms=config.replica_fetch_wait_max_ms,
            min_bytes=config.replica_fetch_min_bytes, max_bytes=config.replica_fetch_max_bytes * 16,
            replica_epoch=self.manager.broker_epoch, session=session)
        return request

    async def _run(self) -> None:
        replica_manager = self.manager.replica_manager
        config = replica_manager.config
        backoff = config.replica_fetch_backoff_ms / 1000
        while True:
            if not self.partitions:
                self._wake.clear()
                if self.session_id:
                    self.reset_session()  # a session of no partitions is not kept
                await self._wake.wait()
                continue
            if self.manager.broker_epoch < 0:
                await self.manager.registered.wait()
                continue
            endpoint = replica_manager.metadata.endpoint(self.leader_id)
            if endpoint is None:
                await asyncio.sleep(backoff)
                continue
            request = self._next_request(config, replica_manager.broker_id)
            try:
                connection = await self.manager.transport.connection(endpoint.address, REPLICA_CHANNEL)
                status, body = await connection.submit(
                    protocol.FETCH, [protocol.encode_fetch_request(request)],
                    timeout_ms=config.replica_fetch_wait_max_ms + config.request_timeout_ms)
                session_id, session_error, results = protocol.decode_session_fetch_response(
                    check_answer(status, body))
            except KafkaliteError as exc:
                log.debug("fetch from broker %d failed: %s", self.leader_id, exc)
                self.reset_session()
                await asyncio.sleep(backoff)
                continue
            if session_error:
                log.debug("fetch session %d with broker %d refused (error %d); opening a new one",
                          self.session_id, self.leader_id, session_error)
                self.reset_session()
                continue
            if self.session_id == 0:
                self.session_id = session_id
                self.session_epoch = 1 if session_id else 0
            else:
                self.session_epoch = next_epoch(self.session_epoch)
            need_backoff = False
            throttled_bytes = 0
            for result in results:
                key = (result.topic, result.partition)
                partition = self.partitions.get(key)
                if partition is None or partition.role is not Role.FOLLOWER or partition.leader_id != self.leader_id:
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
                    # The leader answered an error: tell it of this partition again, so it is read
                    # (and answered) once more after the backoff.
                    self._to_tell.add(key)
                if self._told.get(key) != _position(partition):
                    self._to_tell.add(key)
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
        self.stopped = False
        # This broker's epoch (the czxid of its registration), sent with every fetch: leaders
        # refuse follower fetches without the current one. Set by the broker on registration;
        # fetchers send nothing before (they wait for ``registered``).
        self.broker_epoch = protocol.NO_BROKER_EPOCH
        self.registered = asyncio.Event()
        self.transport = AsyncTransport(request_timeout_ms=replica_manager.config.request_timeout_ms,
                                        connections_per_host=2, client_id=f"broker-{replica_manager.broker_id}",
                                        ssl_context=inter_broker_context(replica_manager.config))

    def set_broker_epoch(self, broker_epoch: int) -> None:
        """This broker registered (again) with ``broker_epoch``: fetchers send it from now on."""
        self.broker_epoch = broker_epoch
        if broker_epoch >= 0:
            self.registered.set()

    def add_partition(self, partition: Partition) -> None:
        if self.stopped:
            return  # the broker is shutting down: it follows nothing any more
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

    async def stop_following(self) -> None:
        """Stop every fetcher and start none again (a controlled shutdown begins: as Kafka's
        StopReplica, the broker stops following so that no leader takes it back into an ISR)."""
        self.stopped = True
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()

    async def stop(self) -> None:
        await self.stop_following()
        await self.transport.close()
