"""Admin clients: :class:`KafkaAdminClient` (kafka-python's API, blocking) and
:class:`AIOKafkaAdminClient` (asyncio), both over one :class:`AdminCore`.

Any broker serves admin calls (the broker forwards elections to the controller), so a call
goes to a reachable broker, the next one being tried when a broker cannot be reached.

Results are shaped like kafka-python 3's where practical:

* ``create_topics`` / ``delete_topics`` / ``create_partitions`` → ``{"topics": [{"name",
  "error_code", "error_message", ...}]}``;
* ``list_topics`` → names; ``describe_topics`` → ``[{"name", "error_code", "is_internal",
  "topic_id", "partitions": [{"partition_index", "leader_id", "leader_epoch", "replica_nodes",
  "isr_nodes", "offline_replicas", "error_code"}]}]``;
* ``describe_cluster`` → ``{"cluster_id", "controller_id", "brokers": [{"broker_id", "host",
  "port", "rack"}]}``;
* ``describe_configs`` → ``{"topic"|"broker": {name: {config: {"value", "config_source",
  "is_default", "read_only"}}}}``; ``alter_configs`` → ``{"topic"|"broker": {name: "OK"}}``;
* ``list_offsets({tp: timestamp})`` → ``{tp: OffsetAndTimestamp}``; ``elect_leaders`` →
  ``{TopicPartition: result name}``.

Errors: with ``raise_errors=True`` (the default, as in kafka-python) the first per-item error is
raised as the named kafkalite error — TopicAlreadyExistsError, UnknownTopicOrPartitionError,
InvalidPartitionsError, InvalidReplicationFactorError, InvalidConfigurationError... — after the
whole request was applied for the other items; with ``raise_errors=False`` the codes are
returned in the result.

Concurrency: the core lives on one event loop; KafkaAdminClient hops onto its private loop.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterable, Sequence

from kafkalite import protocol
from kafkalite.client._loop import LoopThread
from kafkalite.client.fetcher import list_offsets
from kafkalite.client.metadata import MetadataManager, parse_bootstrap
from kafkalite.client.producer import check_common_options
from kafkalite.client.types import (
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
    OffsetAndTimestamp,
    TopicPartition,
)
from kafkalite.errors import ConfigError, KafkaConnectionError, KafkaliteError, KafkaTimeoutError, NoBrokersAvailable
from kafkalite.transport import AsyncTransport

_KNOWN = {"bootstrap_servers", "client_id", "request_timeout_ms", "retry_backoff_ms", "metadata_max_age_ms",
          "default_timeout_ms"}


class AdminCore:
    """The admin calls as coroutines (see the module docstring). Event-loop only."""

    def __init__(self, options: dict[str, Any]) -> None:
        options = dict(options)
        check_common_options(options, _KNOWN)
        self.bootstrap = parse_bootstrap(options.get("bootstrap_servers", "localhost:9092"))
        self.request_timeout_ms = int(options.get("request_timeout_ms", 30_000))
        self.retry_backoff_ms = int(options.get("retry_backoff_ms", 100))
        self.transport = AsyncTransport(request_timeout_ms=self.request_timeout_ms,
                                        client_id=str(options.get("client_id") or "kafkalite-admin"))
        self.metadata = MetadataManager(self.transport, self.bootstrap, request_timeout_ms=self.request_timeout_ms,
                                        retry_backoff_ms=self.retry_backoff_ms, allow_auto_create_topics=False)

    async def close(self) -> None:
        await self.metadata.close()
        await self.transport.close()

    async def _call(self, method: str, path: str, body: Any = None, timeout_ms: int | None = None) -> Any:
        last: Exception | None = None
        for address in self.metadata._candidates():
            try:
                return await self.transport.request_json(address, method, path, body,
                                                         timeout_ms=(timeout_ms or 0) + self.request_timeout_ms)
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                last = exc
        raise NoBrokersAvailable(f"no broker answered {path} (last error: {last})")

    async def _call_for_resources(self, path: str, key: str, bodies: list[dict[str, Any]],
                                  extra: dict[str, Any]) -> list[dict[str, Any]]:
        """Config calls: broker resources go to that broker (as in Kafka), the rest to any broker;
        the answers come back in the order of ``bodies``."""
        groups: dict[int | None, list[int]] = {}
        for index, body in enumerate(bodies):
            target = None
            if body["type"] == "broker" and body["name"]:
                try:
                    target = int(body["name"])
                except ValueError:
                    raise ConfigError(f"broker resource names are broker ids, got {body['name']!r}") from None
            groups.setdefault(target, []).append(index)
        answers: list[dict[str, Any]] = [{} for _ in bodies]
        for target, indexes in groups.items():
            payload = {key: [bodies[index] for index in indexes], **extra}
            if target is None:
                answer = await self._call("POST", path, payload)
            else:
                view = self.metadata.view
                if view.address_of(target) is None:
                    view = await self.metadata.refresh([], allow_auto_create=False)
                address = view.address_of(target)
                if address is None:
                    raise protocol.error_for(8, f"broker {target} is not in the cluster")
                answer = await self.transport.request_json(address, "POST", path, payload,
                                                           timeout_ms=self.request_timeout_ms)
            for index, item in zip(indexes, answer.get(key, [])):
                answers[index] = item
        return answers

    @staticmethod
    def _raise_first(items: Iterable[dict[str, Any]], raise_errors: bool) -> None:
        if not raise_errors:
            return
        for item in items:
            code = int(item.get("error_code", 0))
            if code:
                raise protocol.error_for(code, f"{item.get('name', '')}: {item.get('message', '')}".strip(": "))

    # -- topics -------------------------------------------------------------------------------
    async def create_topics(self, new_topics: Any, timeout_ms: int | None, validate_only: bool,
                            raise_errors: bool) -> dict[str, Any]:
        topics = []
        if isinstance(new_topics, dict):
            new_topics = [NewTopic(name, data.get("num_partitions", -1), data.get("replication_factor", -1),
                                   data.get("assignments"), data.get("configs")) for name, data in new_topics.items()]
        for topic in new_topics:
            if isinstance(topic, str):
                topic = NewTopic(topic)
            if not isinstance(topic, NewTopic):
                raise ConfigError(f"expected NewTopic or a topic name, got {topic!r}")
            entry: dict[str, Any] = {"name": topic.name, "num_partitions": topic.num_partitions,
                                     "replication_factor": topic.replication_factor,
                                     "configs": {str(k): str(v) for k, v in topic.topic_configs.items()}}
            if topic.replica_assignments:
                entry["replica_assignment"] = {str(k): list(v) for k, v in topic.replica_assignments.items()}
            topics.append(entry)
        timeout = timeout_ms if timeout_ms is not None else self.request_timeout_ms
        answer = await self._call("POST", protocol.CREATE_TOPICS, {"topics": topics, "timeout_ms": timeout,
                                                                   "validate_only": validate_only}, timeout)
        items = [{**item, "error_message": item.pop("message", None)} for item in answer.get("topics", [])]
        self._raise_first(({**item, "message": item["error_message"]} for item in items), raise_errors)
        self.metadata.request_update()
        return {"topics": items}

    async def delete_topics(self, topics: Sequence[str], timeout_ms: int | None, raise_errors: bool) -> dict[str, Any]:
        timeout = timeout_ms if timeout_ms is not None else self.request_timeout_ms
        answer = await self._call("POST", protocol.DELETE_TOPICS, {"topics": list(topics), "timeout_ms": timeout},
                                  timeout)
        items = [{**item, "error_message": item.pop("message", None)} for item in answer.get("topics", [])]
        self._raise_first(({**item, "message": item["error_message"]} for item in items), raise_errors)
        return {"topics": items}

    async def create_partitions(self, topic_partitions: dict[str, NewPartitions], timeout_ms: int | None,
                                validate_only: bool, raise_errors: bool) -> dict[str, Any]:
        if validate_only:
            raise ConfigError("validate_only is not supported for create_partitions")
        timeout = timeout_ms if timeout_ms is not None else self.request_timeout_ms
        topics = []
        for name, request in topic_partitions.items():
            if not isinstance(request, NewPartitions):
                raise ConfigError(f"expected NewPartitions for {name!r}, got {request!r}")
            entry: dict[str, Any] = {"name": name, "count": request.total_count}
            if request.new_assignments is not None:
                entry["assignment"] = request.new_assignments
            topics.append(entry)
        answer = await self._call("POST", protocol.CREATE_PARTITIONS, {"topics": topics, "timeout_ms": timeout}, timeout)
        items = [{**item, "error_message": item.pop("message", None)} for item in answer.get("topics", [])]
        self._raise_first(({**item, "message": item["error_message"]} for item in items), raise_errors)
        self.metadata.request_update()
        return {"topics": items}

    async def describe(self, topics: Sequence[str] | None) -> protocol.ClusterMetadata:
        last: Exception | None = None
        for address in self.metadata._candidates():
            try:
                answer = await self.transport.request_json(address, "POST", protocol.METADATA,
                                                           {"topics": list(topics) if topics is not None else None,
                                                            "allow_auto_topic_creation": False})
                return protocol.ClusterMetadata.from_json(answer)
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                last = exc
        raise NoBrokersAvailable(f"no broker answered a metadata request (last error: {last})")

    async def list_topics(self) -> list[str]:
        metadata = await self.describe(None)
        return sorted(topic.name for topic in metadata.topics)

    async def describe_topics(self, topics: Sequence[str] | None) -> list[dict[str, Any]]:
        metadata = await self.describe(topics)
        return [{"name": topic.name, "error_code": topic.error_code, "is_internal": topic.is_internal,
                 "topic_id": topic.topic_id,
                 "partitions": [{"partition_index": item.partition, "leader_id": item.leader,
                                 "leader_epoch": item.leader_epoch, "replica_nodes": item.replicas,
                                 "isr_nodes": item.isr, "offline_replicas": item.offline_replicas,
                                 "error_code": item.error_code}
                                for item in sorted(topic.partitions, key=lambda entry: entry.partition)]}
                for topic in metadata.topics]

    async def describe_cluster(self) -> dict[str, Any]:
        answer = await self._call("GET", protocol.DESCRIBE_CLUSTER)
        return {"cluster_id": answer.get("cluster_id"), "controller_id": answer.get("controller_id"),
                "brokers": [{"broker_id": item["id"], "host": item["host"], "port": item["port"],
                             "rack": item.get("rack")} for item in answer.get("brokers", [])]}

    # -- configs ------------------------------------------------------------------------------
    @staticmethod
    def _resource_body(resource: ConfigResource) -> dict[str, Any]:
        if resource.resource_type not in (ConfigResourceType.TOPIC, ConfigResourceType.BROKER):
            raise ConfigError(f"config resources are topics or brokers, got {resource.resource_type!r}")
        return {"type": resource.resource_type.name.lower(), "name": resource.name}

    async def describe_configs(self, resources: Sequence[ConfigResource], raise_errors: bool) -> dict[str, Any]:
        bodies = [self._resource_body(resource) for resource in resources]
        items = await self._call_for_resources(protocol.DESCRIBE_CONFIGS, "resources", bodies, {})
        result: dict[str, dict[str, Any]] = {}
        self._raise_first(items, raise_errors)
        for resource, item in zip(resources, items):
            wanted = None
            if resource.configs is not None:
                wanted = set(resource.configs)
            configs = {entry["name"]: {"value": entry.get("value"), "config_source": entry.get("source"),
                                       "is_default": entry.get("is_default", False),
                                       "read_only": entry.get("read_only", False)}
                       for entry in item.get("configs", []) if wanted is None or entry["name"] in wanted}
            if item.get("error_code"):
                configs = {"error_code": item["error_code"], "error_message": item.get("message")}  # type: ignore[dict-item]
            result.setdefault(str(item.get("type")), {})[str(item.get("name"))] = configs
        return result

    async def alter_configs(self, resources: Sequence[ConfigResource], validate_only: bool, incremental: bool,
                            raise_errors: bool) -> dict[str, Any]:
        bodies = []
        for resource in resources:
            entry = self._resource_body(resource)
            configs = resource.configs or {}
            if not isinstance(configs, dict):
                raise ConfigError("alter_configs needs ConfigResource.configs as a dict of name → value")
            set_configs: dict[str, str] = {}
            deletes: list[str] = []
            for name, value in configs.items():
                operation = None
                if isinstance(value, tuple) and len(value) == 2:
                    operation, value = value
                    operation = str(getattr(operation, "name", operation)).upper()
                if operation in ("DELETE",) or (operation is None and value is None):
                    deletes.append(name)
                elif operation in (None, "SET"):
                    set_configs[name] = str(value).lower() if isinstance(value, bool) else str(value)
                else:
                    raise ConfigError(f"config operation {operation!r} is not supported (SET and DELETE are)")
            if not incremental and resource.resource_type == ConfigResourceType.TOPIC:
                # AlterConfigs replaces every override: delete all the others in the same
                # request, so the broker applies it atomically against what ZooKeeper holds
                from kafkalite.config import topic_config_names

                deletes.extend(name for name in topic_config_names() if name not in set_configs and name not in deletes)
            elif not incremental:
                current = await self.describe_configs([ConfigResource(resource.resource_type, resource.name)], True)
                existing = current[entry["type"]][resource.name]
                dynamic = {name for name, data in existing.items()
                           if str(data.get("config_source", "")).startswith("DYNAMIC_")}
                deletes.extend(sorted(dynamic - set(set_configs) - set(deletes)))
            bodies.append({**entry, "set": set_configs, "delete": deletes})
        items = await self._call_for_resources(protocol.ALTER_CONFIGS, "resources", bodies,
                                               {"validate_only": validate_only})
        self._raise_first(items, raise_errors)
        result: dict[str, dict[str, Any]] = {}
        for item in items:
            code = int(item.get("error_code", 0))
            outcome = "OK" if not code else str(protocol.error_for(code, str(item.get("message", ""))))
            result.setdefault(str(item.get("type")), {})[str(item.get("name"))] = outcome
        return result

    # -- partitions and offsets ---------------------------------------------------------------
    async def elect_leaders(self, partitions: Sequence[Any] | None, raise_errors: bool) -> dict[TopicPartition, str]:
        body: dict[str, Any] = {"election_type": "preferred"}
        if partitions is not None:
            body["partitions"] = [{"topic": tp[0], "partition": tp[1]} for tp in partitions]
        answer = await self._call("POST", protocol.ELECT_LEADERS, body)
        result = {TopicPartition(item["topic"], int(item["partition"])): str(item["result"])
                  for item in answer.get("partitions", [])}
        if raise_errors:
            for tp, outcome in result.items():
                if outcome not in ("NONE", "ELECTION_NOT_NEEDED"):
                    from kafkalite import errors

                    cls = errors.for_name(outcome)
                    raise cls(f"preferred election for {tp.topic}-{tp.partition}: {outcome}")
        self.metadata.request_update()
        return result

    async def list_offsets(self, timestamps: dict[Any, int], timeout_ms: int | None,
                           isolation_level: int) -> dict[TopicPartition, OffsetAndTimestamp]:
        query = {TopicPartition(*tp): int(timestamp) for tp, timestamp in timestamps.items()}
        answers = await list_offsets(self.metadata, self.transport, query, isolation_level=isolation_level,
                                     timeout_ms=timeout_ms if timeout_ms is not None else self.request_timeout_ms,
                                     retry_backoff_ms=self.retry_backoff_ms)
        return {tp: OffsetAndTimestamp(offset, timestamp, epoch) for tp, (offset, timestamp, epoch) in answers.items()}


_ISOLATION = {"read_uncommitted": 0, "read_committed": 1, 0: 0, 1: 1}


class KafkaAdminClient:
    """kafka-python's KafkaAdminClient on kafkalite (see the module docstring)."""

    def __init__(self, **options: Any) -> None:
        self.config = dict(options)
        self._loop = LoopThread("kafkalite-admin")
        try:
            self._core = AdminCore(options)
        except BaseException:
            self._loop.stop()
            raise
        self._finalizer = weakref.finalize(self, _stop_loop, self._loop)
        self._closed = False

    def create_topics(self, new_topics: Any, timeout_ms: int | None = None, validate_only: bool = False,
                      raise_errors: bool = True) -> dict[str, Any]:
        return self._loop.run(self._core.create_topics(new_topics, timeout_ms, validate_only, raise_errors))

    def delete_topics(self, topics: Sequence[str], timeout_ms: int | None = None,
                      raise_errors: bool = True) -> dict[str, Any]:
        return self._loop.run(self._core.delete_topics(topics, timeout_ms, raise_errors))

    def create_partitions(self, topic_partitions: dict[str, NewPartitions], timeout_ms: int | None = None,
                          validate_only: bool = False, raise_errors: bool = True) -> dict[str, Any]:
        return self._loop.run(self._core.create_partitions(topic_partitions, timeout_ms, validate_only, raise_errors))

    def list_topics(self) -> list[str]:
        return self._loop.run(self._core.list_topics())

    def describe_topics(self, topics: Sequence[str] | None = None) -> list[dict[str, Any]]:
        return self._loop.run(self._core.describe_topics(topics))

    def describe_cluster(self) -> dict[str, Any]:
        return self._loop.run(self._core.describe_cluster())

    def describe_configs(self, config_resources: Sequence[ConfigResource], raise_errors: bool = True) -> dict[str, Any]:
        return self._loop.run(self._core.describe_configs(config_resources, raise_errors))

    def alter_configs(self, config_resources: Sequence[ConfigResource], validate_only: bool = False,
                      raise_errors: bool = True) -> dict[str, Any]:
        """Set the given configs; dynamic overrides not named are removed (AlterConfigs semantics)."""
        return self._loop.run(self._core.alter_configs(config_resources, validate_only, False, raise_errors))

    def incremental_alter_configs(self, config_resources: Sequence[ConfigResource], validate_only: bool = False,
                                  raise_errors: bool = True) -> dict[str, Any]:
        """Set or delete (value None, or ("DELETE", None)) only the named configs."""
        return self._loop.run(self._core.alter_configs(config_resources, validate_only, True, raise_errors))

    def elect_leaders(self, election_type: Any = "preferred", topic_partitions: Sequence[Any] | None = None,
                      raise_errors: bool = True) -> dict[TopicPartition, str]:
        if str(getattr(election_type, "name", election_type)).lower() not in ("preferred", "0"):
            raise ConfigError("only preferred leader election is supported")
        return self._loop.run(self._core.elect_leaders(topic_partitions, raise_errors))

    perform_leader_election = elect_leaders

    def list_offsets(self, topic_partition_timestamps: dict[TopicPartition, int], timeout_ms: int | None = None,
                     isolation_level: str | int = "read_uncommitted") -> dict[TopicPartition, OffsetAndTimestamp]:
        """Offsets for timestamps, or for -2 (earliest), -1 (latest), -3 (max timestamp)."""
        return self._loop.run(self._core.list_offsets(topic_partition_timestamps, timeout_ms,
                                                      _ISOLATION[isolation_level]))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        answers = self.list_offsets({tp: protocol.LATEST_TIMESTAMP for tp in partitions})
        return {tp: answer.offset for tp, answer in answers.items()}

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        answers = self.list_offsets({tp: protocol.EARLIEST_TIMESTAMP for tp in partitions})
        return {tp: answer.offset for tp, answer in answers.items()}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._core.close())
        finally:
            self._finalizer()

    def __enter__(self) -> "KafkaAdminClient":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _stop_loop(loop: LoopThread) -> None:
    loop.stop()


class AIOKafkaAdminClient:
    """The same admin calls as coroutines (for code that already runs an event loop)."""

    def __init__(self, **options: Any) -> None:
        self._core = AdminCore(options)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        await self._core.close()

    async def create_topics(self, new_topics: Any, timeout_ms: int | None = None, validate_only: bool = False,
                            raise_errors: bool = True) -> dict[str, Any]:
        return await self._core.create_topics(new_topics, timeout_ms, validate_only, raise_errors)

    async def delete_topics(self, topics: Sequence[str], timeout_ms: int | None = None,
                            raise_errors: bool = True) -> dict[str, Any]:
        return await self._core.delete_topics(topics, timeout_ms, raise_errors)

    async def create_partitions(self, topic_partitions: dict[str, NewPartitions], timeout_ms: int | None = None,
                                validate_only: bool = False, raise_errors: bool = True) -> dict[str, Any]:
        return await self._core.create_partitions(topic_partitions, timeout_ms, validate_only, raise_errors)

    async def list_topics(self) -> list[str]:
        return await self._core.list_topics()

    async def describe_topics(self, topics: Sequence[str] | None = None) -> list[dict[str, Any]]:
        return await self._core.describe_topics(topics)

    async def describe_cluster(self) -> dict[str, Any]:
        return await self._core.describe_cluster()

    async def describe_configs(self, config_resources: Sequence[ConfigResource],
                               raise_errors: bool = True) -> dict[str, Any]:
        return await self._core.describe_configs(config_resources, raise_errors)

    async def alter_configs(self, config_resources: Sequence[ConfigResource], validate_only: bool = False,
                            raise_errors: bool = True) -> dict[str, Any]:
        return await self._core.alter_configs(config_resources, validate_only, False, raise_errors)

    async def incremental_alter_configs(self, config_resources: Sequence[ConfigResource], validate_only: bool = False,
                                        raise_errors: bool = True) -> dict[str, Any]:
        return await self._core.alter_configs(config_resources, validate_only, True, raise_errors)

    async def elect_leaders(self, election_type: Any = "preferred", topic_partitions: Sequence[Any] | None = None,
                            raise_errors: bool = True) -> dict[TopicPartition, str]:
        return await self._core.elect_leaders(topic_partitions, raise_errors)

    async def list_offsets(self, topic_partition_timestamps: dict[TopicPartition, int], timeout_ms: int | None = None,
                           isolation_level: str | int = "read_uncommitted") -> dict[TopicPartition, OffsetAndTimestamp]:
        return await self._core.list_offsets(topic_partition_timestamps, timeout_ms, _ISOLATION[isolation_level])


__all__ = ["AIOKafkaAdminClient", "AdminCore", "KafkaAdminClient", "KafkaliteError"]
