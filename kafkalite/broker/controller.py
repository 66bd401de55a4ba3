"""The controller: one elected broker that owns leader election and topic lifecycle.

Election is Kafka's: one ZooKeeper transaction checks the version of ``/controller_epoch``,
creates the ephemeral ``/controller`` and bumps the epoch. Every later write of the controller
is a transaction that first checks ``/controller_epoch`` still has the version this controller
wrote, so a deposed ("zombie") controller can change nothing.

While active it reconciles the cluster whenever something changes (brokers join, leave or
bounce; topics or partitions appear; deletions or preferred elections are requested):

* new partitions get a state znode: first live replica in assignment order leads, every live
  replica is in the ISR, leader epoch 0;
* partitions whose leader died elect the first live ISR member in assignment order (epoch + 1);
  with none alive they stay offline with the last ISR recorded, unless
  ``unclean.leader.election.enable`` lets any live replica lead;
* dead followers are removed from the ISR (epoch + 1, as Kafka does);
* "live" is what ZooKeeper says, not what the watches have delivered so far: a newly elected
  controller re-reads ``/brokers/ids`` (and every registration's epoch) before its first
  decision, and any pass that would elect away from a leader or take a replica out of an ISR
  because it looks dead re-reads them first, so a cache that lags behind (after a long
  ZooKeeper outage every broker re-registers at once) never costs a live, in-sync replica its
  ISR place or a partition its leader;
* a bounced broker (same id, new registration) is handled as a failure followed by a restart;
* topics marked in ``/admin/delete_topics`` are removed from ZooKeeper in one fenced
  transaction; every broker then deletes its logs when its watch sees the topic go;
* preferred-replica elections (requested in ``/admin/preferred_replica_election`` or by the
  periodic auto-rebalance) move leadership back to the first replica when it is in the ISR;
* controlled shutdown requests move leadership off the stopping broker before it goes; the pass they
  wake drops it from the ISRs it follows in (a broker shutting down is a dead follower);

Brokers learn every decision through their own watches on the state znodes (see
:mod:`kafkalite.broker.metadata`), and sooner from the controller itself: every batch of states
it wrote goes to :attr:`Controller.publish_states`, which the broker sends to the other brokers
(:mod:`kafkalite.broker.state_push`, Kafka's LeaderAndIsr); a lost send costs only time.

Time: every delay of the controller (coalescing bursts of notifications, the retry after a
lost race, the auto-rebalance interval) goes through the injected ``sleep`` coroutine
function (``asyncio.sleep`` by default), so tests on the in-memory coordinator can run it on a
fake clock; ``clock`` is the broker's wall clock in milliseconds.

Concurrency: event-loop only; reconciliation passes run one at a time in one task.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from kafkalite import assignment
from kafkalite.broker.metadata import LiveBroker, MetadataCache, PartitionInfo, PublishedState, publish_nowhere
from kafkalite.broker.stats import BrokerEvents
from kafkalite.config import BrokerConfig
from kafkalite.coord import znodes
from kafkalite.coord.coordinator import Coordinator, CoordinatorTransaction, TransactionResult, ZNodeStat
from kafkalite.coord.watch import Watch
from kafkalite.errors import (
    KafkaliteError,
    NotControllerError,
    StaleBrokerEpochError,
    ZNodeExistsError,
    ZNodeMissingError,
    ZNodeVersionConflictError,
)

log = logging.getLogger(__name__)

#: Seconds a reconciliation pass waits after a wake-up, so a burst of notifications makes one pass.
COALESCE_DELAY = 0.01
#: Seconds before a pass is retried after it failed or a fenced write lost a race.
RETRY_DELAY = 0.05
#: Partition states written by one ZooKeeper multi-op when many change at once (controlled
#: shutdown, new topics), and how many such requests are in flight at once.
#: ZooKeeper applies a multi-op of 500 about three times as fast per state as five of 100 while
#: the brokers' watches read the states back (some 75 kB a request, far below jute.maxbuffer).
STATES_PER_REQUEST = 500
REQUESTS_IN_FLIGHT = 4
#: One state write: the partition, its new leader, leader epoch and ISR.
StateWrite = tuple[PartitionInfo, int, int, list[int]]


class Controller:
    """Controller election and duties for one broker. See the module docstring."""

    def __init__(self, config: BrokerConfig, zookeeper: Coordinator, metadata: MetadataCache,
                 topic_configs: Callable[[str], dict[str, str]], clock: Callable[[], int], *,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, events: BrokerEvents | None = None) -> None:
        self.config = config
        #: the leader elections this broker made as controller
        self.events = events if events is not None else BrokerEvents()
        self.broker_id = config.broker_id
        self.zookeeper = zookeeper
        self.metadata = metadata
        self.topic_configs = topic_configs
        self.clock = clock
        self.sleep = sleep
        self.active = False
        self.epoch = -1
        self.epoch_version = -1
        self.elections = 0
        self.passes = 0  # reconciliation passes completed (for operators and tests)
        self.partitions_examined = 0  # partitions those passes looked at (likewise)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._retry_task: asyncio.Task[None] | None = None
        self._watches: list[Watch] = []
        self._broker_epochs: dict[int, int] = {}
        self._bounced: set[int] = set()
        self._brokers_confirmed = False  # /brokers/ids read from ZooKeeper since the election
        self._shutting_down: set[int] = set()
        # What the next pass looks at: every partition (after an election, a broker change, a
        # failed pass), or only those whose metadata changed since the last pass.
        self._full_pass = True
        self._changed: dict[tuple[str, int], PartitionInfo] = {}
        self._isr_notifications_deleting: set[str] = set()  # ISR change notifications being deleted
        # Topics whose ``.../partitions`` znode this controller created or found: a new partition's
        # znode and state are then written in one request.
        self._topics_with_partitions_path: set[str] = set()
        self._deletions: list[str] = []
        self._preferred_requests: list[tuple[str, int]] = []
        self._reassignments: dict[tuple[str, int], list[int]] = {}
        self._stopped = False
        self.enabled = False  # set once this broker is registered: no controller before that
        #: Called on the loop with every batch of states this controller wrote (the broker sends
        #: them to the other brokers, as Kafka's controller sends LeaderAndIsr).
        self.publish_states: Callable[[list[PublishedState]], None] = publish_nowhere
        self._election_lock = asyncio.Lock()
        #: Held by a reconciliation pass and by a controlled shutdown's leader moves: both decide
        #: from the cache and write, and one must see what the other wrote (else they race for the
        #: same partitions and one of them loses every conditional write).
        self._decision_lock = asyncio.Lock()
        #: elections started by a /controller watch, so that stop() can end them
        self._elections: set[asyncio.Task[bool]] = set()
        metadata.add_listener(self)

    # -- metadata listener --------------------------------------------------------------------
    def on_partition_changed(self, info: PartitionInfo) -> None:
        if self.active:
            self._changed[(info.topic, info.partition)] = info
            self._wake.set()

    def on_topic_removed(self, topic: str, partitions: list[int]) -> None:
        if self.active:
            self._wake.set()

    def on_brokers_changed(self, live: dict[int, LiveBroker]) -> None:
        if not self.active:
            return
        for broker_id, broker in live.items():
            known = self._broker_epochs.get(broker_id)
            if known is not None and known != broker.epoch:
                log.info("controller: broker %d bounced (epoch %d -> %d)", broker_id, known, broker.epoch)
                self._bounced.add(broker_id)
                self._shutting_down.discard(broker_id)  # its new registration is not shutting down
        self._broker_epochs = {broker_id: broker.epoch for broker_id, broker in live.items()}
        self._shutting_down &= set(live)
        self._full_pass = True
        self._wake.set()

    def on_controller_changed(self, controller_id: int) -> None:
        if self._stopped or not self.enabled:
            return
        if controller_id == -1:
            election = asyncio.get_running_loop().create_task(self.try_elect(), name="controller-election")
            self._elections.add(election)
            election.add_done_callback(self._elections.discard)
        elif controller_id != self.broker_id and self.active:
            log.warning("controller: broker %d is controller now; resigning", controller_id)
            self._resign()

    def on_topic_config_changed(self, topic: str, configs: dict[str, str]) -> None:
        """A topic's configs changed (``unclean.leader.election.enable`` among them): its
        partitions are looked at again."""
        topic_info = self.metadata.topics.get(topic)
        if self.active and topic_info is not None:
            for info in topic_info.partitions.values():
                self._changed[(topic, info.partition)] = info
            self._wake.set()

    # -- election -----------------------------------------------------------------------------
    async def try_elect(self) -> bool:
        async with self._election_lock:
            if self._stopped or self.active or not self.enabled:
                return self.active
            try:
                data, stat = await self.zookeeper.get(znodes.CONTROLLER_EPOCH_PATH)
                current = znodes.ControllerEpoch.from_bytes(data, znodes.CONTROLLER_EPOCH_PATH).epoch
            except ZNodeMissingError:
                try:
                    await self.zookeeper.create(znodes.CONTROLLER_EPOCH_PATH,
                                                znodes.ControllerEpoch(0).to_bytes())
                except ZNodeExistsError:
                    pass
                data, stat = await self.zookeeper.get(znodes.CONTROLLER_EPOCH_PATH)
                current = znodes.ControllerEpoch.from_bytes(data, znodes.CONTROLLER_EPOCH_PATH).epoch
            new_epoch = current + 1
            transaction = self.zookeeper.transaction()
            transaction.check(znodes.CONTROLLER_EPOCH_PATH, stat.version)
            transaction.create(znodes.CONTROLLER_PATH, znodes.ControllerInfo(self.broker_id).to_bytes(),
                               ephemeral=True)
            transaction.set_data(znodes.CONTROLLER_EPOCH_PATH, znodes.ControllerEpoch(new_epoch).to_bytes(),
                                 stat.version)
            try:
                await transaction.commit()
            except (ZNodeExistsError, ZNodeVersionConflictError, ZNodeMissingError):
                return False
            except KafkaliteError as exc:
                log.warning("controller election failed: %s", exc)
                return False
            self.epoch = new_epoch
            self.epoch_version = stat.version + 1
            if self._stopped:
                # Won while the broker stops: take no office. /controller is ephemeral and goes
                # with the session, which stop closes next; the other brokers then elect.
                log.info("broker %d won the controller election (epoch %d) while stopping; not taking office",
                         self.broker_id, new_epoch)
                return False
            self.active = True
            self.elections += 1
            log.info("broker %d is the controller (epoch %d)", self.broker_id, new_epoch)
            await self._on_elected()
            return True

    async def _on_elected(self) -> None:
        # Registrations seen before this election are not bounces: the epochs start from the
        # fresh read of /brokers/ids that opens the first pass (see _confirm_live_brokers).
        self._broker_epochs = {}
        self._brokers_confirmed = False
        self._bounced.clear()
        self._shutting_down.clear()
        self._full_pass = True
        self._changed.clear()
        self._watches.append(await self.zookeeper.watch_children(znodes.DELETE_TOPICS_PATH, self._on_deletions))
        self._watches.append(await self.zookeeper.watch_data(znodes.PREFERRED_REPLICA_ELECTION_PATH,
                                                             self._on_preferred_request))
        self._watches.append(await self.zookeeper.watch_children(znodes.ISR_CHANGE_NOTIFICATION_PATH,
                                                                 self._on_isr_notifications))
        self._watches.append(await self.zookeeper.watch_data(znodes.REASSIGN_PARTITIONS_PATH,
                                                             self._on_reassignment_request))
        self._task = asyncio.get_running_loop().create_task(self._reconcile_loop(), name="controller")
        if self.config.auto_leader_rebalance_enable:
            self._rebalance_task = asyncio.get_running_loop().create_task(self._auto_rebalance_loop(),
                                                                          name="leader-rebalance")
        self._wake.set()

    def _resign(self) -> None:
        self.active = False
        for watch in self._watches:
            watch.cancel()
        self._watches.clear()
        for task in (self._task, self._rebalance_task, self._retry_task):
            if task is not None:
                task.cancel()
        self._task = self._rebalance_task = self._retry_task = None

    async def stop(self) -> None:
        self._stopped = True
        elections = list(self._elections)
        for election in elections:
            election.cancel()  # a request it waits on may never be answered while ZooKeeper is away
        tasks = [task for task in (self._task, self._rebalance_task, self._retry_task) if task is not None]
        self._resign()
        await asyncio.gather(*tasks, *elections, return_exceptions=True)
        # /controller is ephemeral: closing the session removes it at once, without a request
        # that could hang while ZooKeeper is unreachable.

    # -- fenced writes ------------------------------------------------------------------------
    def _fenced(self) -> CoordinatorTransaction:
        transaction = self.zookeeper.transaction()
        transaction.check(znodes.CONTROLLER_EPOCH_PATH, self.epoch_version)
        return transaction

    async def _still_controller(self) -> bool:
        try:
            _, stat = await self.zookeeper.get(znodes.CONTROLLER_EPOCH_PATH)
        except KafkaliteError:
            return False
        if stat.version != self.epoch_version:
            log.warning("controller epoch moved on (version %d != %d): resigning", stat.version, self.epoch_version)
            self._resign()
            return False
        return True

    async def _create_partition_parents(self, topic: str, number: int) -> bool:
        """Create ``.../partitions`` and ``.../partitions/<n>`` under the topic's znode, never the
        topic's znode itself: a topic deleted while its new partition waited for a leader must
        stay deleted (an empty ``/brokers/topics/<t>`` left behind would block its name for good).
        False when the topic is gone."""
        for path in (znodes.topic_partitions_path(topic), znodes.partition_path(topic, number)):
            try:
                await self.zookeeper.create(path, b"")
            except ZNodeExistsError:
                continue
            except ZNodeMissingError:
                log.info("controller: %s was deleted; partition %d gets no leader", topic, number)
                return False
        return True

    async def _write_state(self, info: PartitionInfo, leader: int, leader_epoch: int, isr: list[int]) -> bool:
        state = znodes.PartitionState(leader=leader, leader_epoch=leader_epoch, isr=isr, controller_epoch=self.epoch)
        path = znodes.partition_state_path(info.topic, info.partition)
        transaction = self._fenced()
        if info.state is None:
            if not await self._create_partition_parents(info.topic, info.partition):
                return False
            self._topics_with_partitions_path.add(info.topic)
            transaction.create(path, state.to_bytes())
        else:
            transaction.set_data(path, state.to_bytes(), info.state_version)
        try:
            results = await transaction.commit()
        except (ZNodeVersionConflictError, ZNodeExistsError, ZNodeMissingError) as exc:
            log.info("controller: state write for %s-%d at version %d lost a race (%s); retrying",
                     info.topic, info.partition, info.state_version, exc)
            if await self._still_controller():
                await self.metadata.reload_partition_state(info.topic, info.partition)
                self._retry_soon()
            return False
        written = self._adopt_written(info, state, results)
        self.publish_states([written])
        return True

    @staticmethod
    def _adopt_written(info: PartitionInfo, state: znodes.PartitionState,
                       results: list[TransactionResult]) -> PublishedState:
        written = results[-1]
        new_version = written.version if isinstance(written, ZNodeStat) else 0
        info.adopt_state(state, new_version)  # the watch may have delivered a later version already
        return info.topic, info.partition, state, new_version

    async def _write_states(self, writes: list[StateWrite]) -> list[bool]:
        """Write many partitions' states (``(partition, leader, leader epoch, ISR)``), each
        conditional as in :meth:`_write_state`: up to :data:`STATES_PER_REQUEST` in one fenced
        ZooKeeper multi-op, :data:`REQUESTS_IN_FLIGHT` of those at once. A multi-op that fails
        as a whole (a lost race on one of its partitions) is done again one partition at a time.
        Returns whether each was written."""
        chunks = [writes[start:start + STATES_PER_REQUEST] for start in range(0, len(writes), STATES_PER_REQUEST)]
        if len(chunks) <= 1:
            return await self._write_chunk(chunks[0]) if chunks else []
        in_flight = asyncio.Semaphore(REQUESTS_IN_FLIGHT)
        began = time.monotonic()

        async def write(chunk: list[StateWrite]) -> list[bool]:
            async with in_flight:  # a new request goes out as soon as any of those in flight is answered
                return await self._write_chunk(chunk)

        done = [done for outcome in await asyncio.gather(*(write(chunk) for chunk in chunks)) for done in outcome]
        log.info("controller: %d of %d partition states written in %.1f s (%d requests)", sum(done), len(writes),
                 time.monotonic() - began, len(chunks))
        return done

    async def _write_chunk(self, chunk: list[StateWrite]) -> list[bool]:
        if any(info.state is None and info.topic not in self._topics_with_partitions_path
               for info, _, _, _ in chunk):
            return list(await asyncio.gather(*(self._write_state(*write) for write in chunk)))
        transaction = self._fenced()
        steps: list[tuple[PartitionInfo, znodes.PartitionState, int]] = []  # (partition, state, results taken)
        for info, leader, leader_epoch, isr in chunk:
            state = znodes.PartitionState(leader=leader, leader_epoch=leader_epoch, isr=isr,
                                          controller_epoch=self.epoch)
            path = znodes.partition_state_path(info.topic, info.partition)
            if info.state is None:
                transaction.create(znodes.partition_path(info.topic, info.partition), b"")
                transaction.create(path, state.to_bytes())
                steps.append((info, state, 2))
            else:
                transaction.set_data(path, state.to_bytes(), info.state_version)
                steps.append((info, state, 1))
        try:
            results = await transaction.commit()
        except (ZNodeVersionConflictError, ZNodeExistsError, ZNodeMissingError):
            return list(await asyncio.gather(*(self._write_state(*write) for write in chunk)))
        position = 1  # after the epoch check
        published: list[PublishedState] = []
        for info, state, taken in steps:
            position += taken
            published.append(self._adopt_written(info, state, results[:position]))
        self.publish_states(published)
        return [True] * len(chunk)

    def _retry_soon(self) -> None:
        """Wake the reconciliation loop after RETRY_DELAY (one pending retry at a time) for a
        pass over every partition."""
        self._full_pass = True
        if self._retry_task is None or self._retry_task.done():
            self._retry_task = asyncio.get_running_loop().create_task(self._wake_after(RETRY_DELAY))

    async def _wake_after(self, delay: float) -> None:
        await self.sleep(delay)
        self._wake.set()

    # -- reconciliation -----------------------------------------------------------------------
    async def _reconcile_loop(self) -> None:
        while self.active:
            await self._wake.wait()
            self._wake.clear()
            await self.sleep(COALESCE_DELAY)  # coalesce bursts of notifications
            try:
                async with self._decision_lock:
                    await self._reconcile()
                self.passes += 1
            except asyncio.CancelledError:
                raise
            except KafkaliteError as exc:
                log.warning("controller pass failed (will retry): %s", exc)
                self._retry_soon()
            except Exception:
                log.exception("controller pass failed")
                self._retry_soon()

    async def _reconcile(self) -> None:
        if self._deletions:
            deletions, self._deletions = self._deletions, []
            for topic in deletions:
                await self._delete_topic(topic)
        if not self._brokers_confirmed:
            await self._confirm_live_brokers()
        full, self._full_pass = self._full_pass, False
        changed, self._changed = self._changed, {}
        try:
            candidates = self._candidates(full, changed)
            live = set(self.metadata.brokers)
            if self._needs_confirmation(candidates, live, self._bounced):
                live = await self._confirm_live_brokers()
                if self._full_pass and not full:  # ZooKeeper told of a broker change: look at all
                    full, self._full_pass = True, False
                    candidates = self._candidates(True, {})
        except BaseException:
            self._full_pass = True  # what this pass was to look at is looked at again
            raise
        bounced, self._bounced = self._bounced, set()
        self.partitions_examined += len(candidates)
        due = [(info, unclean) for info, unclean in candidates if self._may_need_election(info, live, bounced)]
        # New partitions (a CreateTopics, CreatePartitions) are elected together, many states per
        # ZooKeeper request.
        await self._elect_new_partitions([info for info, _ in due if info.state is None], live)
        due = [(info, unclean) for info, unclean in due if info.state is not None]
        # The others (leaders gone, followers dead) likewise: many states per request.
        decided = [found for found in (self._decide(info, live, bounced, unclean) for info, unclean in due)
                   if found is not None]
        # New leaders first: a partition without one is unavailable, a dead follower in an ISR
        # only delays acks=all until the ISR shrinks.
        decided.sort(key=lambda found: found[1] == "state")
        for (_, kind), written in zip(decided, await self._write_states([write for write, _ in decided])):
            if written and kind != "state":
                self.events.leader_elections += 1
                if kind == "unclean":
                    self.events.unclean_leader_elections += 1
        if self._preferred_requests:
            requests, self._preferred_requests = self._preferred_requests, []
            await self._run_preferred(requests, live)
        if self._reassignments:
            await self._advance_reassignments(live)

    async def _confirm_live_brokers(self) -> set[int]:
        """Read the live brokers from ZooKeeper (not the watch-fed cache) and return their ids.

        The first read after an election only sets the epochs to compare later registrations
        with; bounces it would otherwise report are registrations older than this controller.
        """
        first = not self._brokers_confirmed
        live = await self.metadata.refresh_brokers()
        if first:
            self._broker_epochs = {broker_id: broker.epoch for broker_id, broker in live.items()}
            self._bounced.clear()
            self._brokers_confirmed = True
            log.info("controller: live brokers %s (read from ZooKeeper)", sorted(live))
        return set(live)

    def _candidates(self, full: bool,
                    changed: dict[tuple[str, int], PartitionInfo]) -> list[tuple[PartitionInfo, bool]]:
        """(partition, unclean election allowed) of what a pass looks at: every partition of the
        topics not being deleted, or only the ``changed`` ones still in the cache."""
        deleting = self.metadata.topics_being_deleted
        candidates: list[tuple[PartitionInfo, bool]] = []
        if full:
            for topic, topic_info in list(self.metadata.topics.items()):
                if topic not in deleting:
                    unclean = self._unclean_allowed(topic)
                    candidates.extend((info, unclean) for info in topic_info.partitions.values())
            return candidates
        new_topics: set[str] = set()
        for (topic, number), info in changed.items():
            current = self.metadata.topics.get(topic)
            if topic in deleting or current is None or current.partitions.get(number) is not info:
                continue
            if info.state is None:
                # A new partition: its topic's other new partitions are in the cache already
                # (their notifications follow one by one) and are elected with it.
                new_topics.add(topic)
            else:
                candidates.append((info, self._unclean_allowed(topic)))
        for topic in new_topics:
            unclean = self._unclean_allowed(topic)
            candidates.extend((info, unclean) for info in self.metadata.topics[topic].partitions.values()
                              if info.state is None)
        return candidates

    def _needs_confirmation(self, candidates: list[tuple[PartitionInfo, bool]], live: set[int],
                            bounced: set[int]) -> bool:
        """Whether this pass would take a leader or an ISR member out of service because the
        cache says it is dead or bounced: then ZooKeeper is asked first."""
        for info, _ in candidates:
            state = info.state
            if state is None:
                continue
            if state.leader >= 0 and (state.leader not in live or state.leader in bounced):
                return True
            if any(replica not in live or replica in bounced for replica in state.isr):
                return True
        return False

    # -- partition reassignment ---------------------------------------------------------------
    async def _on_reassignment_request(self, data: bytes | None, stat: object) -> None:
        if data is None:
            self._reassignments = {}
            return
        try:
            request = znodes.ReassignmentRequest.from_bytes(data, znodes.REASSIGN_PARTITIONS_PATH)
        except KafkaliteError as exc:
            log.warning("ignoring malformed reassignment request: %s", exc)
            return
        self._reassignments = {(entry.topic, entry.partition): list(entry.replicas) for entry in request.partitions}
        self._wake.set()

    async def _advance_reassignments(self, live: set[int]) -> None:
        """Move each partition a step towards its target replicas (Kafka's reassignment):
        1. replicas := target + old (adding/removing recorded); new replicas start following;
        2. wait until every target replica is in the ISR;
        3. a target replica leads and the ISR drops the old replicas (epoch + 1);
        4. replicas := target; brokers left out delete their copies; the request entry goes."""
        finished: list[tuple[str, int]] = []
        for key, target in list(self._reassignments.items()):
            topic, number = key
            info = self.metadata.partition(topic, number)
            if info is None:
                finished.append(key)
                continue
            state = info.state
            if state is None:
                continue
            if info.replicas == target and not info.adding and not info.removing:
                finished.append(key)
                continue
            combined = target + [broker for broker in info.replicas if broker not in target]
            if info.replicas != combined:
                await self._write_replicas(topic, number, combined,
                                           adding=[broker for broker in target if broker not in info.replicas],
                                           removing=[broker for broker in info.replicas if broker not in target])
                continue
            if not all(broker in state.isr for broker in target):
                continue  # new replicas still catching up
            if state.leader not in target or any(broker not in target for broker in state.isr):
                leader = state.leader if state.leader in target else next(
                    (broker for broker in target if broker in state.isr and broker in live), assignment.NO_LEADER)
                if leader == assignment.NO_LEADER:
                    continue
                await self._write_state(info, leader, state.leader_epoch + 1,
                                        [broker for broker in state.isr if broker in target])
                continue
            if any(broker not in target for broker in state.isr):
                continue  # the ISR must hold only target replicas before they become the set
            if await self._write_replicas(topic, number, list(target), adding=[], removing=[]):
                log.info("controller: reassignment of %s-%d to %s completed", topic, number, target)
                finished.append(key)
        if finished:
            await self._finish_reassignments(finished)

    async def _write_replicas(self, topic: str, number: int, replicas: list[int], adding: list[int],
                              removing: list[int]) -> bool:
        path = znodes.topic_path(topic)
        try:
            data, stat = await self.zookeeper.get(path)
        except ZNodeMissingError:
            return False
        current = znodes.TopicAssignment.from_bytes(data, path)
        partitions = dict(current.partitions)
        partitions[number] = replicas
        adding_map = {key: value for key, value in current.adding_replicas.items() if key != number}
        removing_map = {key: value for key, value in current.removing_replicas.items() if key != number}
        if adding:
            adding_map[number] = adding
        if removing:
            removing_map[number] = removing
        payload = znodes.TopicAssignment(partitions=partitions, topic_id=current.topic_id,
                                         adding_replicas=adding_map, removing_replicas=removing_map)
        transaction = self._fenced()
        transaction.set_data(path, payload.to_bytes(), stat.version)
        try:
            await transaction.commit()
        except (ZNodeVersionConflictError, ZNodeMissingError):
            if await self._still_controller():
                self._retry_soon()
            return False
        log.info("controller: %s-%d replicas %s (adding %s, removing %s)", topic, number, replicas, adding, removing)
        return True

    async def _finish_reassignments(self, finished: list[tuple[str, int]]) -> None:
        for key in finished:
            self._reassignments.pop(key, None)
        path = znodes.REASSIGN_PARTITIONS_PATH
        for _ in range(5):
            try:
                data, stat = await self.zookeeper.get(path)
            except ZNodeMissingError:
                return
            request = znodes.ReassignmentRequest.from_bytes(data, path)
            remaining = [entry for entry in request.partitions if (entry.topic, entry.partition) not in finished]
            transaction = self._fenced()
            if remaining:
                transaction.set_data(path, znodes.ReassignmentRequest(remaining).to_bytes(), stat.version)
            else:
                transaction.delete(path, stat.version)
            try:
                await transaction.commit()
                return
            except (ZNodeVersionConflictError, ZNodeMissingError):
                if not await self._still_controller():
                    return

    def _unclean_allowed(self, topic: str) -> bool:
        value = self.topic_configs(topic).get("unclean.leader.election.enable")
        if value is None:
            return self.config.log.unclean_leader_election_enable
        return value.strip().lower() == "true"

    def _may_need_election(self, info: PartitionInfo, live: set[int], bounced: set[int]) -> bool:
        """Whether a reconciliation pass may write this partition's state: it has none yet,
        its leader is gone (dead, bounced or shutting down), or a follower in its ISR is."""
        state = info.state
        if state is None:
            return True
        if state.leader not in live or state.leader in bounced or state.leader in self._shutting_down:
            return True
        return any(replica != state.leader and (replica not in live or replica in bounced
                                                or replica in self._shutting_down) for replica in state.isr)

    async def _elect_new_partitions(self, infos: list[PartitionInfo], live: set[int]) -> None:
        """Write the first state of new partitions: the first live replica leads, every live
        replica is in the ISR (a partition with no live replica waits)."""
        writes: list[StateWrite] = []
        for info in infos:
            election = assignment.elect_new_partition(info.replicas, live)
            if election.leader != assignment.NO_LEADER:
                writes.append((info, election.leader, 0, election.isr))
        for topic in sorted({info.topic for info, _, _, _ in writes} - self._topics_with_partitions_path):
            try:
                await self.zookeeper.create(znodes.topic_partitions_path(topic), b"")
            except ZNodeExistsError:
                pass
            except ZNodeMissingError:
                continue  # deleted meanwhile: each of its partitions finds out on its own below
            self._topics_with_partitions_path.add(topic)
        await self._write_states(writes)

    def _decide(self, info: PartitionInfo, live: set[int], bounced: set[int],
                unclean: bool) -> tuple[StateWrite, str] | None:
        """The state write a partition with a state needs, if any, and what it is: "election" (a
        new leader from the ISR), "unclean" (one from outside it) or "state" (no leader, or an
        ISR without its dead followers)."""
        state = info.state
        assert state is not None
        usable = live - self._shutting_down
        leader_gone = state.leader not in live or state.leader in bounced or state.leader in self._shutting_down
        if leader_gone:
            candidates = usable - bounced
            election = assignment.elect_offline_partition(info.replicas, state.isr, candidates, unclean)
            if election.leader == assignment.NO_LEADER and state.leader in bounced and state.leader in live:
                election = assignment.elect_offline_partition(info.replicas, state.isr, usable, unclean)
            if election.leader == assignment.NO_LEADER:
                if state.leader in live and state.leader not in bounced:
                    return None  # only shutting down, and no replica could take over: it leads until it stops
                if state.leader != assignment.NO_LEADER or state.isr != election.isr:
                    return (info, assignment.NO_LEADER, state.leader_epoch + 1, election.isr), "state"
                return None
            if election.leader != state.leader or state.leader in bounced:
                log.info("controller: %s-%d leader %d -> %d, isr %s", info.topic, info.partition, state.leader,
                         election.leader, election.isr)
            if election.leader not in state.isr:
                log.warning("controller: %s-%d unclean leader election: %d was not in the ISR %s", info.topic,
                            info.partition, election.leader, state.isr)
                return (info, election.leader, state.leader_epoch + 1, election.isr), "unclean"
            return (info, election.leader, state.leader_epoch + 1, election.isr), "election"
        dead_followers = [replica for replica in state.isr
                          if replica != state.leader and (replica not in live or replica in bounced
                                                          or replica in self._shutting_down)]
        if dead_followers:
            isr = [replica for replica in state.isr if replica not in dead_followers]
            return (info, state.leader, state.leader_epoch + 1, isr), "state"
        return None

    # -- topic deletion -----------------------------------------------------------------------
    async def _on_deletions(self, children: list[str]) -> None:
        if children:
            self._deletions.extend(child for child in children if child not in self._deletions)
            self._wake.set()

    async def _delete_topic(self, topic: str) -> None:
        marker = znodes.delete_topic_path(topic)
        if not self.config.delete_topic_enable:
            log.warning("controller: deletion of %s requested but delete.topic.enable=false", topic)
            await self._delete_quietly(marker)
            return
        transaction = self._fenced()
        try:
            partitions = await self.zookeeper.get_children(znodes.topic_partitions_path(topic))
        except ZNodeMissingError:
            partitions = []
        for child in partitions:
            number = int(child)
            state_path = znodes.partition_state_path(topic, number)
            if await self.zookeeper.exists(state_path) is not None:
                transaction.delete(state_path)
            transaction.delete(znodes.partition_path(topic, number))
        if await self.zookeeper.exists(znodes.topic_partitions_path(topic)) is not None:
            transaction.delete(znodes.topic_partitions_path(topic))
        if await self.zookeeper.exists(znodes.topic_path(topic)) is not None:
            transaction.delete(znodes.topic_path(topic))
        if await self.zookeeper.exists(znodes.topic_config_path(topic)) is not None:
            transaction.delete(znodes.topic_config_path(topic))
        transaction.delete(marker)
        try:
            await transaction.commit()
            log.info("controller: topic %s deleted", topic)
        except (ZNodeVersionConflictError, ZNodeMissingError, ZNodeExistsError, KafkaliteError) as exc:
            if await self._still_controller():
                log.info("controller: deleting %s raced (%s); retrying", topic, exc)
                self._deletions.append(topic)
                self._retry_soon()

    async def _delete_quietly(self, path: str) -> None:
        try:
            await self.zookeeper.delete(path)
        except KafkaliteError:
            pass

    # -- ISR change notifications (written by leaders; the watches already told us) -----------
    async def _on_isr_notifications(self, children: list[str]) -> None:
        """Delete the notifications at once, each once: the watch fires again while they are
        being deleted, with the children not gone yet."""
        fresh = [child for child in children if child not in self._isr_notifications_deleting]
        if not fresh:
            return
        self._isr_notifications_deleting.update(fresh)
        try:
            await asyncio.gather(*(self._delete_quietly(f"{znodes.ISR_CHANGE_NOTIFICATION_PATH}/{child}")
                                   for child in fresh))
        finally:
            self._isr_notifications_deleting.difference_update(fresh)

    # -- preferred leader election ------------------------------------------------------------
    async def _on_preferred_request(self, data: bytes | None, stat: object) -> None:
        if data is None:
            return
        try:
            request = znodes.PreferredElectionRequest.from_bytes(data, znodes.PREFERRED_REPLICA_ELECTION_PATH)
            self._preferred_requests.extend((ref.topic, ref.partition) for ref in request.partitions)
        except KafkaliteError as exc:
            log.warning("ignoring malformed preferred election request: %s", exc)
        await self._delete_quietly(znodes.PREFERRED_REPLICA_ELECTION_PATH)
        self._wake.set()

    async def _run_preferred(self, requests: list[tuple[str, int]], live: set[int]) -> dict[tuple[str, int], str]:
        outcome: dict[tuple[str, int], str] = {}
        for topic, number in requests:
            outcome[(topic, number)] = await self._elect_preferred_one(topic, number, live)
        return outcome

    async def _elect_preferred_one(self, topic: str, number: int, live: set[int]) -> str:
        """Move one partition's leadership to its preferred replica; Kafka's error name, or NONE.

        The cached state can be behind the leader's own ISR write (a live preferred replica that
        just rejoined the ISR) or the write can lose a race with it: then the state is read again
        from ZooKeeper and the election is decided once more on it."""
        for attempt in range(2):
            info = self.metadata.partition(topic, number)
            if info is None or info.state is None:
                return "UNKNOWN_TOPIC_OR_PARTITION"
            if info.state.leader == info.replicas[0]:
                return "ELECTION_NOT_NEEDED"
            election = assignment.elect_preferred(info.replicas, info.state.isr, live)
            if election is None:
                if attempt == 0 and info.replicas[0] in live:  # live, but not in the ISR as cached
                    await self.metadata.reload_partition_state(topic, number)
                    continue
                return "PREFERRED_LEADER_NOT_AVAILABLE"
            if await self._write_state(info, election.leader, info.state.leader_epoch + 1, election.isr):
                self.events.leader_elections += 1
                return "NONE"
            # lost a race: _write_state read the state again; decide on it once more
        return "ELIGIBLE_LEADERS_NOT_AVAILABLE"

    async def elect_preferred(self, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], str]:
        """Run a preferred election now (admin API); ``None`` means every partition."""
        if not self.active:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        if partitions is None:
            partitions = [(topic, number) for topic, info in self.metadata.topics.items()
                          for number in info.partitions]
        return await self._run_preferred(partitions, set(self.metadata.brokers))

    async def _auto_rebalance_loop(self) -> None:
        interval = self.config.leader_imbalance_check_interval_seconds
        while self.active:
            await self.sleep(interval)
            try:
                await self._check_imbalance()
            except KafkaliteError as exc:
                log.warning("auto leader rebalance failed: %s", exc)

    async def _check_imbalance(self) -> None:
        live = set(self.metadata.brokers)
        by_preferred: dict[int, list[PartitionInfo]] = {}
        for topic_info in self.metadata.topics.values():
            for info in topic_info.partitions.values():
                if info.replicas and info.state is not None:
                    by_preferred.setdefault(info.replicas[0], []).append(info)
        requests: list[tuple[str, int]] = []
        for broker_id, infos in by_preferred.items():
            if broker_id not in live:
                continue
            imbalanced = [info for info in infos if info.state is not None and info.state.leader != broker_id]
            if infos and len(imbalanced) * 100 / len(infos) > self.config.leader_imbalance_per_broker_percentage:
                requests.extend((info.topic, info.partition) for info in imbalanced)
        if requests:
            log.info("controller: leader imbalance; preferred election for %d partitions", len(requests))
            await self._run_preferred(requests, live)

    # -- controlled shutdown ------------------------------------------------------------------
    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[tuple[str, int]]:
        """Move leadership off ``broker_id``; returns the replicated partitions it still leads
        that a retry could move. A partition with no other replica has nowhere to go and is not
        counted (Kafka's ``replicatedPartitionsBrokerLeads``), nor is one whose other replicas are
        all down or shutting down: the broker shuts down at once instead of retrying (the last
        broker of a cluster, a single-broker cluster). One whose other replica is up but out of
        the ISR is counted: it may rejoin before the broker's next attempt.

        The broker's places in the ISRs of the partitions it follows are given up by the pass
        this call wakes (a broker shutting down counts as a dead follower), many states per
        request, so that the answer waits only for the leader moves: the stopping broker has
        already stopped fetching, and its departure would shrink those ISRs in any case."""
        if not self.active:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        known = self.metadata.brokers.get(broker_id)
        if known is not None and broker_epoch >= 0 and known.epoch != broker_epoch:
            raise StaleBrokerEpochError(f"broker {broker_id} epoch {broker_epoch} is not {known.epoch}")
        async with self._decision_lock:
            return await self._move_leaders_off(broker_id)

    async def _move_leaders_off(self, broker_id: int) -> list[tuple[str, int]]:
        self._shutting_down.add(broker_id)
        self._full_pass = True  # the next pass shrinks the ISRs and moves what this call could not
        live = set(self.metadata.brokers)
        remaining: list[tuple[str, int]] = []
        moves: list[StateWrite] = []
        for topic_info in list(self.metadata.topics.values()):
            for info in list(topic_info.partitions.values()):
                state = info.state
                if state is None or state.leader != broker_id:
                    continue
                if broker_id not in info.replicas or len(info.replicas) < 2:
                    if len(info.replicas) >= 2:
                        remaining.append((info.topic, info.partition))
                    continue
                election = assignment.elect_for_controlled_shutdown(info.replicas, state.isr, live,
                                                                    self._shutting_down)
                if election is None:
                    if any(replica != broker_id and replica in live and replica not in self._shutting_down
                           for replica in info.replicas):
                        remaining.append((info.topic, info.partition))
                else:
                    moves.append((info, election.leader, state.leader_epoch + 1, election.isr))
        moved = 0
        for (info, _, _, _), done in zip(moves, await self._write_states(moves)):
            if done:
                self.events.leader_elections += 1
                moved += 1
            else:
                remaining.append((info.topic, info.partition))
        self._wake.set()
        if moves or remaining:
            log.info("controller: controlled shutdown of broker %d moved %d leaders; %d remain", broker_id, moved,
                     len(remaining))
        return remaining
