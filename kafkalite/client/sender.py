"""The producer's sender: moves ready batches from the accumulator to partition leaders.

One task per producer, on the producer's event loop. Each round it

1. gets a producer id (``POST /v1/init_producer_id``) when idempotence is on and none is held
   (a transactional producer's comes from ``init_transactions()``; instead, the partitions
   queued since the last round are added to the transaction, and only added ones are drained);
2. fails queued batches whose ``delivery_timeout_ms`` passed;
3. asks the accumulator which leaders have ready batches, drains them into one produce request
   per leader (``max_request_size``), encodes each batch once, and *submits* the request on the
   leader's pipelined "produce" connection — at most ``max_in_flight_requests_per_connection``
   requests per leader, written in order, answered in order;
4. sleeps until woken (a new or full batch, a completion, a metadata change, a connection
   opened or failed) or until the next batch's linger or retry backoff ends.

A round never waits for one broker. A leader without an open connection gets one opened in the
background (``AsyncTransport.ready``) while its batches stay queued and other leaders' batches
go out; a leader whose connection is silent (requests waiting more than
``metadata.STALLED_AFTER_S`` without a byte back — a frozen or cut-off broker) makes the sender
ask for fresh metadata about once a second, and as soon as the metadata names another leader for
a partition with a request waiting there, the silent connection is dropped, as on a request
timeout: its requests fail, their batches go back to their queues in order and are sent to the
new leaders. An idempotent producer resends them with the same sequence numbers, so a batch
the old leader had already replicated is recognised as a duplicate, not written twice.

Answers are handled per partition: success (and DUPLICATE_SEQUENCE_NUMBER, which means the
broker already has the batch) completes the batch; a retriable error — or a whole-request
failure such as a lost connection or a request timeout — puts it back at its place in its
partition's queue after ``retry_backoff_ms`` while attempts remain and its delivery timeout has
not passed, and asks for fresh metadata when the error says leaders moved (a
NOT_LEADER_OR_FOLLOWER answer that names the new leader moves the cached leader there at once,
:meth:`MetadataManager.apply_leader_hint`); OUT_OF_ORDER_SEQUENCE_NUMBER is retriable
while an earlier batch of the partition is being retried (it is only the consequence), and
otherwise fails the batch and makes the producer take a new producer id so later batches start
a clean sequence; any other error fails the batch.

Concurrency: event-loop only (the accumulator it shares with ``send()`` is thread-safe).
"""

from __future__ import annotations

import asyncio
import logging
import time

from kafkalite import protocol
from kafkalite.client.accumulator import ProducerBatch, RecordAccumulator
from kafkalite.client.client_metrics import ProducerMetrics
from kafkalite.client.metadata import STALLED_AFTER_S, ClusterView, MetadataManager, leader_hint
from kafkalite.client.producer_settings import ProducerSettings
from kafkalite.client.transactions import TransactionManager
from kafkalite.client.types import TopicPartition
from kafkalite.errors import (
    BrokerResponseError,
    DuplicateSequenceNumberError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaliteError,
    KafkaTimeoutError,
    NotLeaderForPartitionError,
    OutOfOrderSequenceNumberError,
    UnknownServerError,
)
from kafkalite.transport import AsyncTransport, Body, check_answer

log = logging.getLogger(__name__)

PRODUCE_CHANNEL = "produce"


class Sender:
    """Drains the accumulator to the brokers (see the module docstring)."""

    def __init__(self, settings: ProducerSettings, accumulator: RecordAccumulator, metadata: MetadataManager,
                 transport: AsyncTransport, transaction: TransactionManager | None = None,
                 metrics: ProducerMetrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics if metrics is not None else ProducerMetrics(
            lambda: accumulator.buffer_memory, lambda: accumulator.used_memory)
        self.accumulator = accumulator
        self.metadata = metadata
        self.transport = transport
        self._wake = asyncio.Event()
        self._in_flight: dict[int, int] = {}
        # broker id → partitions with a request waiting there (how many requests each)
        self._outstanding: dict[int, dict[TopicPartition, int]] = {}
        # broker id → the address its requests went to (a frozen broker drops out of the
        # metadata when its ZooKeeper session expires, its connection must still be found)
        self._addresses: dict[int, str] = {}
        self._stall_refresh_at = 0.0
        self._requests: set[asyncio.Task[None]] = set()
        self._running = True
        self._force = False
        # a transactional producer's id comes from init_transactions(), through its transaction manager
        self.transaction = transaction
        self._need_producer_id = settings.enable_idempotence and transaction is None
        self._task: asyncio.Task[None] | None = None
        self.idle = False
        # set by any thread that added work (see ProducerCore._wake): a round that was already
        # running when the work arrived must not let the sender sleep past it
        self.poked = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="kafkalite-sender")

    def wake(self) -> None:
        """Loop thread only: run a round now."""
        self._wake.set()

    async def stop(self, force: bool) -> None:
        """Stop after sending everything (``force``: at once, failing what is left — the caller
        aborted the accumulator first, and the requests still waiting for answers are dropped
        with their connections, so their batches fail now instead of after a request timeout)."""
        self._running = False
        self._force = force
        self.wake()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        if force:
            for node, partitions in self._outstanding.items():
                connection = self.transport.existing(self._addresses[node], PRODUCE_CHANNEL)
                if partitions and connection is not None:
                    connection.close("the producer is closing")
        if self._requests:
            await asyncio.gather(*self._requests, return_exceptions=True)

    # -- the loop -----------------------------------------------------------------------------
    async def _run(self) -> None:
        accumulator = self.accumulator
        while True:
            if not self._running and (self._force or (not accumulator.has_incomplete() and not self._requests)):
                break
            try:
                delay = await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:  # the sender must survive its own bugs long enough to fail batches
                log.exception("producer sender round failed")
                delay = self.settings.retry_backoff_ms / 1000
            if self._wake.is_set():
                self._wake.clear()
                continue
            self.idle = True
            if self.poked:  # work arrived during the round, before ``idle`` was visible
                self.idle = False
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
            except TimeoutError:
                pass
            finally:
                self.idle = False
            self._wake.clear()

    async def _round(self) -> float:
        accumulator = self.accumulator
        self.poked = False
        now = time.monotonic()
        accumulator.expire(now)
        if self._need_producer_id and self.transaction is None:
            if self._requests:
                return 0.05  # a new producer id waits until the requests in flight have answered
            if not await self._init_producer_id():
                return self.settings.retry_backoff_ms / 1000
        view = self.metadata.view
        waiting = self._check_stalled(view, now)
        nodes, delay, unknown_leader = accumulator.ready(view.leaders, now)
        if self.transaction is not None and not await self.transaction.register_partitions():
            delay = min(delay, self.settings.retry_backoff_ms / 1000)
        if unknown_leader:
            self.metadata.request_update()
            delay = min(delay, self.settings.retry_backoff_ms / 1000)
        if waiting:
            delay = min(delay, STALLED_AFTER_S / 2)
        limit = self.settings.max_in_flight_requests_per_connection
        sendable: set[int] = set()
        for node in nodes:
            if self._in_flight.get(node, 0) >= limit:
                continue
            address = view.address_of(node)
            if address is None or self.transport.ready(address, PRODUCE_CHANNEL, self.wake) is not None:
                sendable.add(node)
            else:  # being connected (the attempt wakes us) or in reconnect backoff
                backoff = self.transport.reconnect_backoff(address)
                if backoff > 0:
                    self.metadata.request_update()
                delay = min(delay, backoff or self.settings.retry_backoff_ms / 1000)
        if not sendable:
            return delay
        drained = accumulator.drain(view.leaders, sendable, now)
        for node, batches in drained.items():
            address = view.address_of(node)
            connection = self.transport.existing(address, PRODUCE_CHANNEL) if address is not None else None
            if address is None or connection is None:
                error = KafkaConnectionError(f"broker {node} is not in the metadata" if address is None
                                             else f"the connection to broker {node} at {address} closed")
                for batch in batches:
                    self._retry_or_fail(batch, error)
                self.metadata.request_update()
                continue
            try:
                pieces = self._encode_request(batches)
            except Exception as exc:  # never leave drained batches behind: they would mute their partitions
                for batch in batches:
                    self._retry_or_fail(batch, exc)
                continue
            future = connection.submit(protocol.PRODUCE, pieces, timeout_ms=self.settings.request_timeout_ms + 5000)
            started = time.monotonic()
            self.metrics.request_sent(node, sum(len(piece) for piece in pieces),
                                      [(batch.tp.topic, batch.record_count, len(batch.encoded or b""))
                                       for batch in batches])
            self._in_flight[node] = self._in_flight.get(node, 0) + 1
            self._addresses[node] = address
            outstanding = self._outstanding.setdefault(node, {})
            for batch in batches:
                outstanding[batch.tp] = outstanding.get(batch.tp, 0) + 1
            task = asyncio.get_running_loop().create_task(self._await_answer(node, address, batches, future,
                                                                             started))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)
        return 0.0 if drained else delay

    def _check_stalled(self, view: ClusterView, now: float) -> bool:
        """Look at the leaders with requests waiting: ask for metadata when one has been silent
        for STALLED_AFTER_S, and drop its connection once the metadata names another leader for
        one of its waiting partitions (see the module docstring). True when requests wait."""
        waiting = False
        for node, partitions in self._outstanding.items():
            if not partitions:
                continue
            waiting = True
            address = self._addresses[node]
            connection = self.transport.existing(address, PRODUCE_CHANNEL)
            if connection is None:
                continue
            silent = connection.silent_for(now)
            if silent < STALLED_AFTER_S:
                continue
            moved = sorted(f"{tp.topic}-{tp.partition}" for tp in partitions
                           if view.leaders.get(tp, -1) not in (-1, node))
            if moved:
                log.info("broker %d has not answered for %.1f s and no longer leads %s: dropping its connection "
                         "and sending to the new leaders", node, silent, ", ".join(moved))
                self.transport.note_failure(address)
                connection.close(f"broker {node} at {address} did not answer for {silent:.1f} s "
                                 f"and no longer leads {', '.join(moved)}")
                self.metadata.request_update()
            elif now - self._stall_refresh_at >= STALLED_AFTER_S:
                self._stall_refresh_at = now
                self.metadata.request_update()
        return waiting

    def _encode_request(self, batches: list[ProducerBatch]) -> list[bytes | bytearray | memoryview]:
        compression = self.settings.compression
        request = protocol.ProduceRequest(
            self.settings.acks, self.settings.request_timeout_ms,
            [protocol.ProducePartition(batch.tp.topic, batch.tp.partition, batch.encode(compression))
             for batch in batches],
            self.accumulator.producer_id if self.settings.enable_idempotence else -1)
        return protocol.encode_produce_request(request)

    async def _await_answer(self, node: int, address: str, batches: list[ProducerBatch],
                            future: asyncio.Future[tuple[int, Body]], started: float) -> None:
        try:
            try:
                status, body = await future
                self.metrics.response_received(node, time.monotonic() - started, len(body))
                self.transport.note_success(address)
                payload = check_answer(status, body)
                if self.settings.acks == 0:
                    for batch in batches:
                        self.accumulator.complete(batch, -1, -1, -1)
                    return
                results = {(item.topic, item.partition): item for item in protocol.decode_produce_response(payload)}
            except KafkaliteError as exc:
                if exc.invalid_metadata or isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)):
                    self.metadata.request_update()
                for batch in batches:
                    self._retry_or_fail(batch, exc)
                return
            except Exception as exc:  # a malformed answer: retry rather than strand the batches
                self.metadata.request_update()
                for batch in batches:
                    self._retry_or_fail(batch,
                                        UnknownServerError(f"unreadable produce answer from broker {node}: {exc}"))
                return
            for batch in batches:
                result = results.get((batch.tp.topic, batch.tp.partition))
                if result is None:
                    self._retry_or_fail(batch, UnknownServerError(
                        f"the produce answer has no entry for {batch.tp.topic}-{batch.tp.partition}"))
                elif result.error_code == 0 or result.error_code == DuplicateSequenceNumberError.errno:
                    self.accumulator.complete(batch, result.base_offset, result.log_append_time,
                                              result.log_start_offset)
                else:
                    error = protocol.error_for(result.error_code, result.error_message)
                    if isinstance(error, NotLeaderForPartitionError):
                        self.metadata.apply_leader_hint(batch.tp, leader_hint(result.error_message), node)
                    if error.invalid_metadata:
                        self.metadata.request_update()
                    self._retry_or_fail(batch, error)
        finally:
            self._in_flight[node] -= 1
            outstanding = self._outstanding.get(node)
            if outstanding is not None:
                for batch in batches:
                    left = outstanding.get(batch.tp, 0) - 1
                    if left > 0:
                        outstanding[batch.tp] = left
                    else:
                        outstanding.pop(batch.tp, None)
            self.wake()

    def _retry_or_fail(self, batch: ProducerBatch, error: BaseException) -> None:
        settings = self.settings
        now = time.monotonic()
        batch.last_error = f"{type(error).__name__}: {error}"
        if self.accumulator.aborted:
            closed = IllegalStateError(f"the producer was closed before the record was acknowledged "
                                       f"(last error: {batch.last_error})")
            closed.__cause__ = error
            self.accumulator.fail(batch, closed)
            return
        retriable = isinstance(error, KafkaliteError) and error.retriable
        if isinstance(error, OutOfOrderSequenceNumberError) and \
                self.accumulator.earlier_unacknowledged(batch.tp, batch.base_sequence):
            retriable = True
        if retriable and batch.attempts <= settings.retries and now < batch.deadline:
            log.debug("retrying %r after %s", batch, error)
            self.metrics.records_retried(batch.tp.topic, batch.record_count)
            self.accumulator.reenqueue(batch, now + settings.retry_backoff_ms / 1000)
            return
        if isinstance(error, OutOfOrderSequenceNumberError) or (
                settings.enable_idempotence and batch.base_sequence >= 0
                and not isinstance(error, BrokerResponseError)):
            self._need_producer_id = True  # the partition's sequence has a gap now: start over
        if retriable and now >= batch.deadline:
            error = _expired(batch, error, settings.delivery_timeout_ms)
        self.metrics.records_failed(batch.tp.topic, batch.record_count)
        self.accumulator.fail(batch, error)

    async def _init_producer_id(self) -> bool:
        for address in self.metadata._candidates():
            try:
                # a short per-attempt wait, as for metadata: a silent broker must not hold the sender
                answer = await self.transport.request_json(address, "POST", protocol.INIT_PRODUCER_ID, {},
                                                           timeout_ms=self.metadata.metadata_request_timeout_ms)
                producer_id = int(answer["producer_id"])
                producer_epoch = int(answer.get("producer_epoch", 0))
            except (KafkaliteError, KeyError, TypeError, ValueError) as exc:
                log.debug("init_producer_id at %s failed: %s", address, exc)
                continue
            self.accumulator.reset_producer(producer_id, producer_epoch)
            self._need_producer_id = False
            log.debug("producer id %d epoch %d", producer_id, producer_epoch)
            return True
        return False


def _expired(batch: ProducerBatch, cause: BaseException, delivery_timeout_ms: int) -> KafkaliteError:
    error = KafkaTimeoutError(f"{batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition} "
                              f"expired after {delivery_timeout_ms} ms (last error: {cause})")
    error.__cause__ = cause
    return error
