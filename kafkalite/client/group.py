"""Consumer-group membership on the client side: coordinator discovery, join/sync with the
configured assignors, the background heartbeat, rebalance listener calls, offset commits.

Pieces:

* :class:`ConsumerRebalanceListener` — the listener a subscriber may pass: ``on_partitions_revoked``,
  ``on_partitions_assigned`` and ``on_partitions_lost`` (which defaults to revoked, as in Kafka's
  Java client). Methods may be plain functions or coroutines (the asyncio consumer awaits them).
* :func:`resolve_assignors` — ``partition_assignment_strategy`` given as assignor classes,
  instances, names (``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``), Java class
  names or one comma-separated string; :func:`rebalance_protocol` — COOPERATIVE only when every
  configured assignor is cooperative, else EAGER (Kafka's rule: the default
  ``[range, cooperative-sticky]`` therefore rebalances eagerly, and a group moves to the
  cooperative protocol once ``range`` is dropped from every member).
* :class:`CoordinatorLink` — finds a group's coordinator (FindCoordinator on any broker) and
  sends it group requests, finding it again after NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or
  a broken connection and waiting out COORDINATOR_LOAD_IN_PROGRESS. The admin client shares it.
* :class:`GroupMembership` — one consumer's membership (see below).

Membership follows Kafka's classic consumer: a rebalance happens *inside poll()*. The consumer
core calls :meth:`GroupMembership.poll` at every step of its poll loop. When a (re)join is
needed it first runs Kafka's "join prepare" — partitions whose generation was lost are handed
to ``on_partitions_lost``; with the EAGER protocol every owned partition is committed (when
auto-committing) and revoked; with COOPERATIVE only partitions of topics no longer subscribed
are — then starts the join task (JoinGroup, MEMBER_ID_REQUIRED handling, the leader's
assignment, SyncGroup) in the background. A consumer that owns no partitions, or an EAGER one,
waits for it within the poll's timeout; a COOPERATIVE consumer keeps returning the records of
the partitions it owns while the join runs. The result is applied at the next poll step: moved
partitions are committed and revoked, new ones assigned (listener calls), and a COOPERATIVE
member that had to revoke something rejoins at once (the follow-up rebalance that hands the
withheld partitions to their new owner).

Protocol metadata and assignments travel as compact, key-sorted JSON
(:meth:`Subscription.to_json` / :meth:`Assignment.to_json`), base64 in the request bodies.
``owned_partitions`` carries what the assignor needs: the current partitions under the
COOPERATIVE protocol; the last assignment for the eager ``sticky`` assignor (the member has
revoked everything before joining); nothing for the others, so a restarted static member sends
the same metadata as before and the coordinator hands back its assignment without a rebalance.

The heartbeat task runs on the consumer's event loop (the sync consumer's loop thread), every
``heartbeat_interval_ms``, so a slow poll loop keeps its session. REBALANCE_IN_PROGRESS asks for
a rejoin at the next poll (heartbeats go on until then); ILLEGAL_GENERATION and
UNKNOWN_MEMBER_ID mean the partitions are lost; FENCED_INSTANCE_ID is raised from the next poll.
When the application has not polled for ``max_poll_interval_ms`` (which is also the rebalance
timeout sent to the coordinator) the member leaves the group — a LeaveGroup for a dynamic
member, silence for a static one — and rejoins as a new member at its next poll, as Kafka's
client does.

Commits carry the member id and generation when subscribed (generation -1 and no member id for
manually assigned partitions). ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID raise CommitFailedError
and make the member rejoin; REBALANCE_IN_PROGRESS waits for the running join and retries with
the new generation; coordinator errors are retried until the timeout.

Concurrency: event-loop only (one loop: the consumer core's). User callbacks (listener) go
through the core's callback runner, which the sync consumer uses to run them on the thread
blocked in ``poll()``/``close()``, so a listener may call the consumer (``commit()``, ``seek()``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafkalite import protocol
from kafkalite.client.assignors import (
    ASSIGNORS,
    COOPERATIVE,
    EAGER,
    Assignment,
    Assignor,
    CooperativeStickyAssignor,
    RangeAssignor,
    StickyAssignor,
    Subscription,
    assignor_for,
)
from kafkalite.client.metadata import MetadataManager
from kafkalite.client.types import OffsetAndMetadata, TopicPartition
from kafkalite.errors import (
    BrokerResponseError,
    CommitFailedError,
    ConfigError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    KafkaConnectionError,
    KafkaliteError,
    KafkaTimeoutError,
    MemberIdRequiredError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from kafkalite.transport import AsyncTransport

if TYPE_CHECKING:
    from kafkalite.client.consumer import ConsumerCore

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
DEFAULT_ASSIGNORS: tuple[type[Assignor], ...] = (RangeAssignor, CooperativeStickyAssignor)
_JAVA_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}
_COORDINATOR_ERRORS = (NotCoordinatorError, CoordinatorNotAvailableError)
_LEAVE_TIMEOUT_MS = 5000


# --- the listener ---------------------------------------------------------------------------------


class ConsumerRebalanceListener:
    """Callbacks around a group rebalance (subclass it and override what you need).

    ``on_partitions_revoked(revoked)`` runs before partitions are taken away (commit their
    offsets there); ``on_partitions_assigned(assigned)`` after new ones were added (seek there);
    ``on_partitions_lost(lost)`` when the member found out it is no longer in the generation
    that owned them (another member may already read them; do not commit) — by default it calls
    ``on_partitions_revoked``. Methods may be coroutines with the asyncio consumer.
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        return None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        return self.on_partitions_revoked(lost)


# --- assignors ------------------------------------------------------------------------------------


def resolve_assignors(strategy: Any) -> list[Assignor]:
    """The assignor instances for ``partition_assignment_strategy`` (see the module docstring)."""
    if strategy is None:
        items: list[Any] = list(DEFAULT_ASSIGNORS)
    elif isinstance(strategy, str):
        items = [part.strip() for part in strategy.split(",") if part.strip()]
    elif isinstance(strategy, (list, tuple)):
        items = []
        for entry in strategy:
            if isinstance(entry, str):
                items.extend(part.strip() for part in entry.split(",") if part.strip())
            else:
                items.append(entry)
    else:
        items = [strategy]
    resolved: list[Assignor] = []
    for item in items:
        if isinstance(item, Assignor):
            assignor = item
        elif isinstance(item, type) and issubclass(item, Assignor):
            assignor = item()
        elif isinstance(item, str):
            assignor = assignor_for(_JAVA_NAMES.get(item, item).lower())
        elif isinstance(name := getattr(item, "name", None), str) and name in ASSIGNORS:
            assignor = assignor_for(name)
        else:
            raise ConfigError(f"partition_assignment_strategy entries are assignor classes, instances or names "
                              f"({', '.join(sorted(ASSIGNORS))}), got {item!r}")
        if any(existing.name == assignor.name for existing in resolved):
            continue
        resolved.append(assignor)
    if not resolved:
        raise ConfigError("partition_assignment_strategy names no assignor")
    return resolved


def rebalance_protocol(assignors: Sequence[Assignor]) -> str:
    """COOPERATIVE when every assignor supports it, else EAGER (Kafka's rule)."""
    return COOPERATIVE if all(assignor.protocol == COOPERATIVE for assignor in assignors) else EAGER


def encode_json(value: Mapping[str, Any]) -> str:
    """Compact, key-sorted JSON, base64: the same value always gives the same bytes."""
    raw = json.dumps(value, separators=(",", ":"), sort_keys=True).encode("utf-8")
    return base64.b64encode(raw).decode("ascii")


def decode_json(value: Any) -> Any:
    """Inverse of :func:`encode_json`; None for empty or unreadable data."""
    if not value:
        return None
    try:
        return json.loads(base64.b64decode(str(value), validate=True))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None


def decode_subscription(value: Any) -> Subscription | None:
    data = decode_json(value)
    if data is None:
        return None
    try:
        return Subscription.from_json(data)
    except KafkaliteError:
        return None


def decode_assignment(value: Any) -> Assignment | None:
    data = decode_json(value)
    if data is None:
        return None
    try:
        return Assignment.from_json(data)
    except KafkaliteError:
        return None


# --- the coordinator link -------------------------------------------------------------------------


def _error_of(answer: Mapping[str, Any]) -> BrokerResponseError | None:
    code = answer.get("error_code", 0)
    if not code:
        return None
    return protocol.error_for(int(code), str(answer.get("message") or answer.get("error") or ""))


class CoordinatorLink:
    """Finds one group's coordinator and sends it requests (see the module docstring).

    Event-loop only.
    """

    def __init__(self, metadata: MetadataManager, transport: AsyncTransport, group_id: str, *,
                 request_timeout_ms: int, retry_backoff_ms: int) -> None:
        self.metadata = metadata
        self.transport = transport
        self.group_id = group_id
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff = retry_backoff_ms / 1000
        self.node_id = -1
        self.address: str | None = None

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
                        address, "POST", protocol.FIND_COORDINATOR, {"key": self.group_id, "key_type": 0},
                        timeout_ms=self.request_timeout_ms)
                except (KafkaConnectionError, KafkaTimeoutError) as exc:
                    last_error = exc
                    continue
                error = _error_of(answer)
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
        payload = {"group_id": self.group_id, **body}
        while True:
            address = await self.find(deadline)
            try:
                answer = await self.transport.request_json(address, "POST", path, payload,
                                                           timeout_ms=timeout_ms or self.request_timeout_ms)
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                self.forget()
                if not retry or (deadline is not None and time.monotonic() >= deadline):
                    raise
                log.debug("group %s: %s failed: %s", self.group_id, path, exc)
                await asyncio.sleep(self.retry_backoff)
                continue
            error = _error_of(answer)
            if isinstance(error, (*_COORDINATOR_ERRORS, CoordinatorLoadInProgressError)):
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


async def fetch_offsets(link: CoordinatorLink, partitions: Iterable[TopicPartition] | None,
                        deadline: float | None) -> dict[TopicPartition, OffsetAndMetadata]:
    """OffsetFetch: the committed offsets (-1 where none) of ``partitions`` (None: every one stored)."""
    topics: list[dict[str, Any]] | None = None
    if partitions is not None:
        grouped: dict[str, list[int]] = {}
        for tp in partitions:
            grouped.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": topic, "partitions": sorted(numbers)} for topic, numbers in sorted(grouped.items())]
        if not topics:
            return {}
    answer = await link.call(protocol.OFFSET_FETCH, {"topics": topics}, deadline=deadline)
    error = _error_of(answer)
    if error is not None:
        raise error
    result: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic in answer.get("topics", []):
        for entry in topic.get("partitions", []):
            entry_error = _error_of(entry)
            if entry_error is not None:
                raise entry_error
            result[TopicPartition(str(topic["name"]), int(entry["partition"]))] = OffsetAndMetadata(
                int(entry.get("offset", -1)), str(entry.get("metadata") or ""), int(entry.get("leader_epoch", -1)))
    return result


# --- membership -----------------------------------------------------------------------------------


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    REBALANCING = "rebalancing"
    STABLE = "stable"


@dataclass(frozen=True)
class JoinResult:
    generation: int
    member_id: str
    protocol_name: str
    assignment: Assignment
    topics: frozenset[str]


class _RetryJoin(Exception):
    """Internal: start the join over (after ``backoff`` seconds)."""

    def __init__(self, reason: str, backoff: bool = False) -> None:
        super().__init__(reason)
        self.backoff = backoff


class GroupMembership:
    """One consumer's group membership (see the module docstring). Event-loop only."""

    def __init__(self, core: ConsumerCore, *, group_id: str, assignors: list[Assignor],
                 session_timeout_ms: int, heartbeat_interval_ms: int, max_poll_interval_ms: int,
                 rebalance_timeout_ms: int, group_instance_id: str | None, enable_auto_commit: bool,
                 auto_commit_interval_ms: int, request_timeout_ms: int, retry_backoff_ms: int,
                 client_id: str) -> None:
        self.core = core
        self.group_id = group_id
        self.assignors = assignors
        self.protocol = rebalance_protocol(assignors)
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        self.max_poll_interval = max_poll_interval_ms / 1000
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.group_instance_id = group_instance_id
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval = auto_commit_interval_ms / 1000
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff = retry_backoff_ms / 1000
        self.client_id = client_id
        self.link = CoordinatorLink(core.metadata, core.transport, group_id, request_timeout_ms=request_timeout_ms,
                                    retry_backoff_ms=retry_backoff_ms)
        self.member_id = ""
        self.generation = -1
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.state = MemberState.UNJOINED
        self.rejoin_needed = False
        self.rejoin_reason = ""
        self.partitions_lost = False
        self.fatal_error: BaseException | None = None
        self.joined_topics: frozenset[str] = frozenset()
        self.leader_snapshot: dict[str, int] = {}
        self.last_assignment: list[tuple[str, int]] = []
        self.last_assignment_generation = -1
        self.rebalances = 0
        self._join_task: asyncio.Task[JoinResult] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._heartbeat_wake: asyncio.Event | None = None
        self._auto_commit_task: asyncio.Task[None] | None = None
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        self._last_poll = time.monotonic()
        self._polling = 0
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self._heartbeat_wake = asyncio.Event()
        self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop(),
                                                                      name=f"kafkalite-heartbeat-{self.group_id}")

    @property
    def managed(self) -> bool:
        """True while the consumer subscribes (the group assigns its partitions)."""
        return bool(self.core.subscribed_topics) or self.core.subscribed_pattern is not None

    @property
    def joining(self) -> bool:
        return self._join_task is not None and not self._join_task.done()

    def _notify(self) -> None:
        """Wake the consumer's poll loop (it re-runs :meth:`poll`)."""
        if self.core.fetcher is not None:
            self.core.fetcher.data_ready.set()

    def request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed:
            log.info("group %s: member %s will rejoin: %s", self.group_id, self.member_id or "(new)", reason)
        self.rejoin_needed = True
        self.rejoin_reason = reason
        self._notify()

    def _reset_generation(self, reason: str, keep_member_id: bool) -> None:
        """The member is out of its generation: what it owns is lost; it must rejoin."""
        if self.generation >= 0 or self.member_id:
            log.info("group %s: member %s leaves generation %d: %s", self.group_id, self.member_id,
                     self.generation, reason)
        self.generation = -1
        if not keep_member_id:
            self.member_id = ""
        self.state = MemberState.UNJOINED
        self.partitions_lost = True
        self.request_rejoin(reason)

    def has_news(self) -> bool:
        """Something for :meth:`poll` to act on at once (the poll loop must not sleep)."""
        if not self.managed:
            return False
        if self.fatal_error is not None or (self._join_task is not None and self._join_task.done()):
            return True
        return self.rejoin_needed and self._join_task is None

    def subscription_changed(self) -> None:
        if self.managed:
            self.request_rejoin("the subscription changed")

    def subscribed_topics(self) -> frozenset[str]:
        """The topics this member subscribes to now (pattern matches from the metadata view)."""
        core = self.core
        if core.subscribed_pattern is not None:
            return frozenset(topic for topic in core.metadata.view.partitions
                             if core.subscribed_pattern.match(topic)
                             and not (core.settings.exclude_internal_topics and topic.startswith("__")))
        return frozenset(core.subscribed_topics)

    def on_metadata(self) -> None:
        """A new metadata view: rejoin when the subscription's topics or, for the leader, the
        partition counts of the group's topics changed."""
        if not self.managed or self.generation < 0 or self.joining:
            return
        view = self.core.metadata.view
        if self.subscribed_topics() != self.joined_topics:
            self.request_rejoin("the subscribed topics changed")
            return
        if self.leader_id is not None and self.leader_id == self.member_id:
            for topic, count in self.leader_snapshot.items():
                known = len(view.partitions.get(topic) or ())
                if known != count:
                    self.request_rejoin(f"topic {topic} now has {known} partitions (the assignment used {count})")
                    return

    # -- the poll step -----------------------------------------------------------------------
    def poll_started(self) -> None:
        self._polling += 1
        self._last_poll = time.monotonic()

    def poll_finished(self) -> None:
        self._polling = max(0, self._polling - 1)
        self._last_poll = time.monotonic()

    async def poll(self, deadline: float) -> None:
        """One step of the consumer's poll loop (see the module docstring)."""
        self._last_poll = time.monotonic()
        if self.fatal_error is not None:
            error, self.fatal_error = self.fatal_error, None
            raise error
        if self.managed:
            await self._poll_membership(deadline)
        self._maybe_auto_commit()

    async def _poll_membership(self, deadline: float) -> None:
        if self.state is MemberState.UNJOINED and self._join_task is None:
            self.rejoin_needed = True
        task = self._join_task
        if task is not None and task.done():
            await self._finish_join(task)
        if self.rejoin_needed and self._join_task is None:
            await self._prepare_join()
            self.rejoin_needed = False
            self.state = MemberState.REBALANCING
            self._join_task = asyncio.get_running_loop().create_task(self._join(),
                                                                     name=f"kafkalite-join-{self.group_id}")
            self._join_task.add_done_callback(lambda _: self._notify())
        task = self._join_task
        if task is not None and not task.done() and (self.protocol == EAGER or not self.core.partitions):
            remaining = deadline - time.monotonic()
            if remaining > 0:
                await asyncio.wait({task}, timeout=remaining)
            if task.done():
                await self._finish_join(task)

    async def _finish_join(self, task: asyncio.Task[JoinResult]) -> None:
        self._join_task = None
        if task.cancelled():
            self.rejoin_needed = True
            return
        error = task.exception()
        if error is not None:
            self.rejoin_needed = True
            self.state = MemberState.UNJOINED
            raise error
        await self._apply(task.result())

    async def _prepare_join(self) -> None:
        """Kafka's join prepare: hand over what must go before the JoinGroup is sent."""
        core = self.core
        owned = set(core.partitions)
        if self.partitions_lost:
            self.partitions_lost = False
            if owned:
                await core.revoke_partitions(owned, lost=True)
            return
        if self.protocol == EAGER:
            if owned:
                if self.enable_auto_commit and self.generation >= 0:
                    await self._commit_quietly(core.positions(owned), "before revoking partitions")
                await core.revoke_partitions(owned, lost=False)
            return
        wanted = self.subscribed_topics()
        gone = {tp for tp in owned if tp.topic not in wanted}
        if gone:
            if self.enable_auto_commit and self.generation >= 0:
                await self._commit_quietly(core.positions(gone), "before revoking partitions")
            await core.revoke_partitions(gone, lost=False)

    async def _apply(self, result: JoinResult) -> None:
        core = self.core
        self.state = MemberState.STABLE
        self.rebalances += 1
        assigned = {TopicPartition(topic, partition) for topic, partition in result.assignment.partitions}
        owned = set(core.partitions)
        revoked = owned - assigned
        added = assigned - owned
        log.info("group %s: member %s in generation %d (%s): %d partitions assigned, %d added, %d revoked",
                 self.group_id, result.member_id, result.generation, result.protocol_name, len(assigned),
                 len(added), len(revoked))
        if revoked:
            if self.enable_auto_commit:
                await self._commit_quietly(core.positions(revoked), "before revoking partitions")
            await core.revoke_partitions(revoked, lost=False)
        self.last_assignment = sorted((tp.topic, tp.partition) for tp in assigned)
        self.last_assignment_generation = result.generation
        await core.assign_partitions(added)
        if revoked and self.protocol == COOPERATIVE:
            self.request_rejoin(f"{len(revoked)} partitions were revoked; a follow-up rebalance hands them over")
        elif self.subscribed_topics() != result.topics:
            self.request_rejoin("the subscribed topics changed during the rebalance")
        if self._heartbeat_wake is not None:
            self._heartbeat_wake.set()

    # -- join and sync ------------------------------------------------------------------------
    async def _join(self) -> JoinResult:
        while True:
            try:
                return await self._join_once()
            except _RetryJoin as retry:
                log.debug("group %s: join again: %s", self.group_id, retry)
                if retry.backoff:
                    await asyncio.sleep(self.retry_backoff)

    def _subscription_metadata(self, topics: frozenset[str]) -> list[dict[str, str]]:
        current = sorted((tp.topic, tp.partition) for tp in self.core.partitions)
        protocols = []
        for assignor in self.assignors:
            if self.protocol == COOPERATIVE:
                owned, generation = current, self.last_assignment_generation
            elif isinstance(assignor, StickyAssignor):
                owned, generation = self.last_assignment, self.last_assignment_generation
            else:
                owned, generation = [], -1
            subscription = Subscription(sorted(topics), owned if generation >= 0 else [], generation if owned else -1,
                                        self.group_instance_id)
            protocols.append({"name": assignor.name, "metadata": encode_json(subscription.to_json())})
        return protocols

    async def _ensure_metadata(self) -> None:
        core = self.core
        if core.metadata.view.updated_at and (core.subscribed_pattern is not None
                                               or core.subscribed_topics <= set(core.metadata.view.partitions)):
            return
        try:
            await core.metadata.refresh()
        except KafkaliteError as exc:
            log.debug("group %s: metadata before joining: %s", self.group_id, exc)

    async def _join_once(self) -> JoinResult:
        await self._ensure_metadata()
        topics = self.subscribed_topics()
        body = {
            "member_id": self.member_id, "group_instance_id": self.group_instance_id,
            "session_timeout_ms": self.session_timeout_ms, "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "protocol_type": PROTOCOL_TYPE, "client_id": self.client_id,
            "protocols": self._subscription_metadata(topics), "reason": self.rejoin_reason,
        }
        parked_ms = self.rebalance_timeout_ms + 5000 + self.request_timeout_ms
        answer = await self.link.call(protocol.JOIN_GROUP, body, deadline=None, timeout_ms=parked_ms)
        error = _error_of(answer)
        if isinstance(error, MemberIdRequiredError):
            self.member_id = str(answer.get("member_id") or "")
            raise _RetryJoin("the coordinator gave a member id")
        if error is not None:
            self._join_error(error, "JoinGroup")
        generation = int(answer["generation_id"])
        self.member_id = str(answer["member_id"])
        self.generation = generation
        self.protocol_name = str(answer.get("protocol_name") or "")
        self.leader_id = str(answer.get("leader") or "")
        assignments: list[dict[str, str]] = []
        if self.leader_id == self.member_id:
            assignments = await self._leader_assign(self.protocol_name, answer.get("members") or [])
        sync = await self.link.call(protocol.SYNC_GROUP, {
            "generation_id": generation, "member_id": self.member_id, "group_instance_id": self.group_instance_id,
            "protocol_type": PROTOCOL_TYPE, "protocol_name": self.protocol_name, "assignments": assignments,
        }, deadline=None, timeout_ms=parked_ms)
        error = _error_of(sync)
        if error is not None:
            self._join_error(error, "SyncGroup")
        assignment = decode_assignment(sync.get("assignment")) or Assignment([])
        return JoinResult(generation, self.member_id, self.protocol_name, assignment, topics)

    def _join_error(self, error: BrokerResponseError, what: str) -> None:
        if isinstance(error, RebalanceInProgressError):
            raise _RetryJoin(f"{what}: {error}")
        if isinstance(error, UnknownMemberIdError):
            self.member_id = ""
            self.generation = -1
            raise _RetryJoin(f"{what}: {error}")
        if isinstance(error, IllegalGenerationError):
            self.generation = -1
            raise _RetryJoin(f"{what}: {error}")
        if error.retriable:
            raise _RetryJoin(f"{what}: {error}", backoff=True)
        log.error("group %s: %s failed: %s", self.group_id, what, error)
        raise error

    async def _leader_assign(self, protocol_name: str, members: list[dict[str, Any]]) -> list[dict[str, str]]:
        assignor = next((item for item in self.assignors if item.name == protocol_name), None)
        if assignor is None:
            raise ConfigError(f"the group chose assignor {protocol_name!r}, which this consumer does not have")
        subscriptions: dict[str, Subscription] = {}
        for member in members:
            subscription = decode_subscription(member.get("metadata"))
            if subscription is None:
                log.warning("group %s: member %s sent unreadable subscription metadata", self.group_id,
                            member.get("member_id"))
                subscription = Subscription([])
            subscriptions[str(member["member_id"])] = subscription
        topics = sorted({topic for subscription in subscriptions.values() for topic in subscription.topics})
        metadata = self.core.metadata
        metadata.add_topics(topics)
        try:
            view = await metadata.refresh()
        except KafkaliteError as exc:
            raise _RetryJoin(f"metadata for the assignment: {exc}", backoff=True) from exc
        partitions_per_topic = {topic: len(view.partitions[topic]) for topic in topics if view.partitions.get(topic)}
        plan = assignor.assign(partitions_per_topic, subscriptions)
        self.leader_snapshot = {topic: partitions_per_topic.get(topic, 0) for topic in topics}
        log.info("group %s: leader %s assigned %d partitions of %d topics to %d members with %s", self.group_id,
                 self.member_id, sum(partitions_per_topic.values()), len(partitions_per_topic), len(subscriptions),
                 assignor.name)
        return [{"member_id": member_id, "assignment": encode_json(plan.get(member_id, Assignment([])).to_json())}
                for member_id in subscriptions]

    # -- heartbeats -----------------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        assert self._heartbeat_wake is not None
        wake = self._heartbeat_wake
        next_beat = time.monotonic()
        while not self._closed:
            now = time.monotonic()
            delay = max(0.0, next_beat - now)
            if self.generation >= 0 and not self._polling:
                delay = min(delay, max(0.0, self._last_poll + self.max_poll_interval - now))
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), timeout=max(delay, 0.001))
            except TimeoutError:
                pass
            if self._closed:
                return
            now = time.monotonic()
            if self.generation >= 0 and self.managed and not self._polling \
                    and now - self._last_poll > self.max_poll_interval:
                await self._leave_after_poll_timeout()
                continue
            if now < next_beat:
                continue
            if self.generation < 0 or not self.member_id or self.joining or not self.managed:
                next_beat = now + self.heartbeat_interval
                continue
            try:
                next_beat = now + await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except Exception:  # the heartbeat must go on whatever one answer was
                log.exception("group %s: heartbeat failed", self.group_id)
                next_beat = now + self.retry_backoff

    async def _heartbeat(self) -> float:
        """Send one heartbeat; the delay before the next."""
        generation, member_id = self.generation, self.member_id
        timeout_ms = min(self.request_timeout_ms, self.session_timeout_ms)
        try:
            answer = await self.link.call(protocol.HEARTBEAT, {
                "generation_id": generation, "member_id": member_id, "group_instance_id": self.group_instance_id,
            }, deadline=None, timeout_ms=timeout_ms, retry=False)
        except (KafkaConnectionError, KafkaTimeoutError, *_COORDINATOR_ERRORS, CoordinatorLoadInProgressError) as exc:
            log.debug("group %s: heartbeat: %s", self.group_id, exc)
            return self.retry_backoff
        if (generation, member_id) != (self.generation, self.member_id):
            return 0.0  # a join changed the generation meanwhile: this answer is about the old one
        error = _error_of(answer)
        if error is None:
            return self.heartbeat_interval
        if isinstance(error, RebalanceInProgressError):
            if not self.rejoin_needed and not self.joining:
                self.request_rejoin("the group is rebalancing")
            return self.heartbeat_interval
        if isinstance(error, IllegalGenerationError):
            self._reset_generation(f"heartbeat: {error}", keep_member_id=True)
        elif isinstance(error, UnknownMemberIdError):
            self._reset_generation(f"heartbeat: {error}", keep_member_id=False)
        elif isinstance(error, FencedInstanceIdError):
            self.generation = -1
            self.member_id = ""
            self.state = MemberState.UNJOINED
            self.fatal_error = error
            self._notify()
        else:
            log.warning("group %s: heartbeat answered %s", self.group_id, error)
        return self.retry_backoff

    async def _leave_after_poll_timeout(self) -> None:
        log.warning("group %s: member %s did not poll for %.1f s (max_poll_interval_ms=%d): leaving the group; "
                    "the next poll rejoins", self.group_id, self.member_id, time.monotonic() - self._last_poll,
                    int(self.max_poll_interval * 1000))
        await self.leave("consumer poll timeout has expired")
        self.partitions_lost = True
        self.request_rejoin("the poll timeout expired")

    async def leave(self, reason: str) -> None:
        """LeaveGroup for a dynamic member (a static one just stops heartbeating); forget the generation."""
        member_id = self.member_id
        if self._join_task is not None and not self._join_task.done():
            self._join_task.cancel()
            await asyncio.gather(self._join_task, return_exceptions=True)
        self._join_task = None
        if member_id and self.group_instance_id is None:
            try:
                answer = await self.link.call(protocol.LEAVE_GROUP, {
                    "members": [{"member_id": member_id, "reason": reason}]},
                    deadline=time.monotonic() + _LEAVE_TIMEOUT_MS / 1000, timeout_ms=_LEAVE_TIMEOUT_MS)
                log.info("group %s: member %s left (%s): %s", self.group_id, member_id, reason,
                         _error_of(answer) or "ok")
            except KafkaliteError as exc:
                log.info("group %s: LeaveGroup for %s failed: %s", self.group_id, member_id, exc)
        self.generation = -1
        if self.group_instance_id is None:
            self.member_id = ""
        self.state = MemberState.UNJOINED

    async def close(self, autocommit: bool) -> None:
        """Commit (auto-commit on), revoke, leave; stop the background tasks."""
        core = self.core
        try:
            owned = set(core.partitions)
            if autocommit and self.enable_auto_commit and owned and (self.generation >= 0 or not self.managed):
                await self._commit_quietly(core.positions(owned), "on close")
            if self.managed:
                if owned:
                    await core.revoke_partitions(owned, lost=self.partitions_lost or self.generation < 0)
                await self.leave("the consumer is closing")
        finally:
            self._closed = True
            for task in (self._heartbeat_task, self._auto_commit_task, self._join_task):
                if task is not None and not task.done():
                    task.cancel()
            await asyncio.gather(*(task for task in (self._heartbeat_task, self._auto_commit_task, self._join_task)
                                   if task is not None), return_exceptions=True)

    async def unsubscribe(self) -> None:
        """Revoke everything (committing first when auto-committing) and leave the group."""
        core = self.core
        owned = set(core.partitions)
        if owned:
            if self.enable_auto_commit and self.generation >= 0:
                await self._commit_quietly(core.positions(owned), "on unsubscribe")
            await core.revoke_partitions(owned, lost=self.partitions_lost)
        await self.leave("the consumer unsubscribed")
        self.partitions_lost = False
        self.rejoin_needed = False
        self.last_assignment = []
        self.last_assignment_generation = -1

    # -- offsets ----------------------------------------------------------------------------------
    def _maybe_auto_commit(self) -> None:
        if not self.enable_auto_commit:
            return
        now = time.monotonic()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self.auto_commit_interval
        if self._auto_commit_task is not None and not self._auto_commit_task.done():
            return
        if self.managed and (self.state is not MemberState.STABLE or self.generation < 0):
            return
        offsets = self.core.positions(set(self.core.partitions))
        if offsets:
            self._auto_commit_task = asyncio.get_running_loop().create_task(
                self._commit_quietly(offsets, "auto-commit"))

    async def _commit_quietly(self, offsets: dict[TopicPartition, OffsetAndMetadata], why: str) -> None:
        if not offsets:
            return
        try:
            await self.commit(offsets, self.request_timeout_ms)
            log.debug("group %s: committed %d offsets (%s)", self.group_id, len(offsets), why)
        except KafkaliteError as exc:
            log.warning("group %s: committing offsets %s failed: %s", self.group_id, why, exc)

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], timeout_ms: float) -> None:
        """OffsetCommit (see the module docstring for the errors)."""
        if not offsets:
            return
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self.managed:
                task = self._join_task
                if self.generation < 0 and task is not None and not task.done():
                    await asyncio.wait({task}, timeout=max(0.0, deadline - time.monotonic()))
                if self.generation < 0:
                    raise CommitFailedError(
                        "Commit cannot be completed since the consumer is not part of an active group generation "
                        "(it was removed, for instance because the time between calls to poll() was longer than "
                        "max_poll_interval_ms, or it has not joined yet); poll() rejoins the group")
                generation, member_id = self.generation, self.member_id
            else:
                generation, member_id = -1, ""
            answer = await self.link.call(protocol.OFFSET_COMMIT, {
                "generation_id": generation, "member_id": member_id, "group_instance_id": self.group_instance_id,
                "topics": offsets_body(offsets)}, deadline=deadline)
            error = _error_of(answer)
            if error is None:
                for topic in answer.get("topics", []):
                    for entry in topic.get("partitions", []):
                        error = _error_of(entry)
                        if error is not None:
                            break
                    if error is not None:
                        break
            if error is None:
                return
            if isinstance(error, (*_COORDINATOR_ERRORS, CoordinatorLoadInProgressError)):
                if not isinstance(error, CoordinatorLoadInProgressError):
                    self.link.forget()
                if time.monotonic() >= deadline:
                    raise error
                await asyncio.sleep(self.retry_backoff)
                continue
            if isinstance(error, RebalanceInProgressError) and self.managed:
                task = self._join_task
                if task is not None and not task.done() and time.monotonic() < deadline:
                    await asyncio.wait({task}, timeout=max(0.0, deadline - time.monotonic()))
                    if task.done() and not task.cancelled() and task.exception() is None \
                            and task.result().generation != generation:
                        continue
                raise CommitFailedError(
                    "Offset commit cannot be completed since the consumer is undergoing a rebalance; poll() "
                    f"completes the rebalance, then retry the commit ({error})")
            if isinstance(error, (IllegalGenerationError, UnknownMemberIdError)):
                if self.managed and (generation, member_id) == (self.generation, self.member_id):
                    self._reset_generation(f"commit: {error}", keep_member_id=isinstance(error, IllegalGenerationError))
                raise CommitFailedError(
                    "Commit cannot be completed since the group has already rebalanced and assigned the partitions "
                    f"to another member ({error})")
            if isinstance(error, FencedInstanceIdError):
                self.fatal_error = error
            raise error

    async def committed(self, partitions: Iterable[TopicPartition],
                        timeout_ms: float) -> dict[TopicPartition, OffsetAndMetadata]:
        return await fetch_offsets(self.link, list(partitions), time.monotonic() + timeout_ms / 1000)


__all__ = [
    "ConsumerRebalanceListener", "CoordinatorLink", "DEFAULT_ASSIGNORS", "GroupMembership", "JoinResult",
    "MemberState", "decode_assignment", "decode_subscription", "encode_json", "fetch_offsets", "offsets_body",
    "rebalance_protocol", "resolve_assignors",
]
