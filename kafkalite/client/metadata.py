"""Cluster metadata for the clients: an immutable snapshot and the manager that refreshes it.

:class:`ClusterView` (pure) is one immutable snapshot: brokers, controller, and per topic the
partition ids, the partitions whose leader is known ("available", what the partitioner needs),
the leader and leader epoch of each partition, and per-topic error codes. A new metadata
answer gives a *new* view (:meth:`ClusterView.merged`); readers on any thread may hold a view
without locks.

:class:`MetadataManager` (async) asks a broker for the topics its client cares about (or for
every topic, for pattern subscriptions), keeps the newest view in :attr:`MetadataManager.view`,
refreshes it when a caller reports stale leaders (:meth:`request_update`) or when
``metadata_max_age_ms`` passes, and coalesces concurrent refreshes into one request. Listeners
registered with :meth:`add_listener` are called with each new view.

Which broker it asks is Kafka's *least-loaded node* rule: brokers that answered last time before
brokers that recently failed (a connect or request that timed out or was refused; among failed
ones the longest-ago failure first), then brokers with an open connection and no silent requests
on it, then the fewest requests in flight, rotating among equals. Each attempt waits at most
``metadata_request_timeout_ms`` (bounded by ``request_timeout_ms``; default 3 s) before the
next broker is asked, so one silently unreachable broker (frozen, or cut off without a reset)
delays a refresh by seconds, not by the request timeout.

A NOT_LEADER_OR_FOLLOWER answer names the leader the answering broker knows ("(leader is N)",
"leadership moved to broker N"); :meth:`MetadataManager.apply_leader_hint` moves the cached
leader there at once (when broker N is known) and asks for a refresh in the background, so the
retry goes to the new leader instead of the stale one.

Concurrency: the manager lives on one event loop; :attr:`view` may be read from any thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from kafkalite import protocol
from kafkalite.client.types import TopicPartition
from kafkalite.errors import (
    BrokerResponseError,
    ConfigError,
    KafkaConnectionError,
    KafkaliteError,
    KafkaTimeoutError,
    NoBrokersAvailable,
    SaslAuthenticationFailedError,
    UnknownTopicOrPartitionError,
)
from kafkalite.transport import AsyncTransport

log = logging.getLogger(__name__)

DEFAULT_PORT = 9092
DEFAULT_METADATA_REQUEST_TIMEOUT_MS = 3000
_FATAL_TOPIC_ERRORS = {17}  # INVALID_TOPIC_EXCEPTION: retrying cannot help
# A connection whose requests have waited this long without a byte back counts as stalled.
STALLED_AFTER_S = 1.0
# The leader a NOT_LEADER_OR_FOLLOWER message names (broker/partition.py, broker/replica.py).
_LEADER_HINT = re.compile(r"\(leader is (-?\d+)\)|leadership moved to broker (-?\d+)")


def leader_hint(message: str | None) -> int | None:
    """The broker id a NOT_LEADER_OR_FOLLOWER message names as the leader; None when it names
    none (or -1, no leader)."""
    if not message:
        return None
    found = _LEADER_HINT.search(message)
    if found is None:
        return None
    leader = int(found.group(1) if found.group(1) is not None else found.group(2))
    return leader if leader >= 0 else None


def parse_bootstrap(servers: str | Sequence[str]) -> list[str]:
    """``"h1:p1,h2:p2"`` or a list of ``host[:port]`` → ``["h1:p1", ...]`` (default port 9092)."""
    items: list[str] = []
    raw = servers.split(",") if isinstance(servers, str) else list(servers)
    for item in raw:
        text = str(item).strip()
        if not text:
            continue
        if "://" in text:
            text = text.split("://", 1)[1]
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            port = rest.lstrip(":") or str(DEFAULT_PORT)
            text = f"[{host}]:{port}"
        elif text.count(":") == 0:
            text = f"{text}:{DEFAULT_PORT}"
        _host, _, port_part = text.rpartition(":")
        if not port_part.isdigit():
            raise ConfigError(f"bootstrap server {item!r} is not host:port")
        items.append(text)
    if not items:
        raise ConfigError("bootstrap_servers names no broker")
    return items


@dataclass(frozen=True)
class ClusterView:
    """One immutable snapshot of cluster metadata (see the module docstring)."""

    cluster_id: str = ""
    controller_id: int = -1
    brokers: dict[int, protocol.BrokerEndpoint] = field(default_factory=dict)
    topics: dict[str, protocol.TopicMetadata] = field(default_factory=dict)
    partitions: dict[str, tuple[int, ...]] = field(default_factory=dict)
    available: dict[str, tuple[int, ...]] = field(default_factory=dict)
    leaders: dict[TopicPartition, int] = field(default_factory=dict)
    leader_epochs: dict[TopicPartition, int] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)
    updated_at: float = 0.0
    # partition → (leader named by a NOT_LEADER answer, the leader epoch cached when it came)
    hints: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def build(cls, cluster_id: str, controller_id: int, brokers: Iterable[protocol.BrokerEndpoint],
              topics: Iterable[protocol.TopicMetadata], updated_at: float) -> ClusterView:
        broker_map = {broker.broker_id: broker for broker in brokers}
        topic_map: dict[str, protocol.TopicMetadata] = {}
        partitions: dict[str, tuple[int, ...]] = {}
        available: dict[str, tuple[int, ...]] = {}
        leaders: dict[TopicPartition, int] = {}
        epochs: dict[TopicPartition, int] = {}
        errors: dict[str, int] = {}
        for topic in topics:
            if topic.error_code and not topic.partitions:
                errors[topic.name] = topic.error_code
                continue
            topic_map[topic.name] = topic
            ordered = sorted(topic.partitions, key=lambda item: item.partition)
            partitions[topic.name] = tuple(item.partition for item in ordered)
            available[topic.name] = tuple(item.partition for item in ordered
                                          if item.leader >= 0 and item.leader in broker_map)
            for item in ordered:
                tp = TopicPartition(topic.name, item.partition)
                leaders[tp] = item.leader
                epochs[tp] = item.leader_epoch
        return cls(cluster_id, controller_id, broker_map, topic_map, partitions, available, leaders, epochs,
                   errors, updated_at)

    def merged(self, answer: protocol.ClusterMetadata, requested: Sequence[str] | None,
               updated_at: float) -> ClusterView:
        """The view after ``answer``: requested topics replaced (all of them when None)."""
        if requested is None:
            return ClusterView.build(answer.cluster_id, answer.controller_id, answer.brokers, answer.topics,
                                     updated_at)._keeping_newer_epochs(self)._with_hints(self.hints)
        answered = {topic.name for topic in answer.topics}
        kept = [topic for name, topic in self.topics.items() if name not in answered and name not in requested]
        kept_errors = {name: code for name, code in self.topic_errors.items()
                       if name not in answered and name not in requested}
        view = ClusterView.build(answer.cluster_id, answer.controller_id, answer.brokers,
                                 [*kept, *answer.topics], updated_at)
        if kept_errors:
            view.topic_errors.update(kept_errors)
        return view._keeping_newer_epochs(self)._with_hints(self.hints)

    def _keeping_newer_epochs(self, previous: ClusterView) -> ClusterView:
        """This (new, unpublished) view, where a partition whose leader epoch went backwards keeps
        the previous view's leader and epoch (Kafka's KIP-320 rule): a broker that has not heard of
        the latest election (one cut off from ZooKeeper, say) must not send the client back to a
        deposed leader. Applies only while the topic id is the same, so a topic deleted and created
        again starts afresh."""
        for tp, epoch in previous.leader_epochs.items():
            newer = self.leader_epochs.get(tp)
            if newer is None or newer >= epoch:
                continue
            before, now = previous.topics.get(tp.topic), self.topics.get(tp.topic)
            if before is None or now is None or not before.topic_id or before.topic_id != now.topic_id:
                continue
            leader = previous.leaders.get(tp, -1)
            self.leaders[tp] = leader
            self.leader_epochs[tp] = epoch
            known = self.available.get(tp.topic, ())
            if leader >= 0 and leader in self.brokers and tp.partition not in known:
                self.available[tp.topic] = tuple(sorted((*known, tp.partition)))
            elif (leader < 0 or leader not in self.brokers) and tp.partition in known:
                self.available[tp.topic] = tuple(item for item in known if item != tp.partition)
        return self

    def _with_hints(self, hints: dict[TopicPartition, tuple[int, int]]) -> ClusterView:
        """This (new, unpublished) view with the leader hints that it does not supersede: a hint
        stands while the answer's leader epoch for its partition is not newer than the epoch the
        hint corrected, and the hinted broker is known."""
        for tp, (leader, epoch) in hints.items():
            if tp not in self.leaders or leader not in self.brokers or self.leader_epochs.get(tp, -1) > epoch \
                    or self.leaders[tp] == leader:
                continue
            self.leaders[tp] = leader
            self.hints[tp] = (leader, epoch)
            known = self.available.get(tp.topic, ())
            if tp.partition not in known:
                self.available[tp.topic] = tuple(sorted((*known, tp.partition)))
        return self

    def with_hint(self, tp: TopicPartition, leader: int) -> ClusterView:
        """A copy where ``leader`` leads ``tp`` until metadata with a newer leader epoch arrives."""
        copy = dataclasses.replace(self, leaders=dict(self.leaders), available=dict(self.available),
                                   hints={key: value for key, value in self.hints.items() if key != tp})
        return copy._with_hints({tp: (leader, self.leader_epochs.get(tp, -1))})

    def without_hint(self, tp: TopicPartition) -> ClusterView:
        """A copy whose next merge no longer keeps the hint for ``tp`` (the cached leader stays
        until that merge recomputes it from the answer)."""
        return dataclasses.replace(self, hints={key: value for key, value in self.hints.items() if key != tp})

    def leader(self, tp: TopicPartition) -> int:
        return self.leaders.get(tp, -1)

    def leader_address(self, tp: TopicPartition) -> str | None:
        broker = self.brokers.get(self.leaders.get(tp, -1))
        return broker.address if broker is not None else None

    def address_of(self, broker_id: int) -> str | None:
        broker = self.brokers.get(broker_id)
        return broker.address if broker is not None else None

    def partitions_for(self, topic: str) -> set[int] | None:
        found = self.partitions.get(topic)
        return set(found) if found is not None else None


class MetadataManager:
    """Keeps a :class:`ClusterView` fresh (see the module docstring)."""

    def __init__(self, transport: AsyncTransport, bootstrap_servers: str | Sequence[str], *,
                 request_timeout_ms: int = 30_000, retry_backoff_ms: int = 100,
                 metadata_max_age_ms: int = 300_000, allow_auto_create_topics: bool = False,
                 metadata_request_timeout_ms: int = DEFAULT_METADATA_REQUEST_TIMEOUT_MS) -> None:
        self.transport = transport
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.request_timeout_ms = request_timeout_ms
        self.metadata_request_timeout_ms = max(1, min(request_timeout_ms, metadata_request_timeout_ms))
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.allow_auto_create_topics = allow_auto_create_topics
        self.view = ClusterView()
        self.topics: set[str] = set()
        self.all_topics = False
        self._need_update = True
        self._refreshing: asyncio.Future[ClusterView] | None = None
        self._listeners: list[Callable[[ClusterView], None]] = []
        self._rotation = random.randrange(1 << 16)
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._closed = False

    # -- interest and listeners ---------------------------------------------------------------
    def add_topics(self, topics: Iterable[str]) -> bool:
        """Start tracking ``topics``; True when one of them is new (a refresh was requested)."""
        new = set(topics) - self.topics
        if new:
            self.topics |= new
            self.request_update()
        return bool(new)

    def set_topics(self, topics: Iterable[str]) -> None:
        self.topics = set(topics)
        self.request_update()

    def add_listener(self, listener: Callable[[ClusterView], None]) -> None:
        self._listeners.append(listener)

    def request_update(self) -> None:
        """Mark the view stale: the background task refreshes it after ``retry_backoff_ms``."""
        self._need_update = True
        if self._wake is not None:
            self._wake.set()

    @property
    def stale(self) -> bool:
        return self._need_update or (time.monotonic() - self.view.updated_at) * 1000 >= self.metadata_max_age_ms

    # -- background refresh -------------------------------------------------------------------
    def start(self) -> None:
        """Start the background refresher on the running loop (idempotent)."""
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="kafkalite-metadata")

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        assert self._wake is not None
        while not self._closed:
            if self.stale and (self.topics or self.all_topics):
                try:
                    await self.refresh()
                except KafkaliteError as exc:
                    log.debug("metadata refresh failed: %s", exc)
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                continue
            age_ms = (time.monotonic() - self.view.updated_at) * 1000
            wait = max(0.0, (self.metadata_max_age_ms - age_ms) / 1000)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=wait)
            except TimeoutError:
                pass

    # -- requests -----------------------------------------------------------------------------
    def apply_leader_hint(self, tp: TopicPartition, leader: int | None, answered_by: int) -> bool:
        """Broker ``answered_by`` said NOT_LEADER_OR_FOLLOWER for ``tp`` naming ``leader`` (None:
        it named none). Make ``leader`` the cached leader now — it stays so until metadata with a
        newer leader epoch arrives — and ask for a refresh in the background. A hinted leader that
        itself answers NOT_LEADER without naming another drops the hint. True when the cached
        leader changed."""
        view = self.view
        self.request_update()
        if view.leaders.get(tp, -1) != answered_by or tp.topic not in view.partitions:
            return False  # the cache moved on since the request was sent
        if leader is None or leader == answered_by or leader not in view.brokers:
            if tp in view.hints:
                self.view = view.without_hint(tp)
            return False
        self.view = view.with_hint(tp, leader)
        log.debug("%s-%d: NOT_LEADER from broker %d names broker %d as the leader", tp.topic, tp.partition,
                  answered_by, leader)
        self._notify(self.view)
        return True

    def _notify(self, view: ClusterView) -> None:
        for listener in list(self._listeners):
            try:
                listener(view)
            except Exception:  # a listener's bug must not stop metadata updates
                log.exception("metadata listener failed")

    def _candidates(self) -> list[str]:
        """Brokers to ask, best first: the least-loaded reachable one (see the module docstring)."""
        known = [broker.address for _, broker in sorted(self.view.brokers.items())]
        ordered = known + [address for address in self.bootstrap if address not in known]
        if not ordered:
            return ordered
        self._rotation += 1
        start = self._rotation % len(ordered)
        rotated = ordered[start:] + ordered[:start]
        transport = self.transport
        now = time.monotonic()

        def rank(item: tuple[int, str]) -> tuple[bool, float, bool, bool, int, int]:
            index, address = item
            failed = transport.failed_at(address)
            return (failed is not None, failed or 0.0, transport.stalled(address, now, STALLED_AFTER_S),
                    not transport.connected(address), transport.in_flight(address), index)
        return [address for _, address in sorted(enumerate(rotated), key=rank)]

    async def refresh(self, topics: Sequence[str] | None = None, *, all_topics: bool | None = None,
                      allow_auto_create: bool | None = None) -> ClusterView:
        """Ask a broker for metadata now; concurrent calls for the tracked topics share one request.

        ``topics`` defaults to the tracked topics (every topic when ``all_topics``).
        """
        if topics is not None or all_topics is not None or allow_auto_create is not None:
            return await self._fetch(list(topics) if topics is not None else None,
                                     self.all_topics if all_topics is None else all_topics,
                                     self.allow_auto_create_topics if allow_auto_create is None else allow_auto_create)
        if self._refreshing is not None and not self._refreshing.done():
            return await asyncio.shield(self._refreshing)
        future: asyncio.Future[ClusterView] = asyncio.get_running_loop().create_future()
        self._refreshing = future
        try:
            view = await self._fetch(sorted(self.topics), self.all_topics, self.allow_auto_create_topics)
        except BaseException as exc:
            future.set_exception(exc if isinstance(exc, Exception) else KafkaConnectionError(str(exc)))
            future.exception()
            raise
        future.set_result(view)
        return view

    async def _fetch(self, topics: list[str] | None, all_topics: bool, allow_auto_create: bool) -> ClusterView:
        requested: list[str] | None = None if all_topics else (topics or [])
        body = {"topics": requested, "allow_auto_topic_creation": allow_auto_create}
        last_error: Exception | None = None
        started_need = self._need_update
        self._need_update = False
        for address in self._candidates():
            try:
                answer = await self.transport.request_json(address, "POST", protocol.METADATA, body,
                                                           timeout_ms=self.metadata_request_timeout_ms)
                metadata = protocol.ClusterMetadata.from_json(answer)
            except SaslAuthenticationFailedError:  # wrong credentials: no other broker or retry will help
                self._need_update = True
                raise
            except (KafkaConnectionError, KafkaTimeoutError, BrokerResponseError) as exc:
                last_error = exc
                continue
            except (KeyError, TypeError, ValueError) as exc:
                last_error = KafkaConnectionError(f"{address} sent malformed metadata: {exc}")
                continue
            view = self.view.merged(metadata, requested, time.monotonic())
            if any(topic.error_code == 5 or any(p.leader < 0 for p in topic.partitions)
                   for topic in metadata.topics if requested is None or topic.name in requested):
                self._need_update = True  # leaders being elected: look again soon
            self.view = view
            self._notify(view)
            return view
        self._need_update = True if started_need or last_error else self._need_update
        raise NoBrokersAvailable(f"no broker of {self._candidates()} answered a metadata request "
                                 f"(last error: {last_error})")

    async def wait_for_topic(self, topic: str, timeout_ms: float) -> tuple[int, ...]:
        """The partition ids of ``topic``, refreshing until it is known or ``timeout_ms`` passes.

        A topic that does not exist (and is not auto-created) keeps being asked for until the
        timeout, as Kafka's producer does; an invalid topic name fails at once.
        """
        self.add_topics([topic])
        deadline = time.monotonic() + timeout_ms / 1000
        last_error: Exception | None = None
        while True:
            partitions = self.view.partitions.get(topic)
            if partitions:
                return partitions
            code = self.view.topic_errors.get(topic)
            if code in _FATAL_TOPIC_ERRORS:
                raise protocol.error_for(code, f"topic {topic!r}")
            if time.monotonic() >= deadline:
                break
            try:
                await self.refresh()
            except SaslAuthenticationFailedError:
                raise
            except KafkaliteError as exc:
                last_error = exc
            if self.view.partitions.get(topic):
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await asyncio.sleep(min(self.retry_backoff_ms / 1000, remaining))
        detail = f" (last error: {last_error})" if last_error else ""
        code = self.view.topic_errors.get(topic)
        if code == UnknownTopicOrPartitionError.errno:
            detail += " (the topic does not exist)"
        raise KafkaTimeoutError(f"topic {topic!r} not found in metadata after {timeout_ms:.0f} ms{detail}")
