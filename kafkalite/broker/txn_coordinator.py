"""The transaction coordinator: Kafka's KIP-98 transactions, coordinated per transactional id.

Each transactional id belongs to one partition of the internal, compacted
``__transaction_state`` topic (``abs(java hash(id)) % partitions``); the leader of that
partition coordinates it, with the partition's leader epoch as its *coordinator epoch*. On
becoming leader the coordinator loads the partition (answering COORDINATOR_LOAD_IN_PROGRESS
meanwhile) and resumes the transactions it finds prepared; on losing it, it forgets them and
requests answer NOT_COORDINATOR.

Every state change is written to ``__transaction_state`` (acks=all) before it is acted on or
answered; while a change is being written, or while a commit's or abort's markers are in
flight, other requests for the id answer CONCURRENT_TRANSACTIONS (clients retry it). A producer
that begins its next transaction right after a commit usually finds the markers still in flight:
its AddPartitionsToTxn / AddOffsetsToTxn waits for them (at most
:data:`COMPLETION_WAIT_SECONDS`) instead, which saves every short transaction a client's retry
backoff. When such a request is waiting as the last marker is written, the Complete state is
only adopted in memory, not written: the request's own Ongoing record, written next, supersedes
the PrepareCommit / PrepareAbort record in the compacted log (a coordinator that loads the
partition before that record is written resends the markers, which the leaders take again), so
a transaction that follows another costs one ``__transaction_state`` write fewer.

- InitProducerId: a producer id for the transactional id (from the cluster's producer-id
  blocks) with its epoch bumped on every call, which fences an older instance (its requests
  then answer PRODUCER_FENCED); an ongoing transaction of the older instance is aborted first
  (epoch bumped, PrepareAbort, markers) and the new instance is told CONCURRENT_TRANSACTIONS
  until that is done.
- AddPartitionsToTxn / AddOffsetsToTxn: Ongoing, with the partitions (the group's
  ``__consumer_offsets`` partition for AddOffsetsToTxn).
- EndTxn: PrepareCommit / PrepareAbort is written, the client answered, then a marker is
  written into every partition of the transaction (by its leader; retried until every leader
  took it), then CompleteCommit / CompleteAbort.
- Transactions open longer than their timeout are aborted (epoch bumped, so the producer is
  fenced), and ids idle in a complete state for ``transactional.id.expiration.ms`` are removed
  with a tombstone, by a periodic sweep (:meth:`TransactionCoordinator.sweep`).

The coordinator's collaborators are seams: :class:`TxnStateLog` (append and read a partition of
``__transaction_state``), :class:`MarkerChannel` (write markers to partition leaders) and
:class:`TxnTopology` (the topic's partitions and leaders), implemented over the broker in
:mod:`kafkalite.broker.txn_markers`.

Concurrency: event-loop only. Requests and marker tasks interleave at their awaits; the
``pending`` mark of a transaction is the only lock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from kafkalite import protocol
from kafkalite.broker.txn_records import (
    MAX_PRODUCER_EPOCH,
    TRANSACTION_STATE_TOPIC,
    TxnMetadata,
    TxnState,
    encode_key,
    replay,
)
from kafkalite.broker.wake_grid import delay_to_grid
from kafkalite.config import BrokerConfig
from kafkalite.errors import (
    BrokerResponseError,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaliteError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)

__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionCoordinator"]

log = logging.getLogger(__name__)

KeyedRecord = tuple[bytes, bytes | None]

#: The internal topic of committed offsets (a group's partition of it joins a transaction).
OFFSETS_TOPIC = "__consumer_offsets"

#: Marker errors after which the coordinator stops sending (a newer producer epoch or coordinator won).
_FENCED_MARKER_CODES = frozenset({47, 52})
_UNKNOWN_TOPIC_OR_PARTITION = 3
_MARKER_BACKOFF_MIN = 0.05
_MARKER_BACKOFF_MAX = 1.0
#: How long AddPartitionsToTxn / AddOffsetsToTxn wait for the previous transaction's markers and
#: Complete state before answering CONCURRENT_TRANSACTIONS (a few milliseconds when the
#: partitions' leaders are up).
COMPLETION_WAIT_SECONDS = 0.1


class TxnStateLog(Protocol):
    """One broker's access to the partitions of ``__transaction_state`` it leads."""

    async def append(self, partition: int, records: list[KeyedRecord]) -> BrokerResponseError | None:
        """Append keyed records with acks=all; the error as a transactional client must see it."""
        ...

    async def read(self, partition: int) -> list[KeyedRecord]:
        """Every keyed record of the partition, oldest first."""
        ...


class MarkerChannel(Protocol):
    """Writes one transaction's markers into partitions, through each partition's leader."""

    async def send(self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                   partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Kafka's error code per partition (0: the marker is written and replicated)."""
        ...


class TxnTopology(Protocol):
    """The cluster as the coordinator needs it."""

    def state_partition_count(self) -> int:
        """Partitions of ``__transaction_state`` (0: the topic does not exist yet)."""
        ...

    async def create_state_topic(self) -> BrokerResponseError | None:
        """Create ``__transaction_state`` (first use); the error a client should retry on."""
        ...

    def coordinator_endpoint(self, partition: int) -> tuple[int, str, int] | None:
        """(broker id, host, port) of the leader of a ``__transaction_state`` partition."""
        ...

    def partition_exists(self, topic: str, partition: int) -> bool:
        ...

    def offsets_partition(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of a group (raises when the topic is missing)."""
        ...


@dataclass(frozen=True)
class TxnDescription:
    transactional_id: str
    error: BrokerResponseError | None
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    partitions: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class TxnListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TxnListAnswer:
    error: BrokerResponseError | None
    unknown_states: list[str]
    transactions: list[TxnListing]


class TransactionCoordinator:
    """Transactions coordinated by this broker. See the module docstring."""

    def __init__(self, config: BrokerConfig, topology: TxnTopology, state_log: TxnStateLog,
                 markers: MarkerChannel, next_producer_id: Callable[[], Awaitable[int]],
                 wall_ms: Callable[[], int]) -> None:
        self.config = config
        self.topology = topology
        self.state_log = state_log
        self.markers = markers
        self.next_producer_id = next_producer_id
        self.wall_ms = wall_ms
        self.transactions: dict[str, TxnMetadata] = {}
        #: Partition → coordinator epoch, for the partitions loaded and led here.
        self.owned: dict[int, int] = {}
        self.loading: set[int] = set()
        self._load_tasks: dict[int, asyncio.Task[None]] = {}
        #: Partition → the leader epoch it is loaded (or being loaded) for.
        self._load_epochs: dict[int, int] = {}
        self._marker_tasks: dict[str, asyncio.Task[None]] = {}
        #: Transactional id → AddPartitionsToTxn / AddOffsetsToTxn requests waiting for its markers.
        self._waiting_adds: dict[str, int] = {}
        self._sweeper: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop(), name="txn-sweeper")

    async def stop(self) -> None:
        tasks = [task for task in [self._sweeper, *self._load_tasks.values(), *self._marker_tasks.values()]
                 if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for number in list(self.owned):
            self.unload(number)

    # -- ownership ----------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        count = self.topology.state_partition_count()
        if count == 0:
            raise NotCoordinatorError(f"the {TRANSACTION_STATE_TOPIC} topic does not exist yet")
        return protocol.group_partition(transactional_id, count)

    def _check_owner(self, transactional_id: str) -> int:
        if not transactional_id:
            raise InvalidRequestError("the transactional id must not be empty")
        number = self.partition_for(transactional_id)
        if number in self.loading:
            raise CoordinatorLoadInProgressError(f"{TRANSACTION_STATE_TOPIC}-{number} is still loading")
        if number not in self.owned:
            raise NotCoordinatorError(f"this broker does not coordinate transactional id {transactional_id}")
        return number

    def on_leadership(self, topic: str, number: int, is_leader: bool, leader_epoch: int) -> None:
        """Load a ``__transaction_state`` partition this broker now leads; unload one it lost."""
        if topic != TRANSACTION_STATE_TOPIC:
            return
        if is_leader:
            if self._load_epochs.get(number) == leader_epoch:
                return  # loaded, or being loaded, for this leader epoch already
            # a new leader epoch (possibly after another broker coordinated meanwhile): reload,
            # so that the state and the coordinator epoch are the ones of this leadership
            task = self._load_tasks.pop(number, None)
            if task is not None:
                task.cancel()
            self.unload(number)
            self.loading.add(number)
            self._load_epochs[number] = leader_epoch
            self._load_tasks[number] = asyncio.get_running_loop().create_task(
                self.load(number, leader_epoch), name=f"txn-load-{number}")
        else:
            task = self._load_tasks.pop(number, None)
            if task is not None:
                task.cancel()
            self.loading.discard(number)
            self.unload(number)

    async def load(self, number: int, coordinator_epoch: int) -> None:
        """Replay a partition and take over its transactions; prepared ones get their markers."""
        self.loading.add(number)
        try:
            records = await self.state_log.read(number)
            loaded = replay(records)
            for transactional_id, metadata in loaded.items():
                self.transactions[transactional_id] = metadata
            self.owned[number] = coordinator_epoch
            log.info("loaded %s-%d (coordinator epoch %d): %d transactional ids", TRANSACTION_STATE_TOPIC,
                     number, coordinator_epoch, len(loaded))
            for metadata in loaded.values():
                if metadata.state.is_prepared:
                    self._start_markers(metadata, number)
        except asyncio.CancelledError:
            raise
        except KafkaliteError as exc:
            log.warning("loading %s-%d failed: %s", TRANSACTION_STATE_TOPIC, number, exc)
            self._load_epochs.pop(number, None)
        finally:
            if self._load_tasks.get(number) in (None, asyncio.current_task()):  # not replaced by a newer load
                self.loading.discard(number)
                self._load_tasks.pop(number, None)

    def unload(self, number: int) -> None:
        self.owned.pop(number, None)
        self._load_epochs.pop(number, None)
        count = self.topology.state_partition_count()
        for transactional_id in list(self.transactions):
            if count == 0 or protocol.group_partition(transactional_id, count) == number:
                del self.transactions[transactional_id]
                task = self._marker_tasks.pop(transactional_id, None)
                if task is not None:
                    task.cancel()

    # -- writing state ------------------------------------------------------------------------
    async def _persist(self, metadata: TxnMetadata, target: TxnMetadata, number: int,
                       pending: TxnState | None = None) -> None:
        """Write ``target`` for the id, then adopt it; the caller checked ``pending`` is clear."""
        epoch = self.owned.get(number)
        metadata.pending = pending or target.state
        try:
            error = await self.state_log.append(number, [(encode_key(metadata.transactional_id),
                                                          target.to_value().encode())])
        finally:
            metadata.pending = None
        if self.owned.get(number) != epoch or self.transactions.get(metadata.transactional_id) is not metadata:
            raise NotCoordinatorError(f"transactional id {metadata.transactional_id} moved to another coordinator")
        if error is not None:
            raise error
        self._adopt(metadata, target)

    @staticmethod
    def _adopt(metadata: TxnMetadata, target: TxnMetadata) -> None:
        """Make ``target`` the id's state in memory."""
        for name in ("producer_id", "producer_epoch", "last_producer_epoch", "timeout_ms", "state", "start_ms",
                     "last_update_ms"):
            setattr(metadata, name, getattr(target, name))
        metadata.partitions = set(target.partitions)

    def _lookup(self, transactional_id: str, producer_id: int, producer_epoch: int) -> tuple[int, TxnMetadata]:
        number = self._check_owner(transactional_id)
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            raise InvalidProducerIdMappingError(f"producer id {producer_id} is not the one of "
                                                f"transactional id {transactional_id}")
        if metadata.producer_epoch != producer_epoch:
            raise ProducerFencedError(f"transactional id {transactional_id} has producer epoch "
                                      f"{metadata.producer_epoch}; epoch {producer_epoch} is fenced")
        if metadata.pending is not None:
            raise ConcurrentTransactionsError(f"transactional id {transactional_id} is being updated")
        return number, metadata

    # -- InitProducerId -----------------------------------------------------------------------
    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = -1) -> tuple[int, int]:
        """(producer id, epoch) for the id's new instance. ``producer_id``/``producer_epoch``
        (KIP-360, -1 when not given) are what the caller had: a retry or a re-initialisation."""
        if not 0 < timeout_ms <= self.config.transaction_max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms={timeout_ms} must be positive and at most "
                f"transaction.max.timeout.ms={self.config.transaction_max_timeout_ms}")
        number = self._check_owner(transactional_id)
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            new_id = await self.next_producer_id()
            number = self._check_owner(transactional_id)
            metadata = self.transactions.get(transactional_id)
            if metadata is None:
                metadata = TxnMetadata(transactional_id, new_id, -1, timeout_ms, TxnState.EMPTY,
                                       last_update_ms=self.wall_ms())
                self.transactions[transactional_id] = metadata
        if metadata.pending is not None or metadata.state.is_prepared:
            raise ConcurrentTransactionsError(f"transactional id {transactional_id} is completing a transaction")
        if producer_id >= 0:
            if producer_id != metadata.producer_id:
                raise InvalidProducerIdMappingError(f"producer id {producer_id} is not the one of "
                                                    f"transactional id {transactional_id}")
            if producer_epoch not in (metadata.producer_epoch, metadata.last_producer_epoch):
                raise ProducerFencedError(f"producer epoch {producer_epoch} of {transactional_id} is fenced")
            if producer_epoch == metadata.last_producer_epoch and metadata.state is TxnState.EMPTY:
                return metadata.producer_id, metadata.producer_epoch  # a retry of the call that bumped it
        if metadata.state is TxnState.ONGOING:
            await self._fence_and_abort(metadata, number)
            raise ConcurrentTransactionsError(f"the ongoing transaction of {transactional_id}'s previous "
                                              f"instance is being aborted")
        if metadata.producer_epoch >= MAX_PRODUCER_EPOCH:
            new_producer_id, new_epoch = await self.next_producer_id(), 0
        else:
            new_producer_id, new_epoch = metadata.producer_id, metadata.producer_epoch + 1
        now = self.wall_ms()
        target = metadata.copy_with(producer_id=new_producer_id, producer_epoch=new_epoch,
                                    last_producer_epoch=metadata.producer_epoch, timeout_ms=timeout_ms,
                                    state=TxnState.EMPTY, partitions=set(), start_ms=-1, last_update_ms=now)
        if metadata.pending is not None:
            raise ConcurrentTransactionsError(f"transactional id {transactional_id} is being updated")
        await self._persist(metadata, target, number)
        log.info("transactional id %s: producer id %d epoch %d", transactional_id, new_producer_id, new_epoch)
        return new_producer_id, new_epoch

    async def _fence_and_abort(self, metadata: TxnMetadata, number: int) -> None:
        """Bump the epoch of an ongoing transaction and abort it (PrepareEpochFence → PrepareAbort)."""
        epoch = metadata.producer_epoch + 1 if metadata.producer_epoch < MAX_PRODUCER_EPOCH \
            else metadata.producer_epoch
        target = metadata.copy_with(producer_epoch=epoch, last_producer_epoch=-1, state=TxnState.PREPARE_ABORT,
                                    last_update_ms=self.wall_ms())
        await self._persist(metadata, target, number, pending=TxnState.PREPARE_EPOCH_FENCE)
        log.info("transactional id %s: aborting the transaction of producer %d, epoch bumped to %d",
                 metadata.transactional_id, metadata.producer_id, epoch)
        self._start_markers(metadata, number)

    # -- AddPartitionsToTxn, AddOffsetsToTxn ----------------------------------------------------
    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]]) -> dict[tuple[str, int], BrokerResponseError | None]:
        """Add partitions to the id's transaction; the outcome per partition (a partition that does
        not exist fails the request: it answers UNKNOWN_TOPIC_OR_PARTITION, the others
        OPERATION_NOT_ATTEMPTED)."""
        unknown = [item for item in partitions if not self.topology.partition_exists(*item)]
        if unknown:
            missing: dict[tuple[str, int], BrokerResponseError | None] = {}
            for item in partitions:
                missing[item] = UnknownTopicOrPartitionError(f"{item[0]}-{item[1]} does not exist") \
                    if item in unknown else OperationNotAttemptedError("another partition of the request failed")
            return missing
        error: BrokerResponseError | None = None
        try:
            await self._add(transactional_id, producer_id, producer_epoch, set(partitions))
        except BrokerResponseError as exc:
            error = exc
        return dict.fromkeys(partitions, error)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None:
        """Add the group's ``__consumer_offsets`` partition to the id's transaction."""
        if not group_id:
            raise InvalidRequestError("the group id must not be empty")
        number = self.topology.offsets_partition(group_id)
        await self._add(transactional_id, producer_id, producer_epoch, {(OFFSETS_TOPIC, number)})

    async def _add(self, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: set[tuple[str, int]]) -> None:
        markers = self._marker_tasks.get(transactional_id)
        if markers is not None and not markers.done():  # the previous transaction is completing
            self._waiting_adds[transactional_id] = self._waiting_adds.get(transactional_id, 0) + 1
            try:
                await asyncio.wait({markers}, timeout=COMPLETION_WAIT_SECONDS)
            finally:
                left = self._waiting_adds.pop(transactional_id) - 1
                if left:
                    self._waiting_adds[transactional_id] = left
        number, metadata = self._lookup(transactional_id, producer_id, producer_epoch)
        if metadata.state.is_prepared or metadata.state is TxnState.PREPARE_EPOCH_FENCE:
            raise ConcurrentTransactionsError(f"transactional id {transactional_id} is completing a transaction")
        if metadata.state is TxnState.DEAD:
            raise InvalidTxnStateError(f"transactional id {transactional_id} is expired")
        if metadata.state is TxnState.ONGOING and partitions <= metadata.partitions:
            return
        now = self.wall_ms()
        start = metadata.start_ms if metadata.state is TxnState.ONGOING else now
        target = metadata.copy_with(state=TxnState.ONGOING, partitions=metadata.partitions | partitions,
                                    start_ms=start, last_update_ms=now)
        await self._persist(metadata, target, number)

    # -- EndTxn -------------------------------------------------------------------------------
    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool) -> None:
        """Commit or abort: answered once PrepareCommit / PrepareAbort is written; the markers
        and the Complete state follow in the background."""
        number, metadata = self._lookup(transactional_id, producer_id, producer_epoch)
        state, word = metadata.state, "commit" if committed else "abort"
        if state is TxnState.ONGOING:
            target = metadata.copy_with(state=TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT,
                                        last_update_ms=self.wall_ms())
            await self._persist(metadata, target, number)
            self._start_markers(metadata, number)
            return
        wanted = (TxnState.COMPLETE_COMMIT, TxnState.PREPARE_COMMIT) if committed \
            else (TxnState.COMPLETE_ABORT, TxnState.PREPARE_ABORT)
        if state is wanted[0]:
            return  # a retry of an EndTxn already done
        if state is wanted[1]:
            raise ConcurrentTransactionsError(f"the {word} of {transactional_id} is still writing its markers")
        raise InvalidTxnStateError(f"cannot {word} the transaction of {transactional_id} in state {state.display}")

    def _start_markers(self, metadata: TxnMetadata, number: int) -> None:
        previous = self._marker_tasks.get(metadata.transactional_id)
        if previous is not None and not previous.done():
            return
        self._marker_tasks[metadata.transactional_id] = asyncio.get_running_loop().create_task(
            self._complete(metadata, number), name=f"txn-markers-{metadata.transactional_id}")

    async def _complete(self, metadata: TxnMetadata, number: int) -> None:
        """Write the markers of a prepared transaction until every leader took them, then
        CompleteCommit / CompleteAbort. Stops when this broker stops coordinating the id."""
        transactional_id = metadata.transactional_id
        coordinator_epoch = self.owned.get(number, -1)
        committed = metadata.state is TxnState.PREPARE_COMMIT
        remaining = set(metadata.partitions)
        backoff = _MARKER_BACKOFF_MIN
        try:
            while remaining:
                if not self._still_owns(metadata, number, coordinator_epoch):
                    return
                results = await self.markers.send(metadata.producer_id, metadata.producer_epoch, committed,
                                                  coordinator_epoch, sorted(remaining))
                for item, code in results.items():
                    if code == 0:
                        remaining.discard(item)
                    elif code in _FENCED_MARKER_CODES:
                        log.warning("transactional id %s: the marker for %s-%d was refused (error %d); "
                                    "a newer producer or coordinator owns it", transactional_id, *item, code)
                        return
                    elif code == _UNKNOWN_TOPIC_OR_PARTITION and not self.topology.partition_exists(*item):
                        remaining.discard(item)  # the topic was deleted
                if remaining:
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, _MARKER_BACKOFF_MAX)
            target = metadata.copy_with(state=TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT,
                                        partitions=set(), last_update_ms=self.wall_ms())
            if self._waiting_adds.get(transactional_id) and self._still_owns(metadata, number, coordinator_epoch):
                # the next transaction's first request is waiting: its Ongoing record supersedes Complete
                self._adopt(metadata, target)
                log.debug("transactional id %s: %s (kept in memory; the next transaction's record follows)",
                          transactional_id, target.state.display)
                return
            backoff = _MARKER_BACKOFF_MIN
            while self._still_owns(metadata, number, coordinator_epoch):
                try:
                    await self._persist(metadata, target, number)
                    log.debug("transactional id %s: %s", transactional_id, target.state.display)
                    return
                except BrokerResponseError as exc:  # e.g. the partition is fenced for a moment: retry
                    log.info("transactional id %s: writing %s failed, retrying: %s", transactional_id,
                             target.state.display, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MARKER_BACKOFF_MAX)
        finally:
            if self._marker_tasks.get(transactional_id) is asyncio.current_task():
                del self._marker_tasks[transactional_id]

    def _still_owns(self, metadata: TxnMetadata, number: int, coordinator_epoch: int) -> bool:
        return self.owned.get(number) == coordinator_epoch and \
            self.transactions.get(metadata.transactional_id) is metadata

    # -- timeouts and expiration ----------------------------------------------------------------
    async def _sweep_loop(self) -> None:
        interval = self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000
        while True:
            await asyncio.sleep(delay_to_grid(time.monotonic(), interval))
            try:
                await self.sweep()
            except KafkaliteError as exc:
                log.warning("transaction sweep failed: %s", exc)

    async def sweep(self) -> None:
        """Abort transactions open longer than their timeout; remove ids expired in a complete state."""
        now = self.wall_ms()
        for metadata in list(self.transactions.values()):
            try:
                number = self._check_owner(metadata.transactional_id)
            except BrokerResponseError:
                continue
            if metadata.pending is not None:
                continue
            if metadata.state is TxnState.ONGOING and now > metadata.start_ms + metadata.timeout_ms:
                log.info("transactional id %s: transaction open since %d timed out after %d ms; aborting",
                         metadata.transactional_id, metadata.start_ms, metadata.timeout_ms)
                try:
                    await self._fence_and_abort(metadata, number)
                except BrokerResponseError as exc:
                    log.info("aborting the timed-out transaction of %s failed: %s", metadata.transactional_id, exc)
            elif metadata.state.is_complete and \
                    now > metadata.last_update_ms + self.config.transactional_id_expiration_ms:
                await self._expire(metadata, number)

    async def _expire(self, metadata: TxnMetadata, number: int) -> None:
        epoch = self.owned.get(number)
        metadata.pending = TxnState.DEAD
        try:
            error = await self.state_log.append(number, [(encode_key(metadata.transactional_id), None)])
        finally:
            metadata.pending = None
        if error is None and self.owned.get(number) == epoch and \
                self.transactions.get(metadata.transactional_id) is metadata:
            metadata.state = TxnState.DEAD
            del self.transactions[metadata.transactional_id]
            log.info("transactional id %s expired", metadata.transactional_id)

    # -- FindCoordinator, Describe, List ------------------------------------------------------
    async def find_coordinator(self, transactional_id: str) -> tuple[int, str, int]:
        """(broker id, host, port) of the id's coordinator; creates the topic on first use."""
        if not transactional_id:
            raise InvalidRequestError("the transactional id must not be empty")
        if self.topology.state_partition_count() == 0:
            error = await self.topology.create_state_topic()
            if error is not None:
                raise error
        number = self.partition_for(transactional_id)
        endpoint = self.topology.coordinator_endpoint(number)
        if endpoint is None:
            raise CoordinatorNotAvailableError(f"{TRANSACTION_STATE_TOPIC}-{number} has no leader yet")
        return endpoint

    def describe(self, transactional_ids: list[str]) -> list[TxnDescription]:
        answers = []
        for transactional_id in transactional_ids:
            try:
                self._check_owner(transactional_id)
                metadata = self.transactions.get(transactional_id)
                if metadata is None:
                    raise TransactionalIdNotFoundError(f"transactional id {transactional_id} is unknown")
            except BrokerResponseError as exc:
                answers.append(TxnDescription(transactional_id, exc))
                continue
            answers.append(TxnDescription(transactional_id, None, metadata.state.display, metadata.timeout_ms,
                                          metadata.start_ms, metadata.producer_id, metadata.producer_epoch,
                                          sorted(metadata.partitions)))
        return answers

    def list_transactions(self, states: list[str], producer_ids: list[int], duration_ms: int = -1) -> TxnListAnswer:
        unknown = [name for name in states if TxnState.from_name(name) is None]
        now = self.wall_ms()
        listings = [TxnListing(metadata.transactional_id, metadata.producer_id, metadata.state.display)
                    for metadata in sorted(self.transactions.values(), key=lambda item: item.transactional_id)
                    if (not states or metadata.state.display in states)
                    and (not producer_ids or metadata.producer_id in producer_ids)
                    and (duration_ms < 0 or (metadata.start_ms >= 0 and now - metadata.start_ms > duration_ms))]
        error = CoordinatorLoadInProgressError("a transaction state partition is loading") if self.loading else None
        return TxnListAnswer(error, unknown, listings)

