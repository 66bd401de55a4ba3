"""The Broker: composition root of one broker process.

:class:`Broker` wires storage (the log manager), coordination (the ZooKeeper session), the
services (:class:`kafkalite.broker.services.BrokerServices`, built once) and the front ends that
serve them (one listener, :mod:`kafkalite.broker.listener`, for the HTTP front end of
:mod:`kafkalite.broker.http` and the Kafka wire protocol of :mod:`kafkalite.broker.kafka`); it
parses no request itself.
It starts its parts in order — log recovery (on a worker thread),
the ZooKeeper session and the persistent paths, the cluster id and ``meta.properties`` checks,
the metadata cache and the replica manager, the listener, the ephemeral registration in
``/brokers/ids/<id>`` (a live duplicate ``broker.id`` is refused), the controller election,
then the periodic log jobs (high-watermark checkpoints, retention, flushing, compaction) on
worker threads. :meth:`Broker.stop` reverses that, after a controlled shutdown that moves
leadership away. A ZooKeeper session that expires is followed by a new registration and a
new controller election; the logs are untouched.

Concurrency: one event loop owns the broker; blocking work goes to worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafkalite import protocol
from kafkalite.broker.admin import AdminService
from kafkalite.broker.authorizer import Authorizer
from kafkalite.broker.controller import Controller
from kafkalite.broker.entity_configs import EntityConfigs
from kafkalite.broker.group_coordinator import GroupCoordinator
from kafkalite.broker.group_lag import ConsumerLag
from kafkalite.broker.group_offsets import ReplicaOffsetLog
from kafkalite.broker.http import HttpListener
from kafkalite.broker.listener import BrokerListener
from kafkalite.broker.metadata import MetadataCache
from kafkalite.broker.process_clock import TICK_SECONDS, ProcessClock
from kafkalite.broker.quotas import BrokerQuotas
from kafkalite.broker.replica import ReplicaManager
from kafkalite.broker.schema_topic import BrokerSchemaTopic
from kafkalite.broker.services import (
    AdminRequests,
    BrokerServices,
    ControllerService,
    MetadataService,
    ProducerIdService,
    RecordsService,
    ReplicaService,
)
from kafkalite.broker.state_push import StatePublisher
from kafkalite.broker.stats import BrokerStats
from kafkalite.broker.tls_contexts import inter_broker_context, listener_contexts
from kafkalite.broker.txn_coordinator import TransactionCoordinator
from kafkalite.broker.txn_markers import BrokerMarkerChannel, BrokerTxnTopology, ReplicaTxnStateLog
from kafkalite.broker.wake_grid import delay_to_grid
from kafkalite.config import BrokerConfig, load_properties
from kafkalite.coord import znodes
from kafkalite.coord.coordinator import Coordinator, SessionState
from kafkalite.coord.zk import ZooKeeperClient
from kafkalite.errors import (
    ConfigError,
    KafkaliteError,
    NotControllerError,
    ZNodeExistsError,
    ZNodeMissingError,
)
from kafkalite.registry.api import build_registry_app
from kafkalite.registry.store import SchemaStore
from kafkalite.security.acl import parse_super_users
from kafkalite.security.sasl_config import check_broker_sasl, inter_broker_sasl
from kafkalite.storage import files
from kafkalite.storage.manager import LogManager
from kafkalite.transport import AsyncTransport

log = logging.getLogger(__name__)

#: How often the stall watchdog runs on the loop: it measures the loop's lag and asks the
#: process clock whether the process was stopped (as often as that clock ticks).
STALL_CHECK_SECONDS = TICK_SECONDS


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class Broker:
    """One broker process's parts and lifecycle. See the module docstring."""

    def __init__(self, config: BrokerConfig, clock: Callable[[], int] = wall_clock_ms,
                 coordinator: Coordinator | None = None) -> None:
        """``coordinator`` replaces the ZooKeeper client built from ``config`` (tests pass the
        in-memory twin); the broker starts and stops it either way."""
        self.config = config
        self.clock = clock
        self.log_manager = LogManager([Path(directory) for directory in config.log_dirs], config.log,
                                      topic_configs=self._topic_configs, clock=clock)
        self.zookeeper: Coordinator = coordinator if coordinator is not None else ZooKeeperClient(
            config.zookeeper_connect, session_timeout=config.zookeeper_session_timeout_ms / 1000,
            connect_timeout=config.zookeeper_connection_timeout_ms / 1000,
            auth_data=config.zookeeper_auth_data(), secure_acls=config.zookeeper_set_acl)
        self.metadata = MetadataCache(self.zookeeper, config.broker_id)
        self.stats = BrokerStats()
        self.replica_manager = ReplicaManager(config, self.log_manager, self.metadata, self.zookeeper, clock,
                                              self.stats.topics, self.stats.events)
        self.controller = Controller(config, self.zookeeper, self.metadata, self._topic_configs, clock,
                                     events=self.stats.events)
        self.admin = AdminService(config, self.zookeeper, self.metadata, clock)
        # TLS: the listeners' contexts and the one for calls to other brokers (ConfigError when
        # the ssl.* settings cannot be honoured: the broker does not start)
        self._listener_contexts = listener_contexts(config)
        self.transport = AsyncTransport(request_timeout_ms=config.request_timeout_ms, client_id="broker-admin",
                                        ssl_context=inter_broker_context(config))
        self._authenticate_inter_broker_calls()
        # The states this broker writes (as controller, as leader) go to the other brokers too.
        self.state_publisher = StatePublisher(config, self.metadata, self.transport)
        self.controller.publish_states = self.state_publisher.publish
        self.replica_manager.publish_states = self.state_publisher.publish
        self.broker_epoch = -1
        self._listener: BrokerListener | None = None
        self._jobs: list[asyncio.Task[None]] = []
        self._stopping = False
        self._stopped = asyncio.Event()
        self._verifier: asyncio.Task[None] | None = None
        self.group_coordinator = GroupCoordinator(config, self.metadata, self.admin,
                                                  ReplicaOffsetLog(config, self.replica_manager), clock)
        self.replica_manager.leadership_listeners.append(self.group_coordinator.on_leadership)
        controller_service = ControllerService(config, self.zookeeper, self.metadata, self.controller, self.transport)
        metadata_service = MetadataService(config, self.metadata, self.admin, self.controller, self.log_manager)
        replicas = ReplicaService(self.replica_manager, controller_service)
        records = RecordsService(config, metadata_service, replicas, self.transport, clock)
        admin_requests = AdminRequests(config, self.admin)
        self.txn_coordinator = TransactionCoordinator(
            config, BrokerTxnTopology(config, self.metadata, self.admin),
            ReplicaTxnStateLog(config, self.replica_manager),
            BrokerMarkerChannel(config, self.metadata, replicas.write_txn_markers, self.transport),
            self.admin.next_producer_id, clock)
        self.replica_manager.leadership_listeners.append(
            lambda partition: self.txn_coordinator.on_leadership(partition.topic, partition.partition,
                                                                 partition.is_leader, partition.leader_epoch))
        self.replica_manager.add_marker_listener(self.group_coordinator.on_marker)
        self.schema_store = SchemaStore(BrokerSchemaTopic(config, metadata_service, records, admin_requests),
                                        config.request_timeout_ms)
        self._registry_listener: HttpListener | None = None
        self.entity_configs = EntityConfigs(self.zookeeper)
        self.services = BrokerServices(
            config=config, metadata=metadata_service, replicas=replicas, records=records,
            controller=controller_service, admin=admin_requests, groups=self.group_coordinator,
            producer_ids=ProducerIdService(self.admin), transactions=self.txn_coordinator,
            registry=self.schema_store, stats=self.stats,
            consumer_lag=ConsumerLag(config.broker_id, self.group_coordinator, self.replica_manager, self.metadata,
                                     self.transport),
            entity_configs=self.entity_configs,
            quotas=BrokerQuotas.following(config, self.entity_configs),
            authorizer=Authorizer(self.zookeeper, parse_super_users(config.super_users),
                                  config.allow_everyone_if_no_acl_found) if config.authorizer_enabled() else None)

    def _authenticate_inter_broker_calls(self) -> None:
        """On a SASL inter-broker listener, the broker's own calls (forwarding, controlled shutdown,
        follower fetches) carry its JAAS credentials (a bad setting is reported by :meth:`start`)."""
        try:
            found = inter_broker_sasl(self.config)
        except ConfigError:
            return
        if found is not None:
            for transport in (self.transport, self.replica_manager.fetchers.transport):
                transport.set_credentials(found[1].username, found[1].password)

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        config = self.config
        log.info("starting broker %d", config.broker_id)
        check_broker_sasl(config)  # a SASL setting that cannot be honoured stops the broker, named
        await asyncio.to_thread(self.log_manager.start)
        await self.zookeeper.start()
        await self.zookeeper.ensure_paths(znodes.PERSISTENT_PATHS)
        cluster_id = await self._ensure_cluster_id()
        await asyncio.to_thread(self._check_meta_properties, cluster_id)
        # Serve no partition before this process is registered: a previous incarnation's
        # session may still hold the registration (and so the leadership) for a while.
        self.replica_manager.fenced_reason = "the broker is not registered yet"
        await self.metadata.start()
        await self.entity_configs.start()
        if self.services.authorizer is not None:
            await self.services.authorizer.start()
        await self.replica_manager.remove_stray_logs(await self._topics_in_zookeeper())
        await self.replica_manager.start()
        self.group_coordinator.start()
        self.txn_coordinator.start()
        host, port = config.listener_address()
        self._listener = await BrokerListener.start(self.services, host, port, config.listener_list(),
                                                    self._listener_contexts)
        registry_address = config.schema_registry_address()
        if registry_address is not None:
            self._registry_listener = await HttpListener.serve_app(
                build_registry_app(self.schema_store), *registry_address)
            log.info("serving the schema registry on %s:%d", *registry_address)
        await self._register()
        self.replica_manager.fenced_reason = None
        await asyncio.to_thread(self._write_meta_properties, cluster_id)
        self.zookeeper.add_session_listener(self._on_session_state)
        self.controller.enabled = True
        await self.controller.try_elect()
        self._start_jobs()
        advertised = config.advertised_address()
        log.info("[KafkaliteServer id=%d] started, listening on %s:%d (cluster %s)", config.broker_id,
                 advertised[0], advertised[1], cluster_id)

    async def stop(self) -> None:
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        log.info("[KafkaliteServer id=%d] shutting down", self.config.broker_id)
        if self.config.controlled_shutdown_enable and self.broker_epoch >= 0:
            try:
                await self._controlled_shutdown()
            except KafkaliteError as exc:
                log.warning("controlled shutdown incomplete: %s", exc)
        for job in self._jobs + ([self._verifier] if self._verifier else []):
            job.cancel()
        await asyncio.gather(*self._jobs, *([self._verifier] if self._verifier else []), return_exceptions=True)
        await self.controller.stop()
        await self.state_publisher.stop()
        await self.txn_coordinator.stop()
        await self.group_coordinator.stop()
        await self.replica_manager.stop()
        if self._registry_listener is not None:
            await self._registry_listener.stop()
        if self._listener is not None:
            await self._listener.stop()
        self.metadata.stop()
        self.entity_configs.stop()
        if self.services.authorizer is not None:
            self.services.authorizer.stop()
        await self.transport.close()
        try:
            await self.zookeeper.stop()
        except KafkaliteError as exc:
            log.warning("closing the ZooKeeper session: %s", exc)
        await asyncio.to_thread(self.log_manager.shutdown)
        log.info("[KafkaliteServer id=%d] shut down completed", self.config.broker_id)
        self._stopped.set()

    # -- registration -------------------------------------------------------------------------
    async def _ensure_cluster_id(self) -> str:
        try:
            data, _ = await self.zookeeper.get(znodes.CLUSTER_ID_PATH)
            return znodes.ClusterId.from_bytes(data, znodes.CLUSTER_ID_PATH).cluster_id
        except ZNodeMissingError:
            pass
        import base64
        import uuid

        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        try:
            await self.zookeeper.create(znodes.CLUSTER_ID_PATH, znodes.ClusterId(candidate).to_bytes(), makepath=True)
            return candidate
        except ZNodeExistsError:
            data, _ = await self.zookeeper.get(znodes.CLUSTER_ID_PATH)
            return znodes.ClusterId.from_bytes(data, znodes.CLUSTER_ID_PATH).cluster_id

    def _check_meta_properties(self, cluster_id: str) -> None:
        """Each log dir records the broker and cluster it belongs to; a mismatch is refused."""
        from kafkalite.config import parse_properties

        for directory in self.log_manager.log_dirs:
            path = directory / files.META_PROPERTIES
            if path.exists():
                properties = parse_properties(path.read_text(), str(path))
                if properties.get("broker.id") not in (None, str(self.config.broker_id)):
                    raise ConfigError(f"{path} belongs to broker.id {properties['broker.id']}, "
                                      f"not {self.config.broker_id}")
                if properties.get("cluster.id") not in (None, cluster_id):
                    raise ConfigError(f"{path} belongs to cluster {properties['cluster.id']}, but ZooKeeper at "
                                      f"{self.config.zookeeper_connect} holds cluster {cluster_id}")

    def _write_meta_properties(self, cluster_id: str) -> None:
        for directory in self.log_manager.log_dirs:
            path = directory / files.META_PROPERTIES
            if not path.exists():
                path.write_text(f"version=0\nbroker.id={self.config.broker_id}\ncluster.id={cluster_id}\n")

    async def _register(self) -> None:
        config = self.config
        host, port = config.advertised_address()
        payload = znodes.BrokerRegistration(
            host=host, port=port, endpoints=[listener.endpoint for listener in config.advertised_listener_list()],
            rack=config.broker_rack).to_bytes()
        path = znodes.broker_path(config.broker_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + config.zookeeper_session_timeout_ms / 1000 + 2
        while True:
            try:
                await self.zookeeper.create(path, payload, ephemeral=True)
                break
            except ZNodeExistsError:
                stat = await self.zookeeper.exists(path)
                if stat is not None and stat.ephemeral_owner == self.zookeeper.session_id:
                    break
                if loop.time() > deadline:
                    raise ConfigError(f"broker.id {config.broker_id} is already registered by another live broker "
                                      f"at {config.zookeeper_connect}") from None
                await asyncio.sleep(0.5)
        stat = await self.zookeeper.exists(path)
        self.broker_epoch = stat.czxid if stat else -1
        self.replica_manager.fetchers.set_broker_epoch(self.broker_epoch)
        log.info("registered broker %d at %s:%d (epoch %d)", config.broker_id, host, port, self.broker_epoch)

    async def _on_session_state(self, state: SessionState) -> None:
        log.info("ZooKeeper session %s", state.value)
        if state == SessionState.SUSPENDED:
            self._fence("the ZooKeeper connection is suspended")
        elif state == SessionState.LOST:
            log.warning("ZooKeeper session expired: registration and controllership are gone")
            self._fence("the ZooKeeper session expired")
            if self.controller.active:
                self.controller._resign()
        elif state == SessionState.CONNECTED and not self._stopping:
            try:
                await self._register()
                await self.controller.try_elect()
            except KafkaliteError as exc:
                log.error("re-registration after session loss failed: %s", exc)
            self._schedule_verification()

    # -- fencing ------------------------------------------------------------------------------
    def _fence(self, reason: str) -> None:
        """Stop serving partitions until the ZooKeeper view is confirmed current again."""
        if self.replica_manager.fenced_reason is None:
            log.warning("not serving partitions: %s", reason)
        self.replica_manager.fence(reason)
        self._schedule_verification()

    def _schedule_verification(self) -> None:
        if self.replica_manager.fenced_reason is None or self._stopping:
            return
        if self._verifier is None or self._verifier.done():
            self._verifier = asyncio.get_running_loop().create_task(self._verify_and_unfence())

    async def _verify_and_unfence(self) -> None:
        """Serve again once our registration belongs to our live session and every partition
        state has been re-read from ZooKeeper."""
        path = znodes.broker_path(self.config.broker_id)
        while self.replica_manager.fenced_reason is not None and not self._stopping:
            try:
                if self.zookeeper.state == SessionState.CONNECTED:
                    stat = await self.zookeeper.exists(path)
                    if stat is not None and stat.ephemeral_owner == self.zookeeper.session_id:
                        await self.metadata.reload_partition_states(
                            [(topic, number) for topic, info in list(self.metadata.topics.items())
                             for number in list(info.partitions)])
                        await asyncio.sleep(0.05)  # let the partition role changes apply
                        if self.zookeeper.state == SessionState.CONNECTED:
                            log.info("ZooKeeper view confirmed: serving partitions again")
                            self.replica_manager.fenced_reason = None
                            return
            except KafkaliteError as exc:
                log.debug("session verification failed: %s", exc)
            await asyncio.sleep(0.2)

    async def _stall_watchdog(self) -> None:
        """A stopped process (SIGSTOP, swapping) may have lost its session, and leadership with
        it, meanwhile: fence. A loop that only ran late (busy, the process running, kazoo's
        thread pinging) is measured as loop lag but is no reason to fence (see
        :mod:`kafkalite.broker.process_clock`)."""
        loop = asyncio.get_running_loop()
        threshold = max(1.0, self.config.zookeeper_session_timeout_ms / 3000)
        clock = ProcessClock()
        clock.start()
        try:
            while True:
                delay = delay_to_grid(time.monotonic(), STALL_CHECK_SECONDS)
                due = loop.time() + delay
                await asyncio.sleep(delay)
                now = loop.time()
                self.stats.loop_lag.record(max(0.0, now - due), now)  # how late the loop ran this timer
                stopped = clock.stopped_for()
                if stopped > threshold:
                    self._fence(f"the process was stopped for {stopped:.1f} s")
        finally:
            clock.stop()

    async def _topics_in_zookeeper(self) -> dict[str, str]:
        topics: dict[str, str] = {}
        for topic in await self.zookeeper.get_children(znodes.BROKER_TOPICS_PATH):
            try:
                data, _ = await self.zookeeper.get(znodes.topic_path(topic))
                topics[topic] = znodes.TopicAssignment.from_bytes(data).topic_id
            except KafkaliteError:
                continue
        return topics

    def _topic_configs(self, topic: str) -> dict[str, str]:
        info = self.metadata.topics.get(topic)
        return dict(info.configs) if info else {}

    # -- background jobs ----------------------------------------------------------------------
    def _start_jobs(self) -> None:
        config = self.config
        manager = self.log_manager
        # (name, interval, job, whether it has work): a job with nothing to do is not handed
        # to a worker thread at all, so an idle broker's jobs cost a check on the loop.
        schedule: list[tuple[str, float, Callable[[], Any], Callable[[], bool] | None]] = [
            ("checkpoint", config.replica_high_watermark_checkpoint_interval_ms, manager.checkpoint_all,
             manager.checkpoint_due),
            ("retention", config.log_retention_check_interval_ms, manager.run_retention, None),
            ("flush", config.log_flush_scheduler_interval_ms, manager.flush_due_logs, manager.has_timed_flush),
        ]
        if config.log_cleaner_enable:
            schedule.append(("cleaner", config.log_cleaner_backoff_ms, manager.run_cleaner, manager.has_compacted))
        self._jobs.append(asyncio.create_task(self._stall_watchdog(), name="stall-watchdog"))
        for name, interval_ms, job, due in schedule:
            self._jobs.append(asyncio.create_task(self._periodic(name, interval_ms / 1000, job, due), name=name))

    async def _periodic(self, name: str, interval: float, job: Callable[[], Any],
                        due: Callable[[], bool] | None) -> None:
        while True:
            await asyncio.sleep(delay_to_grid(time.monotonic(), interval))
            if due is not None and not due():
                continue
            try:
                await asyncio.to_thread(job)
            except KafkaliteError as exc:
                log.warning("%s job failed: %s", name, exc)
            except Exception:
                log.exception("%s job failed", name)

    # -- controlled shutdown ------------------------------------------------------------------
    async def _controlled_shutdown(self) -> None:
        config = self.config
        await self.replica_manager.fetchers.stop_following()
        for attempt in range(config.controlled_shutdown_max_retries + 1):
            controller_id = self.metadata.controller_id
            try:
                if controller_id == config.broker_id and self.controller.active:
                    remaining = await self.controller.controlled_shutdown(config.broker_id, self.broker_epoch)
                else:
                    endpoint = self.metadata.endpoint(controller_id)
                    if endpoint is None:
                        raise NotControllerError("no controller is known")
                    answer = await self.transport.request_json(
                        endpoint.address, "POST", protocol.CONTROLLED_SHUTDOWN,
                        {"broker_id": config.broker_id, "broker_epoch": self.broker_epoch},
                        timeout_ms=config.request_timeout_ms)
                    remaining = [(item["topic"], item["partition"]) for item in answer.get("remaining_partitions", [])]
            except KafkaliteError as exc:
                log.info("controlled shutdown attempt %d failed: %s", attempt + 1, exc)
                remaining = None
            if remaining == []:
                await self.metadata.wait_for(self._leads_nothing_movable, 5.0)
                log.info("controlled shutdown succeeded")
                return
            await asyncio.sleep(min(config.controlled_shutdown_retry_backoff_ms / 1000, 1.0))
        log.warning("controlled shutdown gave up after %d attempts", config.controlled_shutdown_max_retries + 1)

    def _leads_nothing_movable(self) -> bool:
        """Whether this broker leads no partition that another live broker could lead (what the
        controller moves on a controlled shutdown; the rest stays with it until it stops)."""
        live = self.metadata.brokers
        me = self.config.broker_id
        for partition in self.replica_manager.partitions.values():
            if partition.is_leader and any(replica != me and replica in live for replica in partition.replicas):
                return False
        return True


def load_config(path: str, overrides: list[str]) -> BrokerConfig:
    """server.properties plus ``key=value`` overrides (Kafka's ``--override``)."""
    properties = load_properties(path)
    for override in overrides:
        key, separator, value = override.partition("=")
        if not separator or not key.strip():
            raise ConfigError(f"--override expects key=value, got {override!r}")
        properties[key.strip()] = value.strip()
    config = BrokerConfig.from_properties(properties)
    for name in config.unknown:
        log.warning("unknown broker config %s ignored", name)
    return config
