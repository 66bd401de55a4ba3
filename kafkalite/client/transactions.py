"""A transactional producer's side of KIP-98: :class:`TransactionManager`.

The manager holds the producer's transactional id, its producer id and epoch (from
InitProducerId at the transaction coordinator) and the transaction's state:

    UNINITIALIZED --init_transactions--> READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction--> READY       (EndTxn commit after a flush)
    IN_TRANSACTION / ABORTABLE_ERROR --abort_transaction--> READY
    any --fencing or another fatal error--> FATAL_ERROR (only close() remains)

Partitions join the transaction before their first batch is sent: the producer core calls
:meth:`TransactionManager.before_append` for every record's partition, and the sender calls
:meth:`TransactionManager.register_partitions` (AddPartitionsToTxn) before it drains; the
accumulator drains only partitions already added (:meth:`TransactionManager.sendable`).

Errors, as kafka-python and the Java client classify them: PRODUCER_FENCED,
INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING, TRANSACTIONAL_ID_AUTHORIZATION_FAILED and
INVALID_TXN_STATE are *fatal* (the producer must be closed); a batch that failed for good, or
an AddPartitions / TxnOffsetCommit refused otherwise, is *abortable*: commit_transaction raises
it and the application must call abort_transaction. CONCURRENT_TRANSACTIONS,
COORDINATOR_LOAD_IN_PROGRESS and NOT_COORDINATOR are retried (with the coordinator looked up
again for the last).

Concurrency: the calls that talk to the brokers run on the producer's event loop;
:meth:`before_append` and :meth:`sendable` run on any thread and take the manager's lock.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from kafkalite import protocol
from kafkalite.client.accumulator import RecordAccumulator
from kafkalite.client.coordinator_link import CoordinatorLink, error_of, offsets_body
from kafkalite.client.metadata import MetadataManager
from kafkalite.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from kafkalite.errors import (
    ConcurrentTransactionsError,
    IllegalStateError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    KafkaliteError,
    ProducerFencedError,
)
from kafkalite.transport import AsyncTransport

log = logging.getLogger(__name__)

#: Seconds between retries of a request answered CONCURRENT_TRANSACTIONS.
CONCURRENT_TRANSACTIONS_BACKOFF = 0.005
#: While a partition waits to join the transaction, a sending application thread hands the GIL
#: to the producer's I/O thread once per this many records: the I/O thread, woken by the
#: AddPartitionsToTxn answer, would otherwise wait a whole switch interval (5 ms) for the GIL
#: while the application keeps it busy queueing records, and nothing is sent meanwhile.
JOINING_HANDOFF_RECORDS = 64

#: Errors after which the producer cannot go on (it was fenced, or its id was taken over).
FATAL_ERRORS = (ProducerFencedError, InvalidProducerEpochError, InvalidProducerIdMappingError, InvalidTxnStateError)


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TransactionManager:
    """One transactional producer's transaction state (see the module docstring)."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int, accumulator: RecordAccumulator,
                 metadata: MetadataManager, transport: AsyncTransport, *, request_timeout_ms: int,
                 retry_backoff_ms: int, max_block_ms: int) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.accumulator = accumulator
        self.metadata = metadata
        self.transport = transport
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff = retry_backoff_ms / 1000
        self.max_block_ms = max_block_ms
        self.link = CoordinatorLink(metadata, transport, transactional_id, request_timeout_ms=request_timeout_ms,
                                    retry_backoff_ms=retry_backoff_ms, key_type=1, key_field="transactional_id")
        self.producer_id = -1
        self.producer_epoch = -1
        self.state = TxnState.UNINITIALIZED
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        #: Partitions in the ongoing transaction (AddPartitionsToTxn answered). Changed under the
        #: lock; a send on any thread may test membership without it (see :meth:`before_append`).
        self.added: set[TopicPartition] = set()
        self._new: set[TopicPartition] = set()
        self._offsets_added = False
        #: The thread id of the producer's event loop (its I/O thread); see :meth:`before_append`.
        self.loop_ident = 0
        self._queued_while_joining = 0
        accumulator.transactional = True
        accumulator.sendable = self.sendable
        accumulator.on_failure = self._batch_failed

    # -- any thread ---------------------------------------------------------------------------
    def before_append(self, tp: TopicPartition) -> None:
        """A record for ``tp`` is about to be queued: only inside a transaction.

        The producer calls it for a record unless the state is IN_TRANSACTION and ``tp`` is in
        :attr:`added` already (it tests that inline, the common case of a send). A partition
        queued to join is let through here without the lock as well (the state and the sets
        are read atomically; a commit racing a send on another thread is the application's own
        race, as with Kafka's producer)."""
        if self.state is TxnState.IN_TRANSACTION:
            if tp in self.added:
                return
            if tp in self._new:  # waiting for AddPartitionsToTxn: its records queue, not sent yet
                self._queued_while_joining += 1
                if not self._queued_while_joining % JOINING_HANDOFF_RECORDS \
                        and threading.get_ident() != self.loop_ident:
                    time.sleep(0)  # the I/O thread takes the GIL for the answer now, not after a switch interval
                return
        with self._lock:
            if self.state is TxnState.FATAL_ERROR:
                raise IllegalStateError(f"the producer hit a fatal error and must be closed: {self.error}")
            if self.state is not TxnState.IN_TRANSACTION and self.state is not TxnState.ABORTABLE_ERROR:
                raise IllegalStateError("a transactional producer sends only inside a transaction: "
                                        "call begin_transaction() first")
            if tp not in self.added:
                self._new.add(tp)

    def fail_unadded(self) -> None:
        """Before an abort: queued records of partitions that never joined the transaction fail."""
        with self._lock:
            doomed = set(self._new)
            self._new.clear()
        if doomed:
            self.accumulator.fail_queued(doomed, IllegalStateError("the transaction was aborted"))

    def sendable(self, tp: TopicPartition) -> bool:
        with self._lock:
            return tp in self.added

    def _batch_failed(self, error: BaseException) -> None:
        with self._lock:
            self._fail(error)

    def _fail(self, error: BaseException) -> None:
        """Move to ABORTABLE_ERROR or FATAL_ERROR (lock held)."""
        if isinstance(error, FATAL_ERRORS):
            self.state, self.error = TxnState.FATAL_ERROR, error
        elif self.state is TxnState.IN_TRANSACTION:
            self.state, self.error = TxnState.ABORTABLE_ERROR, error

    def _check(self, *allowed: TxnState) -> None:
        with self._lock:
            if self.state is TxnState.FATAL_ERROR:
                raise IllegalStateError(f"the producer hit a fatal error and must be closed: {self.error}") \
                    from self.error
            if self.state not in allowed:
                raise IllegalStateError(f"not allowed in state {self.state.value}")

    # -- loop side ----------------------------------------------------------------------------
    async def _call(self, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        """A request to the coordinator, retried on CONCURRENT_TRANSACTIONS and coordinator
        moves until ``max_block_ms``; a fatal error moves to FATAL_ERROR; the answer otherwise."""
        deadline = time.monotonic() + self.max_block_ms / 1000
        while True:
            answer = await self.link.call(path, body, deadline=deadline)
            error = error_of(answer)
            if isinstance(error, ConcurrentTransactionsError) and time.monotonic() < deadline:
                # the previous transaction's markers are being written: that takes a few
                # milliseconds, so ask again soon (a backoff would cost every short transaction)
                await asyncio.sleep(CONCURRENT_TRANSACTIONS_BACKOFF)
                continue
            if error is not None:
                if isinstance(error, FATAL_ERRORS):
                    with self._lock:
                        self._fail(error)
                    log.warning("transactional id %s: %s failed fatally: %s", self.transactional_id, what, error)
                raise error
            return answer

    async def init_transactions(self) -> None:
        """Get the transactional id's producer id with a bumped epoch (fencing older instances,
        and waiting until the coordinator aborted their open transaction)."""
        self._check(TxnState.UNINITIALIZED, TxnState.READY)
        body: dict[str, Any] = {"transaction_timeout_ms": self.transaction_timeout_ms}
        answer = await self._call(protocol.INIT_PRODUCER_ID, body, "InitProducerId")
        self.producer_id = int(answer["producer_id"])
        self.producer_epoch = int(answer["producer_epoch"])
        self.accumulator.reset_producer(self.producer_id, self.producer_epoch)
        with self._lock:
            self.state = TxnState.READY
        log.info("transactional id %s: producer id %d epoch %d", self.transactional_id, self.producer_id,
                 self.producer_epoch)

    def begin_transaction(self) -> None:
        self._check(TxnState.READY)
        with self._lock:
            self.state = TxnState.IN_TRANSACTION
            self.error = None

    def _producer_fields(self) -> dict[str, Any]:
        return {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch}

    async def register_partitions(self) -> bool:
        """AddPartitionsToTxn for the partitions queued since the last call (sender, before it
        drains). False when they could not be added yet (the sender tries again later)."""
        with self._lock:
            new = sorted(self._new)
            if not new or self.state is not TxnState.IN_TRANSACTION:
                return True
        topics: dict[str, list[int]] = {}
        for tp in new:
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = {**self._producer_fields(),
                "topics": [{"name": name, "partitions": numbers} for name, numbers in topics.items()]}
        problems: list[KafkaliteError]
        deadline = time.monotonic() + self.max_block_ms / 1000
        while True:
            try:
                answer = await self._call(protocol.ADD_PARTITIONS_TO_TXN, body, "AddPartitionsToTxn")
                problems = [error for topic in answer.get("topics", []) for entry in topic.get("partitions", [])
                            if (error := error_of(entry)) is not None]
            except KafkaliteError as exc:
                problems = [exc]
            # AddPartitionsToTxn answers CONCURRENT_TRANSACTIONS per partition while the previous
            # transaction's markers are written: ask again soon, as for the other requests
            if problems and time.monotonic() < deadline and \
                    all(isinstance(problem, ConcurrentTransactionsError) for problem in problems):
                await asyncio.sleep(CONCURRENT_TRANSACTIONS_BACKOFF)
                continue
            break
        retriable = [problem for problem in problems if problem.retriable]
        if problems and len(retriable) == len(problems):
            return False
        with self._lock:
            if problems:
                self._fail(problems[0])
                return False
            self.added.update(new)
            self._new.difference_update(new)
        return True

    async def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                                          group: ConsumerGroupMetadata) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator."""
        self._check(TxnState.IN_TRANSACTION)
        await self._call(protocol.ADD_OFFSETS_TO_TXN, {**self._producer_fields(), "group_id": group.group_id},
                         "AddOffsetsToTxn")
        self._offsets_added = True
        link = CoordinatorLink(self.metadata, self.transport, group.group_id,
                               request_timeout_ms=self.request_timeout_ms,
                               retry_backoff_ms=int(self.retry_backoff * 1000))
        deadline = time.monotonic() + self.max_block_ms / 1000
        body = {"transactional_id": self.transactional_id, **self._producer_fields(),
                "generation_id": group.generation_id, "member_id": group.member_id,
                "group_instance_id": group.group_instance_id,
                "topics": offsets_body({tp: value if isinstance(value, OffsetAndMetadata)
                                        else OffsetAndMetadata(int(value)) for tp, value in offsets.items()})}
        answer = await link.call(protocol.TXN_OFFSET_COMMIT, body, deadline=deadline)
        problems = [error_of(answer)] + [error_of(entry) for topic in answer.get("topics", [])
                                         for entry in topic.get("partitions", [])]
        for problem in problems:
            if problem is not None:
                with self._lock:
                    self._fail(problem)
                raise problem

    async def end_transaction(self, committed: bool, flushed: list[BaseException]) -> None:
        """EndTxn after the caller flushed (``flushed``: errors of the transaction's batches)."""
        with self._lock:
            if self.state is TxnState.FATAL_ERROR:
                raise IllegalStateError(f"the producer hit a fatal error and must be closed: {self.error}") \
                    from self.error
            if committed and self.state is TxnState.ABORTABLE_ERROR:
                raise self.error if isinstance(self.error, KafkaliteError) else IllegalStateError(
                    f"the transaction must be aborted: {self.error}")
            if self.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
                raise IllegalStateError(f"no transaction to end in state {self.state.value}")
            anything = bool(self.added) or self._offsets_added
        if committed and flushed:
            with self._lock:
                self._fail(flushed[0])
            raise flushed[0]
        if anything:
            await self._call(protocol.END_TXN, {**self._producer_fields(), "committed": committed},
                             "EndTxn commit" if committed else "EndTxn abort")
        with self._lock:
            self.added.clear()
            self._new.clear()
            self._offsets_added = False
            self.state = TxnState.READY
            self.error = None


def group_metadata_of(value: Any) -> ConsumerGroupMetadata:
    """A consumer's group metadata, or a bare group id (kafka-python's older signature)."""
    if isinstance(value, ConsumerGroupMetadata):
        return value
    if isinstance(value, str):
        return ConsumerGroupMetadata(value)
    group_id = getattr(value, "group_id", None)
    if isinstance(group_id, str):
        return ConsumerGroupMetadata(group_id, int(getattr(value, "generation_id", -1)),
                                     str(getattr(value, "member_id", "") or ""),
                                     getattr(value, "group_instance_id", None))
    raise TypeError(f"group metadata must be a ConsumerGroupMetadata or a group id, got {type(value).__name__}")

