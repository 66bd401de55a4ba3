"""One hosted replica of a partition: its role, leader-side replication state and waiters.

A :class:`Partition` wraps the local :class:`~kafkalite.storage.log.PartitionLog` and knows
whether this broker leads it, follows it, or neither (no leader elected). As leader it tracks
every follower's log end offset and last caught-up time, advances the high watermark (the
smallest log end offset over the ISR, never backwards), decides ISR shrink and expansion
candidates (Kafka's ``replica.lag.time.max.ms`` rules), and completes ``acks=all`` produce
waits and long-poll fetch waits when the log or the high watermark moves. It also tracks each
follower's log start offset (reported in its fetches), so a DeleteRecords can wait until the
low watermark — the smallest log start offset over the ISR — reaches its offset.

Transactions: its producer state tracks open transactions; :attr:`Partition.last_stable_offset`
is the LSO read_committed consumers read below; :meth:`Partition.append_marker` appends a
coordinator's commit/abort marker as the leader, and :meth:`Partition.record_replicated` keeps a
follower's state (and ``.txnindex``) current from replicated markers.

Concurrency: event-loop only: its state, the producer state and its waiters are read and
written on the loop thread that created it (:meth:`Partition.check_loop_thread` raises
elsewhere). The log calls it makes on the loop are short page-cache operations; the blocking
parts of an append run on worker threads with their result handed back to the loop:

* validation (:func:`~kafkalite.storage.validation.check_batches`, a pure function) of a
  produce request holding a compressed batch (its records are decompressed to be checked),
  more than ``VALIDATE_INLINE_BYTES`` bytes or more than ``VALIDATE_INLINE_RECORDS``
  records. A small uncompressed request is validated inline (a CRC pass and the C-level
  ``uniform_runs`` check: tens of microseconds, less than a hand-off to a thread);
* the fsync that ``flush.messages`` asks for (:meth:`Partition.flush_through`): one at a
  time per partition, covering every record appended before it starts (group commit); the
  acknowledgement waits for the fsync that covers its records.

Appends keep their arrival order: while one produce request of the partition is being
validated in a worker, later ones queue behind it (FIFO) and are neither validated-and-written
inline nor reordered, so an idempotent producer's in-flight requests are appended in
sequence order. The duplicate and sequence checks and the write happen in one loop step,
after the worker's validation, so nothing can interleave between them.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kafkalite.broker.producer_state import CompletedTxn, ProducerStateManager
from kafkalite.errors import (
    BrokerResponseError,
    FencedLeaderEpochError,
    InvalidRecordError,
    LogDirOfflineError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
)
from kafkalite.record.batch import RecordBatch, iter_batches
from kafkalite.record.codec import Compression
from kafkalite.record.control import ControlMarker, batch_marker, build_marker_batch
from kafkalite.storage.log import AppendInfo, PartitionLog
from kafkalite.storage.segment import BatchHeader
from kafkalite.storage.txnindex import AbortedTxn
from kafkalite.storage.validation import CheckedBatches, check_batches

log = logging.getLogger(__name__)

# Long-poll fetches that timed out leave their finished futures on an idle partition: prune the
# list when it reaches this length, so it stays bounded while nothing is appended.
_WAITER_PRUNE_AT = 64

# A produce request is validated on the event loop only when it holds no compressed batch and
# at most this many bytes and records (records that are not of one uniform shape are decoded
# one by one, about a microsecond each); anything bigger is validated on a worker thread.
VALIDATE_INLINE_BYTES = 128 * 1024
VALIDATE_INLINE_RECORDS = 500


class ChangeListener(Protocol):
    """Hears of every change of a partition that a long-poll fetch could be waiting for."""

    def partition_changed(self, partition: Partition) -> None: ...


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass
class FollowerState:
    """What the leader knows of one follower."""

    log_end_offset: int = -1
    #: The follower's log start offset, as its last fetch reported it (-1: not known yet).
    log_start_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_end: int = -1
    last_fetch_ms: int = 0


class Partition:
    """A hosted replica. See the module docstring for the contract."""

    def __init__(self, topic: str, partition: int, partition_log: PartitionLog, broker_id: int,
                 clock: Callable[[], int]) -> None:
        self.topic = topic
        self.partition = partition
        self.log = partition_log
        self.broker_id = broker_id
        self.clock = clock
        self._role = Role.NONE
        #: Called with the partition whenever its role changes (the replica manager keeps the
        #: set of partitions it leads with it).
        self.role_listener: Callable[[Partition], None] | None = None
        #: Called with the partition whenever its ISR upkeep may have work: an append or any
        #: other change that wakes data waiters, an ISR or replica set change (the replica
        #: manager's upkeep visits only these partitions, never every one it leads).
        self.upkeep_listener: Callable[[Partition], None] | None = None
        self.leader_id = -1
        self.leader_epoch = -1
        self.controller_epoch = -1
        self.isr: list[int] = []
        self.replicas: list[int] = []
        self.state_version = -1
        self.followers: dict[int, FollowerState] = {}
        self.pending_isr: list[int] | None = None
        self.removing: set[int] = set()
        self.producer_state = ProducerStateManager()
        #: Set when a truncation cut into transactions: the producer state must be replayed
        #: from the log (the replica manager does it on a worker before the next append).
        self.producer_state_stale = False
        self._data_waiters: list[asyncio.Future[None]] = []
        self._change_listeners: set[ChangeListener] = set()
        self._ack_waiters: list[tuple[int, asyncio.Future[None]]] = []
        # DeleteRecords waits: (log start offset the ISR must reach, future).
        self._start_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._loop_thread = threading.get_ident()
        # Produce requests that went through the queue and are not appended yet; while there is
        # one, every later request of this partition queues too (see the module docstring).
        self._queued_appends = 0
        self._append_order = asyncio.Lock()
        self._flushing: asyncio.Task[None] | None = None

    @property
    def role(self) -> Role:
        return self._role

    @role.setter
    def role(self, role: Role) -> None:
        if role is not self._role:
            self._role = role
            if self.role_listener is not None:
                self.role_listener(self)

    def __repr__(self) -> str:
        return (f"Partition({self.topic}-{self.partition}, {self.role.value}, leader={self.leader_id}, "
                f"epoch={self.leader_epoch}, isr={self.isr}, hw={self.high_watermark}, leo={self.log_end_offset})")

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the high watermark, capped by the first offset of the earliest undecided
        transaction (read_committed consumers read below it)."""
        return self.producer_state.last_stable_offset(self.log.high_watermark, self.log.log_start_offset)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [``fetch_offset``, ``upper_bound``) (a
        read_committed fetch's ``aborted_transactions``)."""
        return self.log.collect_aborted_txns(fetch_offset, upper_bound)

    def _publish_unstable(self) -> None:
        """Tell the log (its cleaner) where undecided transactions start."""
        self.log.first_unstable_offset = self.producer_state.first_unstable_offset(self.log.high_watermark)

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    # -- role changes -------------------------------------------------------------------------
    def make_leader(self, leader_epoch: int, isr: list[int], replicas: list[int], state_version: int,
                    controller_epoch: int) -> None:
        """Become leader for ``leader_epoch``: record the epoch at our log end, reset tracking."""
        now = self.clock()
        new_term = self.role is not Role.LEADER or leader_epoch != self.leader_epoch
        self.role = Role.LEADER
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.controller_epoch = controller_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.state_version = state_version
        self.pending_isr = None
        if self.producer_state_stale:
            # Rare: a follower truncated into transactions and is elected before its state was
            # replayed; the leader must not check producers against stale state.
            self.install_producer_state(build_producer_state(self.log))
        if new_term:
            self.log.record_leader_epoch(leader_epoch)
            self.followers = {replica: FollowerState(last_caught_up_ms=now if replica in isr else 0)
                              for replica in replicas if replica != self.broker_id}
            log.info("%s: leader at epoch %d, isr %s, log end %d, hw %d", self.name, leader_epoch, isr,
                     self.log_end_offset, self.high_watermark)
        else:
            for replica in replicas:
                if replica != self.broker_id and replica not in self.followers:
                    self.followers[replica] = FollowerState()
        self.maybe_advance_high_watermark()
        self._wake_data_waiters()

    def make_follower(self, leader_id: int, leader_epoch: int, isr: list[int], replicas: list[int],
                      state_version: int, controller_epoch: int) -> bool:
        """Follow ``leader_id``; returns True when the leader or epoch changed."""
        changed = self.role is not Role.FOLLOWER or leader_id != self.leader_id or leader_epoch != self.leader_epoch
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.controller_epoch = controller_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.state_version = state_version
        self.followers = {}
        self.pending_isr = None
        if changed:
            self._fail_ack_waiters(NotLeaderForPartitionError(f"{self.name}: leadership moved to broker {leader_id}"))
            self._wake_data_waiters()
            log.info("%s: follower of %d at epoch %d", self.name, leader_id, leader_epoch)
        return changed

    def make_offline(self, leader_epoch: int, isr: list[int], replicas: list[int], state_version: int) -> None:
        self.role = Role.NONE
        self.leader_id = -1
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.state_version = state_version
        self.followers = {}
        self._fail_ack_waiters(NotLeaderForPartitionError(f"{self.name}: has no leader"))
        self._wake_data_waiters()

    def update_assignment(self, replicas: list[int], removing: list[int] | None = None) -> None:
        """The replica set changed (reassignment): track new followers, forget removed ones.
        Replicas being removed never (re)join the ISR."""
        self.replicas = list(replicas)
        self.removing = set(removing or ())
        if self.is_leader:
            for replica in replicas:
                if replica != self.broker_id and replica not in self.followers:
                    self.followers[replica] = FollowerState()
            for replica in list(self.followers):
                if replica not in replicas:
                    del self.followers[replica]
        if self.upkeep_listener is not None:
            self.upkeep_listener(self)

    def update_isr(self, isr: list[int], state_version: int) -> None:
        """Apply an ISR change (same leader and epoch) seen in ZooKeeper."""
        self.isr = list(isr)
        self.state_version = state_version
        self.pending_isr = None
        if self.is_leader:
            self.maybe_advance_high_watermark()
            self._complete_start_waiters()
        if self.upkeep_listener is not None:
            self.upkeep_listener(self)

    def fail_waiters(self, error: BrokerResponseError) -> int:
        """Answer every parked acks=all wait with ``error`` and wake every long-poll fetch (they
        re-check and answer); the role is kept. Returns the number of produce waits failed."""
        pending = sum(1 for _, future in self._ack_waiters if not future.done())
        self._fail_ack_waiters(error)
        self._wake_data_waiters()
        return pending

    def stop(self, error: BrokerResponseError) -> None:
        self.role = Role.NONE
        self._fail_ack_waiters(error)
        self._wake_data_waiters()

    # -- leader: produce ----------------------------------------------------------------------
    def check_leader(self, current_leader_epoch: int = -1) -> None:
        if self.role is not Role.LEADER:
            raise NotLeaderForPartitionError(
                f"broker {self.broker_id} is not the leader of {self.name} (leader is {self.leader_id})")
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise FencedLeaderEpochError(f"{self.name}: epoch {current_leader_epoch} < {self.leader_epoch}")
            if current_leader_epoch > self.leader_epoch:
                raise UnknownLeaderEpochError(f"{self.name}: epoch {current_leader_epoch} > {self.leader_epoch}")

    def check_loop_thread(self) -> None:
        """Raise unless called on the thread of the event loop that owns this partition."""
        if threading.get_ident() != self._loop_thread:
            raise RuntimeError(f"{self.name}: partition state touched off its event loop thread")

    async def append_as_leader(self, records: bytes | bytearray | memoryview, required_acks: int, *,
                               wait_for_flush: bool = True) -> AppendInfo:
        """Validate, check idempotence, append at the log end and, when ``flush.messages``
        asks for it, wait for the fsync covering the records (unless ``wait_for_flush`` is
        False: the caller then asks :meth:`needs_flush` at once and awaits
        :meth:`flush_through`). See the module docstring for which step runs where and for
        the order guarantee."""
        self.check_leader()
        if self._queued_appends == 0 and not self._validate_in_worker(records):
            # Nothing queued ahead of it: validate and write in this loop step.
            info = self._append_checked(check_batches(records, self.log.config, from_client=True), records,
                                        required_acks)
        else:
            self._queued_appends += 1
            try:
                async with self._append_order:
                    if self._validate_in_worker(records):
                        checked = await asyncio.to_thread(check_batches, records, self.log.config, from_client=True)
                    else:
                        checked = check_batches(records, self.log.config, from_client=True)
                    info = self._append_checked(checked, records, required_acks)
            finally:
                self._queued_appends -= 1
        if wait_for_flush and self.needs_flush(info):  # asked in the append's own loop step
            await self.flush_through(info.last_offset + 1)
        return info

    def needs_flush(self, info: AppendInfo) -> bool:
        """Whether an append must be fsynced before it is acknowledged: it reached
        ``flush.messages`` (or, with ``flush.messages=1``, a duplicate's original records are
        not fsynced yet). Ask right after the append, in the same loop step: a later append
        or flush changes the answer."""
        return self.log.flush_pending() or (self.log.config.flush_messages <= 1
                                            and self.log.recovery_point <= info.last_offset)

    @staticmethod
    def _validate_in_worker(records: bytes | bytearray | memoryview) -> bool:
        """True when validating ``records`` costs more than a hand-off to a worker thread."""
        if len(records) > VALIDATE_INLINE_BYTES:
            return True
        count = 0
        try:
            for batch in iter_batches(records):  # headers only
                if batch.compression != Compression.NONE:
                    return True
                count += batch.record_count
        except BrokerResponseError:
            return False  # damaged: validation answers at once
        return count > VALIDATE_INLINE_RECORDS

    def _append_checked(self, checked: CheckedBatches, records: bytes | bytearray | memoryview,
                        required_acks: int) -> AppendInfo:
        """The loop step of an append: leadership, min ISR, idempotence, write."""
        self.check_loop_thread()
        self.check_leader()  # again: leadership may have moved while the batches were validated
        min_isr = self.log.config.min_insync_replicas
        if required_acks == -1 and len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"{self.name}: in-sync replicas {self.isr} are fewer than min.insync.replicas={min_isr}")
        idempotent = self._idempotent_batch(records)
        if idempotent is not None:
            duplicate = self.producer_state.check(idempotent)
            if duplicate is not None:
                return AppendInfo(duplicate.first_offset, duplicate.last_offset, 0, 0, duplicate.timestamp, -1, 0)
        elif any(batch.is_transactional for batch in checked.batches):
            raise InvalidRecordError("a transactional batch needs a producer id and a sequence")
        info = self.log.append_checked_as_leader(checked, self.leader_epoch)
        if idempotent is not None:
            self.producer_state.update(idempotent, info.first_offset, info.last_offset)
            if idempotent.is_transactional:
                self._publish_unstable()
        self.maybe_advance_high_watermark()
        self._wake_data_waiters()
        return info

    async def flush_through(self, offset: int) -> None:
        """Return once every record below ``offset`` (or the log end, if lower) is fsynced.
        One fsync runs at a time, on a worker thread, and covers everything appended before it
        started; callers arriving meanwhile wait for it and, if it did not cover them, the next."""
        partition_log = self.log
        while partition_log.recovery_point < min(offset, partition_log.log_end_offset):
            if partition_log.offline_reason is not None:
                raise LogDirOfflineError(f"{self.name} is offline: {partition_log.offline_reason}")
            flushing = self._flushing
            if flushing is None:
                flushing = self._flushing = asyncio.get_running_loop().create_task(
                    self._flush_once(), name=f"flush-{self.name}")
            await asyncio.shield(flushing)

    async def _flush_once(self) -> None:
        try:
            await asyncio.to_thread(self.log.flush)
        finally:
            self._flushing = None

    @staticmethod
    def _idempotent_batch(records: bytes | bytearray | memoryview) -> RecordBatch | None:
        """The batch of an idempotent producer (one per partition per request), else None."""
        try:
            first = RecordBatch(records, 0)
        except BrokerResponseError:
            return None  # the log's validation reports the damage
        if first.producer_id < 0:
            return None
        if first.end_position != len(records):
            raise InvalidRecordError("an idempotent producer sends exactly one batch per partition per request")
        return first

    def record_replicated(self, records: bytes | bytearray | memoryview) -> list[CompletedTxn]:
        """Keep producer state current on a follower from the batches it just appended: data
        batches as on the leader, transaction markers closing their transactions (an abort
        adds its ``.txnindex`` entry). Returns the transactions the markers completed."""
        self.check_loop_thread()
        completed: list[CompletedTxn] = []
        for batch in iter_batches(records):
            if batch.producer_id < 0:
                continue
            if batch.is_control:
                marker = batch_marker(batch)
                if marker is not None:
                    completed.append(self._complete_txn(batch.producer_id, batch.producer_epoch, marker,
                                                        batch.base_offset, batch.max_timestamp))
            else:
                self.producer_state.update(batch, batch.base_offset, batch.last_offset)
        if self.producer_state.has_transactions:
            self._publish_unstable()
        return completed

    def _complete_txn(self, producer_id: int, producer_epoch: int, marker: ControlMarker, offset: int,
                      timestamp: int) -> CompletedTxn:
        completed = self.producer_state.complete(producer_id, producer_epoch, marker, offset, timestamp)
        if completed.aborted:
            self.log.append_aborted_txn(self.producer_state.aborted_entry(completed))
        return completed

    # -- leader: transaction markers ------------------------------------------------------------
    def append_marker(self, producer_id: int, producer_epoch: int, marker: ControlMarker) -> AppendInfo:
        """Append a commit or abort marker of ``producer_id`` as the leader (WriteTxnMarkers),
        closing its transaction here. Refused off the leader (NOT_LEADER_OR_FOLLOWER), with
        fewer in-sync replicas than ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS, as an
        acks=all append), for an older producer epoch (INVALID_PRODUCER_EPOCH) or an older
        coordinator epoch (TRANSACTION_COORDINATOR_FENCED). The caller waits for the high
        watermark to pass it (:meth:`wait_for_replication`)."""
        self.check_loop_thread()
        self.check_leader()
        min_isr = self.log.config.min_insync_replicas
        if len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"{self.name}: in-sync replicas {self.isr} are fewer than min.insync.replicas={min_isr}")
        self.producer_state.check_marker(producer_id, producer_epoch, marker.coordinator_epoch)
        now = self.clock()
        batch = build_marker_batch(producer_id, producer_epoch, marker, now, self.leader_epoch)
        info = self.log.append_checked_as_leader(check_batches(batch, self.log.config, from_client=False),
                                                 self.leader_epoch)
        self._complete_txn(producer_id, producer_epoch, marker, info.first_offset, now)
        self._publish_unstable()
        self.maybe_advance_high_watermark()
        self._wake_data_waiters()
        return info

    def install_producer_state(self, state: ProducerStateManager) -> None:
        """Swap in a replayed producer state (see :func:`build_producer_state`)."""
        self.check_loop_thread()
        self.producer_state = state
        self.producer_state_stale = False
        self._publish_unstable()

    def rebuild_producer_state(self) -> None:
        """Blocking: rebuild idempotence and transaction state from the log's batch headers
        (reading the one record of each control batch), and write the aborted transactions
        into the ``.txnindex`` files recovery emptied. The replica manager runs it on a worker
        thread before the partition is published (no other reference to it exists yet), the
        one exception to the event-loop-only rule; after a truncation it builds a fresh state
        on a worker (:func:`build_producer_state`) and swaps it in on the loop."""
        self.producer_state = build_producer_state(self.log)
        self._publish_unstable()


    async def wait_for_replication(self, required_offset: int, timeout: float) -> None:
        """Wait until the high watermark reaches ``required_offset`` (acks=all)."""
        if self.high_watermark < required_offset:
            await _wait_in(self._ack_waiters, required_offset, timeout, lambda: RequestTimedOutError(
                f"{self.name}: not replicated to the ISR {self.isr} within {timeout * 1000:.0f} ms"))
        if len(self.isr) < self.log.config.min_insync_replicas:
            raise NotEnoughReplicasAfterAppendError(
                f"{self.name}: written, but the ISR {self.isr} shrank below min.insync.replicas")

    # -- leader: replication tracking ---------------------------------------------------------
    def record_follower_fetch(self, replica_id: int, fetch_offset: int, log_start_offset: int = -1) -> None:
        """A follower fetched from ``fetch_offset``: everything below it is on the follower,
        whose log starts at ``log_start_offset`` (-1: it did not say)."""
        state = self.followers.get(replica_id)
        if state is None:
            if replica_id not in self.replicas:
                return
            state = self.followers[replica_id] = FollowerState()
        now = self.clock()
        leader_end = self.log_end_offset
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = now
        elif fetch_offset >= state.last_fetch_leader_end >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.last_fetch_leader_end = leader_end
        state.last_fetch_ms = now
        self.maybe_advance_high_watermark()
        if log_start_offset >= 0 and log_start_offset != state.log_start_offset:
            state.log_start_offset = log_start_offset
            self._complete_start_waiters()

    @property
    def low_watermark(self) -> int:
        """The smallest log start offset over the leader and the followers in the ISR (Kafka's
        low watermark; -1 while a follower in the ISR has not reported its own yet)."""
        low = self.log.log_start_offset
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            state = self.followers.get(replica)
            if state is None or state.log_start_offset < 0:
                return -1
            low = min(low, state.log_start_offset)
        return low

    async def wait_for_low_watermark(self, offset: int, timeout: float) -> None:
        """Wait until every replica in the ISR starts its log at ``offset`` or later
        (DeleteRecords); REQUEST_TIMED_OUT after ``timeout`` seconds, NOT_LEADER_OR_FOLLOWER
        when leadership moves meanwhile."""
        if self.low_watermark >= offset:
            return

        def timed_out() -> BrokerResponseError:
            lagging = sorted(replica for replica, state in self.followers.items()
                             if replica in self.isr and state.log_start_offset < offset)
            return RequestTimedOutError(
                f"{self.name}: the leader's log starts at {self.log.log_start_offset}, but the followers "
                f"{lagging} of the ISR did not reach {offset} within {timeout * 1000:.0f} ms")

        await _wait_in(self._start_waiters, offset, timeout, timed_out)

    def _complete_start_waiters(self) -> None:
        if self._start_waiters:
            self._start_waiters = _settle(self._start_waiters, self.low_watermark)

    def maybe_advance_high_watermark(self) -> bool:
        """HW = min log end over the ISR (and caught-up followers); never moves backwards."""
        if self.role is not Role.LEADER:
            return False
        candidate = self.log_end_offset
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            state = self.followers.get(replica)
            if state is None or state.log_end_offset < 0:
                candidate = min(candidate, self.high_watermark)
            else:
                candidate = min(candidate, state.log_end_offset)
        if candidate > self.high_watermark:
            self.log.update_high_watermark(candidate)
            if self.producer_state.has_transactions:
                self._publish_unstable()
            # Consumers' long polls first: their answers carry the records end to end, the
            # producers' acknowledgements follow in the same loop pass.
            self._wake_data_waiters()
            self._complete_ack_waiters()
            return True
        return False

    def isr_expansion_candidates(self) -> list[int]:
        """Followers not in the ISR that caught up: LEO >= HW and >= this epoch's start."""
        if self.role is not Role.LEADER:
            return []
        epoch_start = self._current_epoch_start()
        return [replica for replica, state in sorted(self.followers.items())
                if replica not in self.isr and replica in self.replicas and replica not in self.removing
                and state.log_end_offset >= self.high_watermark and state.log_end_offset >= epoch_start]

    def isr_shrink_candidates(self, lag_time_ms: int) -> list[int]:
        """ISR followers that have not been caught up for ``lag_time_ms``."""
        if self.role is not Role.LEADER:
            return []
        now = self.clock()
        result = []
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            if replica not in self.replicas:
                result.append(replica)  # reassigned away: it has no place in the ISR
                continue
            state = self.followers.get(replica)
            if state is None:
                continue
            if state.log_end_offset != self.log_end_offset and now - state.last_caught_up_ms > lag_time_ms:
                result.append(replica)
        return result

    def isr_settled(self) -> bool:
        """Whether a leader's ISR upkeep has nothing to watch until the next change: every
        replica is in the ISR, none is being removed, no ISR write is in flight, and every
        follower has this leader's log end (none can fall behind without an append)."""
        if self.role is not Role.LEADER or self.pending_isr is not None or self.removing \
                or len(self.isr) != len(self.replicas) or set(self.isr) != set(self.replicas):
            return False
        leader_end = self.log_end_offset
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            state = self.followers.get(replica)
            if state is None or state.log_end_offset != leader_end:
                return False
        return True

    def _current_epoch_start(self) -> int:
        for epoch, start in reversed(self.log.epoch_cache.entries):
            if epoch == self.leader_epoch:
                return start
        return 0

    # -- waiters ------------------------------------------------------------------------------
    def add_data_waiter(self, future: asyncio.Future[None]) -> None:
        """Complete ``future`` at the next change of the log end or high watermark (one future
        may wait on several partitions; futures finished meanwhile are dropped as they pile up)."""
        waiters = self._data_waiters
        if len(waiters) >= _WAITER_PRUNE_AT:
            waiters = self._data_waiters = [waiter for waiter in waiters if not waiter.done()]
        waiters.append(future)

    def add_change_listener(self, listener: ChangeListener) -> None:
        """Call ``listener.partition_changed(self)`` at every change that wakes data waiters (an
        append, a high watermark or log start move, a role change, a stop) until removed: a
        follower's fetch session listens to each of its partitions this way."""
        self._change_listeners.add(listener)

    def remove_change_listener(self, listener: ChangeListener) -> None:
        self._change_listeners.discard(listener)

    def notify_data(self) -> None:
        self._wake_data_waiters()

    def _wake_data_waiters(self) -> None:
        if self.upkeep_listener is not None:
            self.upkeep_listener(self)
        for listener in self._change_listeners:
            listener.partition_changed(self)
        if not self._data_waiters:
            return
        waiters, self._data_waiters = self._data_waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def _complete_ack_waiters(self) -> None:
        self._ack_waiters = _settle(self._ack_waiters, self.high_watermark)

    def _fail_ack_waiters(self, error: BrokerResponseError) -> None:
        """Fail acks=all and DeleteRecords waits alike: both need this broker to stay leader."""
        waiters, self._ack_waiters = self._ack_waiters + self._start_waiters, []
        self._start_waiters = []
        for _, future in waiters:
            if not future.done():
                future.set_exception(error)


_Waiters = list[tuple[int, "asyncio.Future[None]"]]


async def _wait_in(waiters: _Waiters, required: int, timeout: float,
                   timed_out: Callable[[], BrokerResponseError]) -> None:
    """Queue a wait in ``waiters`` until :func:`_settle` sees ``required`` reached; after
    ``timeout`` seconds fail it with ``timed_out()``. The acks=all and DeleteRecords waits share it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    waiters.append((required, future))

    def expire() -> None:
        if not future.done():
            future.set_exception(timed_out())

    timer = loop.call_later(timeout, expire)
    try:
        await future
    finally:
        timer.cancel()
        if not future.done():
            future.cancel()


def _settle(waiters: _Waiters, reached: int) -> _Waiters:
    """Complete the waits whose offset ``reached`` covers; the rest, still pending, are returned."""
    remaining: _Waiters = []
    for required, future in waiters:
        if future.done():
            continue
        if required <= reached:
            future.set_result(None)
        else:
            remaining.append((required, future))
    return remaining


def build_producer_state(partition_log: PartitionLog) -> ProducerStateManager:
    """Blocking: a producer state replayed from ``partition_log``'s batch headers; rewrites
    the ``.txnindex`` files that recovery emptied."""
    state = ProducerStateManager()
    aborted: list[AbortedTxn] = []

    def read_marker(header: object) -> ControlMarker | None:
        assert isinstance(header, BatchHeader)
        try:
            data = partition_log.read(header.base_offset, 1, max_offset=header.last_offset + 1).records
        except OffsetOutOfRangeError:
            return None  # below the log start offset: its transaction is gone from the log
        for batch in iter_batches(data):
            if batch.base_offset == header.base_offset and batch.is_control:
                return batch_marker(batch)
        return None

    state.rebuild(partition_log.batch_headers(), read_marker, aborted.append)
    partition_log.rewrite_stale_txn_indexes(aborted)
    return state
