"""The link to one group's coordinator: :class:`CoordinatorLink` finds the coordinator
(FindCoordinator on any broker) and sends it group requests, finding it again after
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a broken connection and waiting out
COORDINATOR_LOAD_IN_PROGRESS; :func:`fetch_offsets` (OffsetFetch) and :func:`offsets_body`
(the topics of an OffsetCommit body) build on it.

The consumer's group membership (:mod:`kafkalite.client.group`) and the admin client's group
calls (:mod:`kafkalite.client.admin_core`) share it.

Concurrency: event-loop only (the loop of the client that owns the link, whose metadata
manager and transport it uses).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafkalite import protocol
from kafkalite.client.metadata import MetadataManager
from kafkalite.client.types import OffsetAndMetadata, TopicPartition
from kafkalite.errors import (
    BrokerResponseError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NotCoordinatorError,
    UnstableOffsetCommitError,
)
from kafkalite.transport import AsyncTransport

log = logging.getLogger(__name__)

# the answers that mean "ask where the coordinator is again"
COORDINATOR_ERRORS = (NotCoordinatorError, CoordinatorNotAvailableError)


def error_of(answer: Mapping[str, Any]) -> BrokerResponseError | None:
    """The error an answer (or one entry of it) carries in ``error_code``, None for success."""
    code = answer.get("error_code", 0)
    if not code:
        return None
    return protocol.error_for(int(code), str(answer.get("message") or answer.get("error") or ""))


class CoordinatorLink:
    """Finds one group's coordinator and sends it requests (see the module docstring).

    Event-loop only.
    """

    def __init__(self, metadata: MetadataManager, transport: AsyncTransport, group_id: str, *,
                 request_timeout_ms: int, retry_backoff_ms: int, key_type: int = 0,
                 key_field: str = "group_id") -> None:
        """``key_type`` 1 with ``key_field`` "transactional_id" links to a transaction coordinator."""
        self.metadata = metadata
        self.transport = transport
        self.group_id = group_id
        self.key_type = key_type
        self.key_field = key_field
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff = retry_backoff_ms / 1000
        self.node_id = -1
        self.address: str | None = None
        #: called as ``(path, seconds)`` after each answered request (the consumer's metrics)
        self.on_answer: Callable[[str, float], None] | None = None

    def forget(self) -> None:
        if self.address is not None:
            log.info("group %s: coordinator %d (%s) forgotten", self.group_id, self.node_id, self.address)
        self.node_id = -1
        self.address = None

    async def find(self, deadline: float | None) -> str:
        """The coordinator's address, asking the brokers until one names it or ``deadline`` passes."""
        last_error: BaseException | None = None
        while self.address is None:
            for address in self.metadata._candidates():
                try:
                    answer = await self.transport.request_json(
                        address, "POST", protocol.FIND_COORDINATOR, {"key": self.group_id, "key_type": self.key_type},
                        timeout_ms=self.request_timeout_ms)
                except (KafkaConnectionError, KafkaTimeoutError) as exc:
                    last_error = exc
                    continue
                error = error_of(answer)
                if error is None:
                    self.node_id = int(answer["node_id"])
                    self.address = f"{answer['host']}:{answer['port']}"
                    log.debug("group %s: coordinator is broker %d at %s", self.group_id, self.node_id, self.address)
                    return self.address
                if not error.retriable:
                    raise error
                last_error = error
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"no coordinator found for group {self.group_id!r} (last error: {last_error})")
            self.metadata.request_update()
            await asyncio.sleep(self.retry_backoff)
        return self.address

    async def call(self, path: str, body: dict[str, Any], *, deadline: float | None,
                   timeout_ms: int | None = None, retry: bool = True) -> dict[str, Any]:
        """Send ``body`` (plus the group id) to the coordinator; coordinator-level errors and
        broken connections are retried until ``deadline`` (None: forever) unless ``retry`` is
        False, when they are raised. Other errors come back in the answer."""
        payload = {self.key_field: self.group_id, **body}
        while True:
            address = await self.find(deadline)
            try:
                started = time.monotonic()
                answer = await self.transport.request_json(address, "POST", path, payload,
                                                           timeout_ms=timeout_ms or self.request_timeout_ms)
                if self.on_answer is not None:
                    self.on_answer(path, time.monotonic() - started)
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                self.forget()
                if not retry or (deadline is not None and time.monotonic() >= deadline):
                    raise
                log.debug("group %s: %s failed: %s", self.group_id, path, exc)
                await asyncio.sleep(self.retry_backoff)
                continue
            error = error_of(answer)
            if isinstance(error, (*COORDINATOR_ERRORS, CoordinatorLoadInProgressError)):
                if not isinstance(error, CoordinatorLoadInProgressError):
                    self.forget()
                if not retry or (deadline is not None and time.monotonic() >= deadline):
                    raise error
                await asyncio.sleep(self.retry_backoff)
                continue
            return dict(answer)


def offsets_body(offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, value in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append({"partition": tp.partition, "offset": value.offset,
                                                  "leader_epoch": value.leader_epoch, "metadata": value.metadata})
    return [{"name": topic, "partitions": entries} for topic, entries in by_topic.items()]


async def fetch_offsets(link: CoordinatorLink, partitions: Iterable[TopicPartition] | None, deadline: float | None,
                        require_stable: bool = False) -> dict[TopicPartition, OffsetAndMetadata]:
    """OffsetFetch: the committed offsets (-1 where none) of ``partitions`` (None: every one stored).
    ``require_stable`` (a read_committed consumer's): while a transactional commit of a partition
    is pending, ask again (UNSTABLE_OFFSET_COMMIT) until ``deadline``."""
    while True:
        try:
            return await _fetch_offsets(link, partitions, deadline, require_stable)
        except UnstableOffsetCommitError:
            if deadline is not None and time.monotonic() >= deadline:
                raise
            await asyncio.sleep(link.retry_backoff)


async def _fetch_offsets(link: CoordinatorLink, partitions: Iterable[TopicPartition] | None,
                         deadline: float | None, require_stable: bool) -> dict[TopicPartition, OffsetAndMetadata]:
    topics: list[dict[str, Any]] | None = None
    if partitions is not None:
        grouped: dict[str, list[int]] = {}
        for tp in partitions:
            grouped.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": topic, "partitions": sorted(numbers)} for topic, numbers in sorted(grouped.items())]
        if not topics:
            return {}
    body: dict[str, Any] = {"topics": topics}
    if require_stable:
        body["require_stable"] = True
    answer = await link.call(protocol.OFFSET_FETCH, body, deadline=deadline)
    error = error_of(answer)
    if error is not None:
        raise error
    result: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic in answer.get("topics", []):
        for entry in topic.get("partitions", []):
            entry_error = error_of(entry)
            if entry_error is not None:
                raise entry_error
            result[TopicPartition(str(topic["name"]), int(entry["partition"]))] = OffsetAndMetadata(
                int(entry.get("offset", -1)), str(entry.get("metadata") or ""), int(entry.get("leader_epoch", -1)))
    return result
