"""The heartbeat of one consumer-group member: :class:`GroupHeartbeat`, a background task that
keeps the member's session alive and watches the application's poll interval.

Every ``heartbeat_interval_ms`` the task sends a Heartbeat for the member's generation while it
is in one, is not joining and is subscribed, so a slow poll loop keeps its session. The answer
is handed to the membership's state transitions: REBALANCE_IN_PROGRESS asks for a rejoin at the
next poll (heartbeats go on until then); ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID reset the
generation (the partitions are lost); FENCED_INSTANCE_ID fences the member (raised from the
next poll). An answer about a generation that a join replaced meanwhile is ignored.

The task also owns the poll timer: the consumer core reports each poll (:meth:`poll_started`,
:meth:`poll_finished`, :meth:`polled`), and when a member in a generation has not polled for
``max_poll_interval_ms`` the task asks the membership to leave (Kafka's poll timeout).

The membership (:mod:`kafkalite.client.group`) owns the state; this module sees it through the
small :class:`HeartbeatMember` protocol and imports nothing of it.

Concurrency: event-loop only, on the membership's loop (the consumer core's: a KafkaConsumer's
private loop thread, the caller's loop for AIOKafkaConsumer). The task, its wake-up event and
the poll timer belong to that loop; the membership state it reads and changes belongs to the
same loop, so nothing is locked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from kafkalite import protocol
from kafkalite.client.coordinator_link import COORDINATOR_ERRORS, CoordinatorLink, error_of
from kafkalite.errors import (
    CoordinatorLoadInProgressError,
    FencedInstanceIdError,
    IllegalGenerationError,
    KafkaConnectionError,
    KafkaTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

log = logging.getLogger(__name__)


class HeartbeatMember(Protocol):
    """What the heartbeat reads of the member and the state transitions it asks for
    (:class:`~kafkalite.client.group.GroupMembership` implements it)."""

    @property
    def group_id(self) -> str: ...

    @property
    def generation(self) -> int: ...

    @property
    def member_id(self) -> str: ...

    @property
    def group_instance_id(self) -> str | None: ...

    @property
    def rejoin_needed(self) -> bool: ...

    @property
    def managed(self) -> bool: ...

    @property
    def joining(self) -> bool: ...

    @property
    def link(self) -> CoordinatorLink: ...

    def request_rejoin(self, reason: str) -> None: ...

    def reset_generation(self, reason: str, keep_member_id: bool) -> None: ...

    def fence(self, error: BaseException) -> None: ...

    async def leave_after_poll_timeout(self, silent_for: float) -> None: ...


class GroupHeartbeat:
    """The heartbeat task and poll timer of one member (see the module docstring). Event-loop only."""

    def __init__(self, member: HeartbeatMember, *, session_timeout_ms: int, heartbeat_interval: float,
                 max_poll_interval: float, request_timeout_ms: int, retry_backoff: float) -> None:
        self.member = member
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval = heartbeat_interval
        self.max_poll_interval = max_poll_interval
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff = retry_backoff
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        self.last_poll = time.monotonic()
        self.polling = 0
        self._wake: asyncio.Event | None = None

    def start(self) -> None:
        self._wake = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run(),
                                                           name=f"kafkalite-heartbeat-{self.member.group_id}")

    def wake(self) -> None:
        """Run the loop now (a new generation: its first heartbeat goes out at once)."""
        if self._wake is not None:
            self._wake.set()

    # -- the poll timer -------------------------------------------------------------------------
    def poll_started(self) -> None:
        self.polling += 1
        self.last_poll = time.monotonic()

    def poll_finished(self) -> None:
        self.polling = max(0, self.polling - 1)
        self.last_poll = time.monotonic()

    def polled(self) -> None:
        self.last_poll = time.monotonic()

    # -- the task -------------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self._wake is not None
        wake = self._wake
        member = self.member
        next_beat = time.monotonic()
        while not self.closed:
            now = time.monotonic()
            delay = max(0.0, next_beat - now)
            if member.generation >= 0 and not self.polling:
                delay = min(delay, max(0.0, self.last_poll + self.max_poll_interval - now))
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), timeout=max(delay, 0.001))
            except TimeoutError:
                pass
            if self.closed:
                return
            now = time.monotonic()
            if member.generation >= 0 and member.managed and not self.polling \
                    and now - self.last_poll > self.max_poll_interval:
                await member.leave_after_poll_timeout(time.monotonic() - self.last_poll)
                continue
            if now < next_beat:
                continue
            if member.generation < 0 or not member.member_id or member.joining or not member.managed:
                next_beat = now + self.heartbeat_interval
                continue
            try:
                next_beat = now + await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except Exception:  # the heartbeat must go on whatever one answer was
                log.exception("group %s: heartbeat failed", member.group_id)
                next_beat = now + self.retry_backoff

    async def _heartbeat(self) -> float:
        """Send one heartbeat; the delay before the next."""
        member = self.member
        generation, member_id = member.generation, member.member_id
        timeout_ms = min(self.request_timeout_ms, self.session_timeout_ms)
        try:
            answer = await member.link.call(protocol.HEARTBEAT, {
                "generation_id": generation, "member_id": member_id, "group_instance_id": member.group_instance_id,
            }, deadline=None, timeout_ms=timeout_ms, retry=False)
        except (KafkaConnectionError, KafkaTimeoutError, *COORDINATOR_ERRORS, CoordinatorLoadInProgressError) as exc:
            log.debug("group %s: heartbeat: %s", member.group_id, exc)
            return self.retry_backoff
        if (generation, member_id) != (member.generation, member.member_id):
            return 0.0  # a join changed the generation meanwhile: this answer is about the old one
        error = error_of(answer)
        if error is None:
            return self.heartbeat_interval
        if isinstance(error, RebalanceInProgressError):
            if not member.rejoin_needed and not member.joining:
                member.request_rejoin("the group is rebalancing")
            return self.heartbeat_interval
        if isinstance(error, IllegalGenerationError):
            member.reset_generation(f"heartbeat: {error}", keep_member_id=True)
        elif isinstance(error, UnknownMemberIdError):
            member.reset_generation(f"heartbeat: {error}", keep_member_id=False)
        elif isinstance(error, FencedInstanceIdError):
            member.fence(error)
        else:
            log.warning("group %s: heartbeat answered %s", member.group_id, error)
        return self.retry_backoff
