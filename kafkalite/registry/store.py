"""The registry's storage: the compacted ``_schemas`` topic, one writer, a view on every broker.

:class:`SchemaTopic` is the seam to the broker (implemented by
:mod:`kafkalite.broker.schema_topic` over the broker's services): read partition 0 from an
offset, append to it on its leader with acks=all, create it, and name its leader.

:class:`SchemaStore` keeps a :class:`~kafkalite.registry.view.RegistryView` and brings it up
to date with :meth:`SchemaStore.sync` (read from the view's next offset to the high watermark),
which every read calls first — so an answer is never older than the last acknowledged write,
as long as the topic's leader answers. When it does not, reads are served from the view as it
is, but only once the view has reached the high watermark at least once: until then (a broker
just started, ``_schemas`` without a leader yet) reads are refused with the retriable
:class:`~kafkalite.registry.errors.StoreError` (50001) rather than answered from an empty view
("subject not found" for a subject that exists). A topic that does not exist is an empty
registry only when the cluster's metadata says so (:meth:`SchemaTopic.exists`); a replica that
is merely not loaded yet answers the same error code and is retried.

Writes happen only on the leader of ``_schemas``-0 (the REST API forwards them there):
:meth:`SchemaStore.write` takes the writer lock, appends a NOOP barrier with acks=all and
reads up to it, so the view holds every record any earlier writer had acknowledged (ids and
versions are never handed out twice, also across a failover); then it decides on that view,
appends the records and reads past them before answering.

Concurrency: event-loop only; one sync and one write at a time (two locks).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from kafkalite.errors import (
    KafkaliteError,
    NotLeaderForPartitionError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from kafkalite.registry.errors import (
    OperationTimeoutError,
    SchemaRegistryError,
    StoreError,
    UnknownLeaderError,
)
from kafkalite.registry.records import NOOP, RecordKey
from kafkalite.registry.view import RegistryView

log = logging.getLogger(__name__)

SCHEMAS_TOPIC = "_schemas"
_RETRY_SECONDS = 0.1
KeyedRecord = tuple[bytes, bytes | None]
T = TypeVar("T")


@dataclass(frozen=True)
class TopicRead:
    """Records of ``_schemas``-0 from some offset: ``(offset, key, value)`` each."""

    records: list[tuple[int, bytes | None, bytes | None]]
    next_offset: int
    high_watermark: int
    log_start_offset: int


class SchemaTopic(Protocol):
    """The broker's ``_schemas`` partition, as the registry needs it."""

    async def read(self, offset: int, timeout_ms: int) -> TopicRead:
        """Records from ``offset`` (from the partition's leader); UnknownTopicOrPartitionError
        when the topic does not exist yet."""
        ...

    async def append(self, records: list[KeyedRecord]) -> int:
        """Append on this broker, which must lead the partition (acks=all); the last offset."""
        ...

    async def ensure_topic(self) -> None:
        """Create the compacted topic if it does not exist, and wait for its leader."""
        ...

    def leader_url(self) -> str | None:
        """The registry URL of the partition's leader (None when this broker leads it)."""
        ...

    def has_leader(self) -> bool:
        ...

    def exists(self) -> bool:
        """Whether the cluster's metadata holds the topic (so a read that found no partition
        means a replica not loaded yet, not an empty registry)."""
        ...


Decision = tuple[list[KeyedRecord], T]


class SchemaStore:
    """The view and the writer (see the module docstring)."""

    def __init__(self, topic: SchemaTopic, timeout_ms: int = 30_000) -> None:
        self.topic = topic
        self.view = RegistryView()
        self.timeout_ms = timeout_ms
        self._sync_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        self.caught_up = False  # the view has reached the topic's high watermark (or the topic is absent)

    async def sync(self, until: int | None = None, timeout_ms: int | None = None) -> bool:
        """Read ``_schemas`` into the view up to its high watermark (at least past offset ``until``);
        whether that succeeded within ``timeout_ms``."""
        budget_ms = timeout_ms if timeout_ms is not None else self.timeout_ms
        deadline = asyncio.get_running_loop().time() + budget_ms / 1000
        async with self._sync_lock:
            view = self.view
            while True:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    return False
                try:
                    wait_ms = 0 if until is None or view.next_offset > until else min(500, int(remaining * 1000))
                    read = await asyncio.wait_for(self.topic.read(view.next_offset, wait_ms), remaining)
                except UnknownTopicOrPartitionError as exc:
                    if until is None and not self.topic.exists():
                        self.caught_up = True  # no topic: the registry is empty, and that is up to date
                        return True
                    if not await self._pause_to_retry(exc, until, deadline):
                        return False
                    continue
                except OffsetOutOfRangeError:
                    log.warning("_schemas: offset %d is out of range; reading the topic again from its start",
                                view.next_offset)
                    self.view = view = RegistryView()
                    self.caught_up = False
                    continue
                except (TimeoutError, KafkaliteError) as exc:
                    if not await self._pause_to_retry(exc, until, deadline):
                        return False
                    continue
                if read.log_start_offset > view.next_offset:
                    view.next_offset = read.log_start_offset
                for offset, key, value in read.records:
                    view.apply(offset, key, value)
                view.next_offset = max(view.next_offset, read.next_offset)
                if view.next_offset >= read.high_watermark:
                    self.caught_up = True
                    if until is None or view.next_offset > until:
                        return True

    @staticmethod
    async def _pause_to_retry(failure: BaseException, until: int | None, deadline: float) -> bool:
        """After a failed read: whether to read again (only when a write must be seen, ``until``
        set: the leader may be moving), after a short pause within the deadline."""
        log.debug("_schemas: cannot read the topic: %s", failure)
        if until is None:
            return False
        await asyncio.sleep(min(_RETRY_SECONDS, max(0.0, deadline - asyncio.get_running_loop().time())))
        return True

    async def read_view(self) -> RegistryView:
        """The view after a best-effort sync (bounded by a few seconds); StoreError (retriable)
        while the view has never reached the topic's high watermark."""
        if not await self.sync(timeout_ms=min(self.timeout_ms, 5000)) and not self.caught_up:
            raise StoreError(f"the registry has not read {SCHEMAS_TOPIC} up to its high watermark yet "
                             "(its leader is not available); try again")
        return self.view

    async def wait_for_offset(self, offset: int) -> None:
        """Read-your-write: wait until the view holds the record at ``offset``."""
        if self.view.next_offset > offset:
            return
        if not await self.sync(until=offset):
            raise OperationTimeoutError(f"the registry's view did not reach offset {offset} of {SCHEMAS_TOPIC} "
                                        f"within {self.timeout_ms} ms")

    async def write(self, decide: Callable[[RegistryView], Decision[T]]) -> tuple[T, int]:
        """On the leader: barrier, catch up, ``decide`` the records from the view, append them,
        read past them; the decision's answer and the offset of the last record (-1 when
        nothing was written). ``decide`` raises a SchemaRegistryError to refuse."""
        async with self._write_lock:
            try:
                await self.topic.ensure_topic()
                barrier = await self.topic.append([(RecordKey(NOOP).encode(), None)])
            except SchemaRegistryError:
                raise
            except NotLeaderForPartitionError as exc:
                raise UnknownLeaderError(f"this broker no longer leads {SCHEMAS_TOPIC}: {exc}") from exc
            except KafkaliteError as exc:
                raise StoreError(f"cannot write to {SCHEMAS_TOPIC}: {exc}") from exc
            await self.wait_for_offset(barrier)
            records, answer = decide(self.view)
            if not records:
                return answer, -1
            try:
                last = await self.topic.append(records)
            except NotLeaderForPartitionError as exc:
                raise UnknownLeaderError(f"this broker no longer leads {SCHEMAS_TOPIC}: {exc}") from exc
            except KafkaliteError as exc:
                raise StoreError(f"cannot write to {SCHEMAS_TOPIC}: {exc}") from exc
            await self.wait_for_offset(last)
            return answer, last
