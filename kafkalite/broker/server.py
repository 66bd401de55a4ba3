"""The Broker: composition root of one broker process.

:class:`Broker` builds its parts and starts them in order — log recovery (on a worker thread),
the ZooKeeper session and the persistent paths, the cluster id and ``meta.properties`` checks,
the metadata cache and the replica manager, the HTTP listener, the ephemeral registration in
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

from aiohttp import web

from kafkalite import protocol
from kafkalite.broker.admin import AdminService, NewTopic, error_entry, parse_new_topic, validate_topic_name
from kafkalite.broker.controller import Controller
from kafkalite.broker.group_coordinator import GroupCoordinator
from kafkalite.broker.http import BrokerAppRunner, build_app, render_headers, render_payload
from kafkalite.broker.metadata import INTERNAL_TOPICS, MetadataCache
from kafkalite.broker.replica import ReplicaManager
from kafkalite.client.partitioner import murmur2, to_positive
from kafkalite.config import BrokerConfig, load_properties
from kafkalite.coord import znodes
from kafkalite.coord.coordinator import Coordinator, SessionState
from kafkalite.coord.zk import ZooKeeperClient
from kafkalite.errors import (
    BrokerResponseError,
    ConfigError,
    InvalidRequestError,
    KafkaliteError,
    LeaderNotAvailableError,
    NotControllerError,
    StaleBrokerEpochError,
    UnknownTopicOrPartitionError,
    ZNodeExistsError,
    ZNodeMissingError,
)
from kafkalite.record.batch import build_batch, decode_all
from kafkalite.storage import files
from kafkalite.storage.manager import LogManager
from kafkalite.transport import AsyncTransport

log = logging.getLogger(__name__)


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
            connect_timeout=config.zookeeper_connection_timeout_ms / 1000)
        self.metadata = MetadataCache(self.zookeeper, config.broker_id)
        self.replica_manager = ReplicaManager(config, self.log_manager, self.metadata, self.zookeeper, clock)
        self.controller = Controller(config, self.zookeeper, self.metadata, self._topic_configs, clock)
        self.admin = AdminService(config, self.zookeeper, self.metadata, clock)
        self.transport = AsyncTransport(request_timeout_ms=config.request_timeout_ms, client_id="broker-admin")
        self.broker_epoch = -1
        self._runner: web.AppRunner | None = None
        self._jobs: list[asyncio.Task[None]] = []
        self._stopping = False
        self._stopped = asyncio.Event()
        self._route_providers: list[Callable[[], list[web.RouteDef]]] = []
        self._verifier: asyncio.Task[None] | None = None
        self.group_coordinator = GroupCoordinator(self)
        self.add_route_provider(self.group_coordinator.routes)

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        config = self.config
        log.info("starting broker %d", config.broker_id)
        await asyncio.to_thread(self.log_manager.start)
        await self.zookeeper.start()
        await self.zookeeper.ensure_paths(znodes.PERSISTENT_PATHS)
        cluster_id = await self._ensure_cluster_id()
        await asyncio.to_thread(self._check_meta_properties, cluster_id)
        # Serve no partition before this process is registered: a previous incarnation's
        # session may still hold the registration (and so the leadership) for a while.
        self.replica_manager.fenced_reason = "the broker is not registered yet"
        await self.metadata.start()
        await self.replica_manager.remove_stray_logs(await self._topics_in_zookeeper())
        await self.replica_manager.start()
        self.group_coordinator.start()
        host, port = config.listener_address()
        self._runner = BrokerAppRunner(build_app(self), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True, backlog=1024)
        try:
            await site.start()
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
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
        await self.group_coordinator.stop()
        await self.replica_manager.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        self.metadata.stop()
        await self.transport.close()
        try:
            await self.zookeeper.stop()
        except KafkaliteError as exc:
            log.warning("closing the ZooKeeper session: %s", exc)
        await asyncio.to_thread(self.log_manager.shutdown)
        log.info("[KafkaliteServer id=%d] shut down completed", self.config.broker_id)
        self._stopped.set()

    def extra_routes(self) -> list[web.RouteDef]:
        routes: list[web.RouteDef] = []
        for provider in self._route_providers:
            routes.extend(provider())
        return routes

    def add_route_provider(self, provider: Callable[[], list[web.RouteDef]]) -> None:
        self._route_providers.append(provider)

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
        payload = znodes.BrokerRegistration.for_http(host, port, config.broker_rack).to_bytes()
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
        self.replica_manager.fetchers.broker_epoch = self.broker_epoch
        log.info("registered broker %d at %s:%d (epoch %d)", config.broker_id, host, port, self.broker_epoch)

    async def _on_session_state(self, state: SessionState) -> None:
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
                        for topic, info in list(self.metadata.topics.items()):
                            for number in list(info.partitions):
                                await self.metadata.reload_partition_state(topic, number)
                        await asyncio.sleep(0.05)  # let the partition role changes apply
                        if self.zookeeper.state == SessionState.CONNECTED:
                            log.info("ZooKeeper view confirmed: serving partitions again")
                            self.replica_manager.fenced_reason = None
                            return
            except KafkaliteError as exc:
                log.debug("session verification failed: %s", exc)
            await asyncio.sleep(0.2)

    async def _stall_watchdog(self) -> None:
        """A stalled process (SIGSTOP, swapping) may have lost leadership meanwhile: fence."""
        loop = asyncio.get_running_loop()
        threshold = max(1.0, self.config.zookeeper_session_timeout_ms / 3000)
        last = loop.time()
        while True:
            await asyncio.sleep(0.1)
            now = loop.time()
            if now - last > threshold:
                self._fence(f"the process was stalled for {now - last:.1f} s")
            last = now

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
        schedule: list[tuple[str, float, Callable[[], Any]]] = [
            ("checkpoint", config.replica_high_watermark_checkpoint_interval_ms, manager.checkpoint_all),
            ("retention", config.log_retention_check_interval_ms, manager.run_retention),
            ("flush", config.log_flush_scheduler_interval_ms, manager.flush_due_logs),
        ]
        if config.log_cleaner_enable:
            schedule.append(("cleaner", config.log_cleaner_backoff_ms, manager.run_cleaner))
        self._jobs.append(asyncio.create_task(self._stall_watchdog(), name="stall-watchdog"))
        for name, interval_ms, job in schedule:
            self._jobs.append(asyncio.create_task(self._periodic(name, interval_ms / 1000, job), name=name))

    async def _periodic(self, name: str, interval: float, job: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(job)
            except KafkaliteError as exc:
                log.warning("%s job failed: %s", name, exc)
            except Exception:
                log.exception("%s job failed", name)

    # -- controlled shutdown ------------------------------------------------------------------
    async def _controlled_shutdown(self) -> None:
        config = self.config
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
                        {"broker_id": config.broker_id, "broker_epoch": self.broker_epoch}, timeout_ms=10_000)
                    remaining = [(item["topic"], item["partition"]) for item in answer.get("remaining_partitions", [])]
            except KafkaliteError as exc:
                log.info("controlled shutdown attempt %d failed: %s", attempt + 1, exc)
                remaining = None
            if remaining == []:
                await self.metadata.wait_for(self._leads_nothing_replicated, 5.0)
                log.info("controlled shutdown succeeded")
                return
            await asyncio.sleep(min(config.controlled_shutdown_retry_backoff_ms / 1000, 1.0))
        log.warning("controlled shutdown gave up after %d attempts", config.controlled_shutdown_max_retries + 1)

    async def controlled_shutdown_request(self, broker_id: int, broker_epoch: int | None) -> list[tuple[str, int]]:
        """Serve another broker's controlled shutdown: only that broker, with its current epoch,
        may ask (Kafka's rule); returns the partitions it still leads."""
        await self.verify_broker_epoch(broker_id, broker_epoch, "a controlled shutdown", authoritative=True)
        assert broker_epoch is not None  # verify_broker_epoch refuses a missing one
        return await self.controller.controlled_shutdown(broker_id, broker_epoch)

    async def verify_broker_epoch(self, broker_id: int, broker_epoch: int | None, what: str,
                                  authoritative: bool = False) -> None:
        """Check that a call only brokers make comes from broker ``broker_id``'s current
        registration: ``broker_epoch`` must be the czxid of ``/brokers/ids/<broker_id>`` (Kafka's
        broker epoch). Missing or negative → INVALID_REQUEST; any other → STALE_BROKER_EPOCH.
        Refusals are logged at WARN.

        The metadata cache answers the common case; a mismatch (the cache may trail a fresh
        registration), and every ``authoritative`` check, reads the registration from ZooKeeper.
        """
        if broker_epoch is None or broker_epoch < 0:
            log.warning("refused %s for broker %d: no broker epoch given", what, broker_id)
            raise InvalidRequestError(f"{what} for broker {broker_id} must carry that broker's epoch "
                                      f"(the czxid of its registration)")
        if not authoritative:
            known = self.metadata.brokers.get(broker_id)
            if known is not None and known.epoch == broker_epoch:
                return
        stat = await self.zookeeper.exists(znodes.broker_path(broker_id)) if broker_id >= 0 else None
        if stat is not None and stat.czxid == broker_epoch:
            return
        current = "not registered" if stat is None else f"registered with epoch {stat.czxid}"
        log.warning("refused %s for broker %d with epoch %d: the broker is %s", what, broker_id, broker_epoch,
                    current)
        raise StaleBrokerEpochError(f"broker {broker_id} epoch {broker_epoch} is stale: the broker is {current}")

    def _leads_nothing_replicated(self) -> bool:
        for partition in self.replica_manager.partitions.values():
            if partition.is_leader and len(partition.replicas) > 1:
                return False
        return True

    # -- services used by the HTTP layer ------------------------------------------------------
    async def cluster_metadata(self, topics: list[str] | None, allow_auto_create: bool) -> protocol.ClusterMetadata:
        if topics:
            created = []
            for topic in topics:
                if topic in self.metadata.topics or topic in self.metadata.topics_being_deleted:
                    continue
                if allow_auto_create and self.config.auto_create_topics_enable and topic not in INTERNAL_TOPICS:
                    try:
                        validate_topic_name(topic)
                        await self.admin.create_topic(NewTopic(topic, self.config.num_partitions,
                                                               min(self.config.default_replication_factor,
                                                                   max(1, len(self.metadata.brokers)))),
                                                      wait_ms=0)
                        created.append(topic)
                    except BrokerResponseError:
                        pass
            if created:
                await self.metadata.wait_for(lambda: all(
                    topic in self.metadata.topics and self.metadata.topics[topic].partitions and all(
                        entry.leader >= 0 for entry in self.metadata.topics[topic].partitions.values())
                    for topic in created), 3.0)
        metadata = self.metadata.cluster_metadata(topics)
        invalid = []
        for topic_metadata in metadata.topics:
            if topic_metadata.error_code == UnknownTopicOrPartitionError.errno:
                try:
                    validate_topic_name(topic_metadata.name)
                except BrokerResponseError as exc:
                    invalid.append((topic_metadata.name, exc.errno))
        if invalid:
            codes = dict(invalid)
            metadata = protocol.ClusterMetadata(metadata.cluster_id, metadata.controller_id, metadata.brokers, [
                protocol.TopicMetadata(item.name, item.partitions, codes.get(item.name, item.error_code),
                                       item.is_internal, item.topic_id) for item in metadata.topics])
        return metadata

    async def create_topics(self, body: dict[str, Any]) -> dict[str, Any]:
        topics = protocol.require_objects(body, "topics")
        timeout_ms = protocol.require(body, "timeout_ms", int, self.config.request_timeout_ms)
        validate_only = protocol.require(body, "validate_only", bool, False)
        answers = []
        for item in topics:
            name = str(item.get("name", ""))
            try:
                new_topic = parse_new_topic(item)
                assignment = await self.admin.create_topic(new_topic, validate_only=validate_only, wait_ms=timeout_ms)
                answers.append({"name": name, "error_code": 0, "num_partitions": len(assignment),
                                "replication_factor": len(next(iter(assignment.values()))),
                                "assignment": {str(key): value for key, value in assignment.items()}})
            except KafkaliteError as exc:
                answers.append({"name": name, **error_entry(exc)})
        return {"topics": answers}

    async def delete_topics(self, body: dict[str, Any]) -> dict[str, Any]:
        topics = protocol.require_list_of(body, "topics", str)
        timeout_ms = protocol.require(body, "timeout_ms", int, self.config.request_timeout_ms)
        answers = []
        for name in topics:
            try:
                await self.admin.delete_topic(name, wait_ms=timeout_ms)
                answers.append({"name": name, "error_code": 0})
            except KafkaliteError as exc:
                answers.append({"name": str(name), **error_entry(exc)})
        return {"topics": answers}

    async def create_partitions(self, body: dict[str, Any]) -> dict[str, Any]:
        timeout_ms = protocol.require(body, "timeout_ms", int, self.config.request_timeout_ms)
        answers = []
        for item in protocol.require_objects(body, "topics"):
            name = str(item.get("name", ""))
            try:
                validate_topic_name(protocol.require(item, "name", str))
                count = protocol.require(item, "count", int)
                new_assignment = protocol.require_list_of(item, "assignment", list, None)
                for replicas in new_assignment or []:
                    protocol.require_list_of({"assignment": replicas}, "assignment", int)
                added = await self.admin.create_partitions(name, count, new_assignment, wait_ms=timeout_ms)
                answers.append({"name": name, "error_code": 0,
                                "assignment": {str(key): value for key, value in added.items()}})
            except KafkaliteError as exc:
                answers.append({"name": name, **error_entry(exc)})
        return {"topics": answers}

    async def describe_configs(self, body: dict[str, Any]) -> dict[str, Any]:
        answers = []
        for item in protocol.require_objects(body, "resources"):
            resource_type = str(item.get("type", ""))
            name = str(item.get("name", ""))
            try:
                if resource_type == "topic":
                    entries = self.admin.describe_topic_configs(name)
                elif resource_type == "broker":
                    try:
                        broker_id = int(name) if name else self.config.broker_id
                    except ValueError:
                        raise InvalidRequestError(f"broker resource names are broker ids, got {name!r}") from None
                    if broker_id != self.config.broker_id:
                        raise InvalidRequestError(f"broker {self.config.broker_id} describes only its own configs; "
                                                  f"ask broker {broker_id}")
                    entries = await self.admin.describe_broker_configs(broker_id)
                else:
                    raise InvalidRequestError(f"resource type must be topic or broker, got {resource_type!r}")
                answers.append({"type": resource_type, "name": name, "error_code": 0, "configs": entries})
            except KafkaliteError as exc:
                answers.append({"type": resource_type, "name": name, "configs": [], **error_entry(exc)})
        return {"resources": answers}

    async def alter_configs(self, body: dict[str, Any]) -> dict[str, Any]:
        validate_only = protocol.require(body, "validate_only", bool, False)
        answers = []
        for item in protocol.require_objects(body, "resources"):
            resource_type = str(item.get("type", ""))
            name = str(item.get("name", ""))
            try:
                set_configs = protocol.require(item, "set", dict, {})
                delete_configs = protocol.require_list_of(item, "delete", str, [])
                if resource_type == "topic":
                    await self.admin.alter_topic_configs(name, {str(k): str(v) for k, v in set_configs.items()},
                                                         [str(k) for k in delete_configs], validate_only)
                elif resource_type == "broker":
                    broker_id = int(name) if name else None
                    await self.admin.alter_broker_configs(broker_id, {str(k): str(v) for k, v in set_configs.items()},
                                                          [str(k) for k in delete_configs], validate_only)
                else:
                    raise InvalidRequestError(f"resource type must be topic or broker, got {resource_type!r}")
                answers.append({"type": resource_type, "name": name, "error_code": 0})
            except (KafkaliteError, ValueError) as exc:
                if isinstance(exc, ValueError):
                    exc = InvalidRequestError(f"broker resource names are broker ids, got {name!r}")
                answers.append({"type": resource_type, "name": name, **error_entry(exc)})
        return {"resources": answers}

    async def elect_leaders(self, body: dict[str, Any]) -> dict[str, Any]:
        election_type = protocol.require(body, "election_type", str, "preferred")
        if election_type != "preferred":
            raise InvalidRequestError("only preferred leader election is supported")
        items = protocol.require_objects(body, "partitions", None)
        partitions = None if items is None else [(protocol.require(item, "topic", str),
                                                  protocol.require(item, "partition", int)) for item in items]
        if not self.controller.active:
            endpoint = self.metadata.endpoint(self.metadata.controller_id)
            if endpoint is None:
                raise NotControllerError("no controller is known right now")
            answer: dict[str, Any] = await self.transport.request_json(endpoint.address, "POST",
                                                                       protocol.ELECT_LEADERS, body)
            return answer
        outcome = await self.controller.elect_preferred(partitions)
        return {"partitions": [{"topic": topic, "partition": number, "result": result}
                               for (topic, number), result in sorted(outcome.items())]}

    async def produce_records(self, topic: str, records: list[dict[str, Any]], acks: int) -> list[dict[str, Any]]:
        """The JSON surface: partition records like the default partitioner, then produce."""
        validate_topic_name(topic)
        metadata = await self.cluster_metadata([topic], True)
        topic_metadata = metadata.topics[0]
        if topic_metadata.error_code:
            raise protocol.error_for(topic_metadata.error_code, f"topic {topic}")
        count = len(topic_metadata.partitions)
        if count == 0:
            raise LeaderNotAvailableError(f"topic {topic} has no partitions yet")
        by_partition: dict[int, list[int]] = {}
        round_robin = 0
        for index, record in enumerate(records):
            partition = record["partition"]
            if partition is None:
                if record["key"] is not None:
                    partition = to_positive(murmur2(record["key"])) % count
                else:
                    partition = round_robin % count
                    round_robin += 1
            if not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(f"topic {topic} has no partition {partition}")
            by_partition.setdefault(partition, []).append(index)
        now = self.clock()
        request = protocol.ProduceRequest(acks, self.config.request_timeout_ms, [
            protocol.ProducePartition(topic, partition, build_batch(
                [records[i]["value"] for i in indexes], keys=[records[i]["key"] for i in indexes],
                timestamps=now, headers=[records[i]["headers"] for i in indexes]))
            for partition, indexes in sorted(by_partition.items())])
        answers: list[dict[str, Any]] = [{} for _ in records]
        for partition_request in request.partitions:
            leader = next(item.leader for item in topic_metadata.partitions
                          if item.partition == partition_request.partition)
            single = protocol.ProduceRequest(acks, request.timeout_ms, [partition_request])
            if leader == self.config.broker_id:
                results = await self.replica_manager.produce(single)
            else:
                endpoint = self.metadata.endpoint(leader)
                if endpoint is None:
                    raise LeaderNotAvailableError(f"{topic}-{partition_request.partition} has no leader")
                payload = await self.transport.request(endpoint.address, "POST", protocol.PRODUCE,
                                                       body=protocol.encode_produce_request(single))
                results = protocol.decode_produce_response(payload) if payload else []
            result = results[0] if results else protocol.ProduceResult(topic, partition_request.partition)
            for position, index in enumerate(by_partition[partition_request.partition]):
                if result.error_code:
                    answers[index] = {"partition": result.partition, "offset": -1, "error_code": result.error_code,
                                      "error": protocol.error_for(result.error_code).message,
                                      "message": result.error_message}
                else:
                    answers[index] = {"partition": result.partition,
                                      "offset": result.base_offset + position if result.base_offset >= 0 else -1,
                                      "error_code": 0}
        return answers

    async def fetch_records(self, topic: str, partition: int, offset: int, max_bytes: int,
                            timeout_ms: int) -> dict[str, Any]:
        validate_topic_name(topic)
        request = protocol.FetchRequest([protocol.FetchPartition(topic, partition, offset, max_bytes)],
                                        max_wait_ms=max(0, timeout_ms), min_bytes=1, max_bytes=max_bytes)
        info = self.metadata.partition(topic, partition)
        if info is None:
            raise UnknownTopicOrPartitionError(f"unknown topic-partition {topic}-{partition}")
        if info.leader == self.config.broker_id:
            results = await self.replica_manager.fetch(request)
        else:
            endpoint = self.metadata.endpoint(info.leader)
            if endpoint is None:
                raise LeaderNotAvailableError(f"{topic}-{partition} has no leader")
            payload = await self.transport.request(endpoint.address, "POST", protocol.FETCH,
                                                   body=protocol.encode_fetch_request(request),
                                                   timeout_ms=timeout_ms + self.config.request_timeout_ms)
            results = protocol.decode_fetch_response(payload)
        result = results[0]
        if result.error_code:
            raise protocol.error_for(result.error_code, result.error_message)
        records = []
        next_offset = offset
        for record in decode_all(bytes(result.records)):
            if record.offset < offset:
                continue
            entry: dict[str, Any] = {"offset": record.offset, "timestamp": record.timestamp,
                                     "partition": partition}
            entry.update(render_payload(record.key, "key"))
            entry.update(render_payload(record.value, "value"))
            entry["headers"] = render_headers(record.headers)
            records.append(entry)
            next_offset = record.offset + 1
        return {"topic": topic, "partition": partition, "records": records, "next_offset": next_offset,
                "high_watermark": result.high_watermark, "log_start_offset": result.log_start_offset}


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
