"""Follower fetch sessions on the leader: what each follower fetches, kept between its fetches.

Kafka's incremental fetch (KIP-227), for followers: the first fetch of a follower carries every
partition it follows from this leader and opens a session; each later fetch carries only the
partitions whose fetch position changed (and the ones it no longer follows), and its answer
carries only the partitions with something new for the follower: records, a new high watermark
or log start offset, an error or a truncation point. A session listens to its partitions
(:meth:`kafkalite.broker.partition.Partition.add_change_listener`), so a long poll over thousands
of idle partitions costs nothing per partition: it waits for the first partition that changes,
and reads only the partitions that changed.

While a partition has not changed, the follower's position in it has not changed either, so
the follower is as caught up as at its last report. When the partition next changes, the
session records that the follower was caught up until its latest fetch (the ISR expiry of
:meth:`kafkalite.broker.partition.Partition.isr_shrink_candidates` depends on it).

:class:`FetchSessions` owns the sessions of one broker: one per follower broker (a new full
fetch of a follower replaces its session), numbered from a counter, looked up by id and checked
against the epoch each fetch must carry (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH
otherwise: the follower then opens a new session with a full fetch).

Concurrency: event-loop only; a session serves one fetch at a time (its follower sends the next
one after the answer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kafkalite import protocol
from kafkalite.broker.partition import Partition
from kafkalite.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError

PartitionKey = tuple[str, int]

#: Every this often a fetch of a session reads all its partitions, not only the changed ones: a
#: change no listener saw (a log start moved by retention) reaches the follower then.
FULL_READ_INTERVAL_SECONDS = 60.0
#: Epochs run from 1 to this and wrap to 1, as Kafka's.
MAX_SESSION_EPOCH = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The epoch of the fetch after one with ``epoch`` (Kafka's wrap-around)."""
    return 1 if epoch >= MAX_SESSION_EPOCH else epoch + 1


@dataclass(slots=True)
class SessionPartition:
    """One partition of a session: the follower's position and what it was last told."""

    item: protocol.FetchPartition
    #: The hosted replica the session listens to (None until first read here).
    partition: Partition | None = None
    sent_high_watermark: int = -2
    sent_log_start: int = -2
    #: The follower's position reached this leader's log end when last read.
    caught_up: bool = False


class FetchSession:
    """The partitions one follower fetches from this broker. See the module docstring."""

    def __init__(self, session_id: int, replica_id: int, clock: Callable[[], int], now: float) -> None:
        self.session_id = session_id
        self.replica_id = replica_id
        self.clock = clock
        self.epoch = 0
        self.partitions: dict[PartitionKey, SessionPartition] = {}
        self.changed: set[PartitionKey] = set()
        self.last_request_ms = clock()
        self.last_full_read = now
        self.in_request = False
        self._waiter: asyncio.Future[None] | None = None

    # -- what the follower says ---------------------------------------------------------------
    def update(self, items: Iterable[protocol.FetchPartition], forgotten: Iterable[PartitionKey]) -> list[PartitionKey]:
        """Adopt a fetch's partitions (new or moved positions) and drop the forgotten ones;
        returns the keys to read now."""
        keys = []
        for key in forgotten:
            entry = self.partitions.pop(key, None)
            if entry is not None and entry.partition is not None:
                entry.partition.remove_change_listener(self)
            self.changed.discard(key)
        for item in items:
            key = (item.topic, item.partition)
            entry = self.partitions.get(key)
            if entry is None:
                self.partitions[key] = SessionPartition(item)
            else:
                entry.item = item
            keys.append(key)
        return keys

    def watch(self, entry: SessionPartition, partition: Partition) -> None:
        """Listen to ``partition`` for ``entry`` (again, when the hosted replica was replaced)."""
        if entry.partition is partition:
            return
        if entry.partition is not None:
            entry.partition.remove_change_listener(self)
        entry.partition = partition
        entry.caught_up = False
        partition.add_change_listener(self)

    def close(self) -> None:
        """Stop listening to every partition (the session is replaced or the broker stops)."""
        for entry in self.partitions.values():
            if entry.partition is not None:
                entry.partition.remove_change_listener(self)
                entry.partition = None
        self.partitions.clear()
        self.changed.clear()
        self.wake()

    # -- what changes here ---------------------------------------------------------------------
    def partition_changed(self, partition: Partition) -> None:
        """A partition of the session changed: read it at the session's next chance."""
        key = (partition.topic, partition.partition)
        entry = self.partitions.get(key)
        if entry is None or entry.partition is not partition:
            return
        if entry.caught_up:
            # The follower reported this position and the log had not moved since, so it was
            # caught up until its latest fetch (or now, while a fetch of it is parked here).
            entry.caught_up = False
            state = partition.followers.get(self.replica_id)
            if state is not None:
                seen = self.clock() if self.in_request else self.last_request_ms
                state.last_caught_up_ms = max(state.last_caught_up_ms, seen)
        self.changed.add(key)
        self.wake()

    def take_changed(self) -> set[PartitionKey]:
        changed, self.changed = self.changed, set()
        return changed

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait_for_change(self, timeout: float) -> None:
        """Until a partition of the session changes or ``timeout`` seconds pass."""
        if self.changed or timeout <= 0:
            return
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout, _release, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class FetchSessions:
    """The fetch sessions of one broker, one per follower broker. See the module docstring."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self._by_replica: dict[int, int] = {}
        self._last_id = 0

    def open(self, request: protocol.FetchRequest) -> tuple[FetchSession, list[PartitionKey]]:
        """The session of a follower's session fetch, with the keys to read: every partition of a
        new session or of one due for a full read, else those the fetch carries."""
        ask = request.session
        assert ask is not None
        loop = asyncio.get_running_loop()
        if ask.session_id == 0:  # a full fetch: a new session replaces the follower's old one
            self._close_of_replica(request.replica_id)
            self._last_id = self._last_id % MAX_SESSION_EPOCH + 1
            session = FetchSession(self._last_id, request.replica_id, self.clock, loop.time())
            self.sessions[session.session_id] = session
            self._by_replica[request.replica_id] = session.session_id
            session.epoch = 1
            session.update(request.partitions, ())
            return session, list(session.partitions)
        found = self.sessions.get(ask.session_id)
        if found is None or found.replica_id != request.replica_id:
            raise FetchSessionIdNotFoundError(f"no fetch session {ask.session_id} of broker {request.replica_id}")
        if ask.epoch != found.epoch:
            raise InvalidFetchSessionEpochError(
                f"fetch session {ask.session_id} expects epoch {found.epoch}, not {ask.epoch}")
        if found.in_request:
            raise InvalidFetchSessionEpochError(f"fetch session {ask.session_id} is serving a fetch already")
        found.epoch = next_epoch(found.epoch)
        keys = found.update(request.partitions, ask.forgotten)
        now = loop.time()
        if now - found.last_full_read >= FULL_READ_INTERVAL_SECONDS:
            found.last_full_read = now
            return found, list(found.partitions)
        return found, keys

    def fetching(self, replica_id: int, within_ms: int) -> bool:
        """Whether ``replica_id`` has a session with a fetch parked here now or answered within
        ``within_ms``: a follower that is fetching, not one that stopped."""
        session_id = self._by_replica.get(replica_id)
        session = self.sessions.get(session_id) if session_id is not None else None
        return session is not None and (session.in_request or self.clock() - session.last_request_ms <= within_ms)

    def _close_of_replica(self, replica_id: int) -> None:
        old = self._by_replica.pop(replica_id, None)
        if old is not None:
            session = self.sessions.pop(old, None)
            if session is not None:
                session.close()

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()
        self._by_replica.clear()
