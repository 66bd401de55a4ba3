"""Consumer-group membership on the client side: :class:`GroupMembership` joins and syncs with
the configured assignors, heartbeats in the background, calls the rebalance listener through
the consumer core and commits offsets.

Around it: :mod:`.group_assignment` (the listener base class, assignor resolution, the JSON
metadata members exchange) and :mod:`.coordinator_link` (finding and calling the group's
coordinator, OffsetFetch). The membership sees its consumer through the small
:class:`GroupConsumer` protocol (partitions, subscription, metadata, the revoke/assign hooks);
the consumer core (:mod:`.consumer_core`) imports this module, never the other way round.
The heartbeat task (:mod:`.group_heartbeat`) sees the membership the same way, through
:class:`~kafkalite.client.group_heartbeat.HeartbeatMember`.

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

``owned_partitions`` in the subscription metadata carries what the assignor needs: the current
partitions under the COOPERATIVE protocol; the last assignment for the eager ``sticky`` assignor
(the member has revoked everything before joining); nothing for the others, so a restarted
static member sends the same metadata as before and the coordinator hands back its assignment
without a rebalance.

The heartbeat task (:mod:`.group_heartbeat`, which the membership starts and stops) runs on the
consumer's event loop (the sync consumer's loop thread), every ``heartbeat_interval_ms``, so a
slow poll loop keeps its session. REBALANCE_IN_PROGRESS asks for a rejoin at the next poll
(heartbeats go on until then); ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID mean the partitions are
lost; FENCED_INSTANCE_ID is raised from the next poll. When the application has not polled for
``max_poll_interval_ms`` (which is also the rebalance timeout sent to the coordinator) the
member leaves the group — a LeaveGroup for a dynamic member, silence for a static one — and
rejoins as a new member at its next poll, as Kafka's client does.

Commits carry the member id and generation when subscribed (generation -1 and no member id for
manually assigned partitions). ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID raise CommitFailedError
and make the member rejoin, unless a rebalance began while the commit was on its way (the join
under way settles the generation then, and what the member owns is not lost);
REBALANCE_IN_PROGRESS waits for the running join and retries with the new generation;
coordinator errors are retried until the timeout.

Concurrency: event-loop only, one loop: the consumer core's (the sync consumer's private loop
thread, the caller's loop for the asyncio consumer). The membership's state, its join task,
its heartbeat task and its auto-commit task all live on that loop, so they share the state
without locks; the consumer core's partitions and subscription, which the membership reads and
changes through :class:`GroupConsumer`, belong to the same loop. User callbacks (listener) go
through the core's callback runner, which the sync consumer uses to run them on the thread
blocked in ``poll()``/``close()``, so a listener may call the consumer (``commit()``, ``seek()``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kafkalite import protocol
from kafkalite.client.assignors import COOPERATIVE, EAGER, Assignment, Assignor, StickyAssignor, Subscription
from kafkalite.client.coordinator_link import (
    COORDINATOR_ERRORS,
    CoordinatorLink,
    error_of,
    fetch_offsets,
    offsets_body,
)
from kafkalite.client.fetcher import Fetcher
from kafkalite.client.group_assignment import (
    PROTOCOL_TYPE,
    ConsumerRebalanceListener,
    decode_assignment,
    decode_json,
    decode_subscription,
    encode_assignment,
    encode_json,
    encode_subscription,
    rebalance_protocol,
    resolve_assignors,
)
from kafkalite.client.group_heartbeat import GroupHeartbeat
from kafkalite.client.metadata import MetadataManager
from kafkalite.client.types import OffsetAndMetadata, TopicPartition
from kafkalite.errors import (
    BrokerResponseError,
    CommitFailedError,
    ConfigError,
    CoordinatorLoadInProgressError,
    FencedInstanceIdError,
    IllegalGenerationError,
    KafkaliteError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from kafkalite.transport import AsyncTransport

log = logging.getLogger(__name__)

_LEAVE_TIMEOUT_MS = 5000


# --- what the membership needs of its consumer ----------------------------------------------------


class GroupConsumerSettings(Protocol):
    """The consumer options the membership reads itself."""

    @property
    def exclude_internal_topics(self) -> bool: ...

    @property
    def isolation_level(self) -> int: ...


class GroupConsumer(Protocol):
    """The consumer core as its group membership sees it (:class:`~kafkalite.client.consumer_core.ConsumerCore`
    implements it): the assigned partitions and the subscription it reads, the metadata manager
    and transport it talks through, and the two hooks through which partitions are revoked and
    assigned (listener calls included). Same loop as the membership."""

    @property
    def metadata(self) -> MetadataManager: ...

    @property
    def transport(self) -> AsyncTransport: ...

    @property
    def settings(self) -> GroupConsumerSettings: ...

    @property
    def partitions(self) -> Mapping[TopicPartition, Any]: ...

    @property
    def subscribed_topics(self) -> set[str]: ...

    @property
    def subscribed_pattern(self) -> re.Pattern[str] | None: ...

    @property
    def fetcher(self) -> Fetcher | None: ...

    async def revoke_partitions(self, partitions: set[TopicPartition], lost: bool) -> None: ...

    async def assign_partitions(self, partitions: set[TopicPartition]) -> None: ...

    def positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]: ...


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

    def __init__(self, core: GroupConsumer, *, group_id: str, assignors: list[Assignor],
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
        self._auto_commit_task: asyncio.Task[None] | None = None
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        self.heartbeat = GroupHeartbeat(self, session_timeout_ms=session_timeout_ms,
                                        heartbeat_interval=self.heartbeat_interval,
                                        max_poll_interval=self.max_poll_interval,
                                        request_timeout_ms=request_timeout_ms, retry_backoff=self.retry_backoff)

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self.heartbeat.start()

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

    def reset_generation(self, reason: str, keep_member_id: bool) -> None:
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
        self.heartbeat.poll_started()

    def poll_finished(self) -> None:
        self.heartbeat.poll_finished()

    async def poll(self, deadline: float) -> None:
        """One step of the consumer's poll loop (see the module docstring)."""
        self.heartbeat.polled()
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
        self.heartbeat.wake()

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
            protocols.append({"name": assignor.name, "metadata": encode_subscription(subscription)})
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
        error = error_of(answer)
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
        error = error_of(sync)
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
            instance_id = member.get("group_instance_id")
            if subscription.group_instance_id is None and isinstance(instance_id, str) and instance_id:
                subscription = dataclasses.replace(subscription, group_instance_id=instance_id)
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
        return [{"member_id": member_id, "assignment": encode_assignment(plan.get(member_id, Assignment([])))}
                for member_id in subscriptions]

    # -- what the heartbeat reports -------------------------------------------------------------
    def fence(self, error: BaseException) -> None:
        """FENCED_INSTANCE_ID: another instance took this static member's place; the next poll raises."""
        self.generation = -1
        self.member_id = ""
        self.state = MemberState.UNJOINED
        self.fatal_error = error
        self._notify()

    async def leave_after_poll_timeout(self, silent_for: float) -> None:
        """The application has not polled for ``max_poll_interval_ms``: leave; the next poll rejoins."""
        log.warning("group %s: member %s did not poll for %.1f s (max_poll_interval_ms=%d): leaving the group; "
                    "the next poll rejoins", self.group_id, self.member_id, silent_for,
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
                         error_of(answer) or "ok")
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
            self.heartbeat.closed = True
            for task in (self.heartbeat.task, self._auto_commit_task, self._join_task):
                if task is not None and not task.done():
                    task.cancel()
            await asyncio.gather(*(task for task in (self.heartbeat.task, self._auto_commit_task, self._join_task)
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
            error = error_of(answer)
            if error is None:
                for topic in answer.get("topics", []):
                    for entry in topic.get("partitions", []):
                        error = error_of(entry)
                        if error is not None:
                            break
                    if error is not None:
                        break
            if error is None:
                return
            if isinstance(error, (*COORDINATOR_ERRORS, CoordinatorLoadInProgressError)):
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
                if self.managed and self._join_task is not None:
                    # A rebalance began while the commit was on its way: the join under way (or
                    # done, its answer not yet applied) settles the generation, as in Kafka's
                    # client, whose generationIfStable() is empty then.
                    raise CommitFailedError(
                        "Offset commit cannot be completed since the consumer is undergoing a rebalance; poll() "
                        f"completes the rebalance, then retry the commit ({error})")
                if self.managed and (generation, member_id) == (self.generation, self.member_id):
                    self.reset_generation(f"commit: {error}", keep_member_id=isinstance(error, IllegalGenerationError))
                raise CommitFailedError(
                    "Commit cannot be completed since the group has already rebalanced and assigned the partitions "
                    f"to another member ({error})")
            if isinstance(error, FencedInstanceIdError):
                self.fatal_error = error
            raise error

    async def committed(self, partitions: Iterable[TopicPartition],
                        timeout_ms: float) -> dict[TopicPartition, OffsetAndMetadata]:
        return await fetch_offsets(self.link, list(partitions), time.monotonic() + timeout_ms / 1000,
                                   require_stable=self.core.settings.isolation_level == protocol.READ_COMMITTED)


# ConsumerRebalanceListener, resolve_assignors and the metadata codecs live in group_assignment; they
# stay importable from here, where the consumer-group API was first documented.
__all__ = [
    "ConsumerRebalanceListener", "GroupConsumer", "GroupConsumerSettings", "GroupMembership", "JoinResult",
    "MemberState", "decode_assignment", "decode_json", "decode_subscription", "encode_assignment", "encode_json",
    "encode_subscription", "rebalance_protocol",
    "resolve_assignors",
]
