"""The admin clients' shared core: :class:`AdminCore`, every admin call as a coroutine, and the
values the group calls answer with (:class:`GroupInformation`, :class:`MemberInformation`,
:class:`PartitionLag`).

Topic, partition, config, offset and election calls go to any reachable broker (the next one is
tried when a broker cannot be reached; broker configs go to that broker); group calls go to the
group's coordinator through a :class:`~kafkalite.client.coordinator_link.CoordinatorLink`,
ListGroups to every broker. The result shapes and the error rules are documented with the front
ends, :mod:`kafkalite.client.admin`.

Concurrency: event-loop only — the core's loop (a KafkaAdminClient's private loop thread, the
caller's loop for AIOKafkaAdminClient), which owns its transport and metadata manager.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from kafkalite import protocol
from kafkalite.client.assignors import Assignment, Subscription
from kafkalite.client.coordinator_link import CoordinatorLink, fetch_offsets, offsets_body
from kafkalite.client.fetcher import list_offsets
from kafkalite.client.group_assignment import PROTOCOL_TYPE, decode_assignment, decode_subscription
from kafkalite.client.metadata import MetadataManager, parse_bootstrap
from kafkalite.client.options import check_common_options
from kafkalite.client.sasl_options import take_sasl_options
from kafkalite.client.types import (
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordsToDelete,
    TopicPartition,
)
from kafkalite.errors import (
    BrokerResponseError,
    ConfigError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    KafkaConnectionError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    NoBrokersAvailable,
    NotCoordinatorError,
    NotLeaderForPartitionError,
    UnknownTopicOrPartitionError,
)
from kafkalite.transport import AsyncTransport


class MemberInformation(NamedTuple):
    """One member of a described group (kafka-python's fields, then the instance id)."""

    member_id: str
    client_id: str
    client_host: str
    member_metadata: Subscription | bytes | None
    member_assignment: Assignment | bytes | None
    group_instance_id: str | None = None

    @property
    def partitions(self) -> list[TopicPartition]:
        """The member's assigned partitions (consumer groups), sorted."""
        if isinstance(self.member_assignment, Assignment):
            return [TopicPartition(topic, partition) for topic, partition in self.member_assignment.partitions]
        return []


class GroupInformation(NamedTuple):
    """A described group (kafka-python's fields, then generation, leader and coordinator)."""

    error_code: int
    group: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberInformation]
    authorized_operations: Any = None
    generation_id: int = -1
    leader: str = ""
    coordinator: protocol.BrokerEndpoint | None = None

    @property
    def group_id(self) -> str:
        return self.group


class PartitionLag(NamedTuple):
    """A group's progress on one partition: committed offset (None: none), log end, lag."""

    committed: int | None
    log_end_offset: int
    lag: int | None


_KNOWN = {"bootstrap_servers", "client_id", "request_timeout_ms", "retry_backoff_ms", "metadata_max_age_ms",
          "default_timeout_ms"}


class AdminCore:
    """The admin calls as coroutines (see the module docstring). Event-loop only."""

    def __init__(self, options: dict[str, Any]) -> None:
        options = dict(options)
        sasl_credentials = take_sasl_options(options)
        ssl_context = check_common_options(options, _KNOWN)
        self.bootstrap = parse_bootstrap(options.get("bootstrap_servers", "localhost:9092"))
        self.request_timeout_ms = int(options.get("request_timeout_ms", 30_000))
        self.retry_backoff_ms = int(options.get("retry_backoff_ms", 100))
        self.transport = AsyncTransport(request_timeout_ms=self.request_timeout_ms,
                                        client_id=str(options.get("client_id") or "kafkalite-admin"),
                                        ssl_context=ssl_context)
        if sasl_credentials is not None:
            self.transport.set_credentials(*sasl_credentials)
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
        answer = await self._call("POST", protocol.CREATE_PARTITIONS, {"topics": topics, "timeout_ms": timeout},
                                  timeout)
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

    # -- users/clients config entities -------------------------------------------------------
    async def describe_entity_configs(self) -> list[dict[str, Any]]:
        """Every users/clients entity with configs (credentials as ``iterations=<n>`` only)."""
        answer = await self._call("POST", protocol.DESCRIBE_ENTITY_CONFIGS, {})
        return list(answer.get("entities", []))

    async def alter_entity_configs(self, user: str | None, client_id: str | None, set_configs: dict[str, str],
                                   delete_configs: Sequence[str], validate_only: bool) -> dict[str, str]:
        """Set and delete configs of one users/clients entity; the entity's configs afterwards."""
        answer = await self._call("POST", protocol.ALTER_ENTITY_CONFIGS, {
            "user": user, "client_id": client_id, "set": dict(set_configs), "delete": list(delete_configs),
            "validate_only": validate_only})
        return dict(answer.get("configs", {}))

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
            configs: dict[str, Any] = {
                entry["name"]: {"value": entry.get("value"), "config_source": entry.get("source"),
                                "is_default": entry.get("is_default", False),
                                "read_only": entry.get("read_only", False)}
                for entry in item.get("configs", []) if wanted is None or entry["name"] in wanted}
            if item.get("error_code"):
                configs = {"error_code": item["error_code"], "error_message": item.get("message")}
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

    async def alter_partition_reassignments(self, targets: dict[tuple[str, int], list[int]]
                                            ) -> dict[tuple[str, int], BrokerResponseError | None]:
        body = {"partitions": [{"topic": topic, "partition": number, "replicas": list(replicas)}
                               for (topic, number), replicas in targets.items()]}
        answer = await self._call("POST", protocol.ALTER_PARTITION_REASSIGNMENTS, body)
        result: dict[tuple[str, int], BrokerResponseError | None] = {}
        for item in answer.get("partitions", []):
            code = int(item.get("error_code", 0))
            result[(str(item["topic"]), int(item["partition"]))] = \
                protocol.error_for(code, str(item.get("message") or "")) if code else None
        self.metadata.request_update()
        return result

    async def list_partition_reassignments(self) -> list[dict[str, Any]]:
        answer = await self._call("POST", protocol.LIST_PARTITION_REASSIGNMENTS, {})
        return list(answer.get("partitions", []))

    async def list_offsets(self, timestamps: dict[Any, int], timeout_ms: int | None,
                           isolation_level: int) -> dict[TopicPartition, OffsetAndTimestamp]:
        query = {TopicPartition(*tp): int(timestamp) for tp, timestamp in timestamps.items()}
        answers = await list_offsets(self.metadata, self.transport, query, isolation_level=isolation_level,
                                     timeout_ms=timeout_ms if timeout_ms is not None else self.request_timeout_ms,
                                     retry_backoff_ms=self.retry_backoff_ms)
        return {tp: OffsetAndTimestamp(offset, timestamp, epoch) for tp, (offset, timestamp, epoch) in answers.items()}

    async def delete_records(self, records_to_delete: Mapping[Any, Any], timeout_ms: int | None,
                             partition_leader_id: int | None,
                             raise_errors: bool) -> dict[TopicPartition, dict[str, Any]]:
        """DeleteRecords: each partition to its leader (or all to ``partition_leader_id``), asked
        again after a metadata refresh while a partition's leader moves, until ``timeout_ms``."""
        wanted: dict[TopicPartition, int] = {}
        for tp, value in records_to_delete.items():
            offset = value.before_offset if isinstance(value, RecordsToDelete) else value
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ConfigError(f"records to delete of {tp} must be an offset or RecordsToDelete, got {value!r}")
            wanted[TopicPartition(*tp)] = offset
        timeout = timeout_ms if timeout_ms is not None else self.request_timeout_ms
        deadline = time.monotonic() + timeout / 1000
        results: dict[TopicPartition, dict[str, Any]] = {}
        pending = dict(wanted)
        self.metadata.add_topics({tp.topic for tp in pending})
        while pending:
            view = await self.metadata.refresh()
            by_address: dict[str, list[TopicPartition]] = {}
            leaderless: set[TopicPartition] = set()
            for tp in pending:
                leader = partition_leader_id if partition_leader_id is not None else view.leader(tp)
                address = view.address_of(leader) if leader >= 0 else None
                if address is None:
                    known = view.partitions.get(tp.topic)
                    error: BrokerResponseError = LeaderNotAvailableError(f"{tp.topic}-{tp.partition} has no leader")
                    if known is None or tp.partition >= len(known):
                        error = UnknownTopicOrPartitionError(f"unknown partition {tp.topic}-{tp.partition}")
                    else:
                        leaderless.add(tp)  # an election is under way: ask again
                    results[tp] = self._deleted(tp, -1, error)
                    continue
                by_address.setdefault(address, []).append(tp)
            asked = await asyncio.gather(*(self._delete_records_on(address, {tp: pending[tp] for tp in tps}, deadline,
                                                                   results) for address, tps in by_address.items()))
            retry = leaderless.union(*asked)
            pending = {tp: offset for tp, offset in pending.items()
                       if tp in retry and partition_leader_id is None and time.monotonic() < deadline}
            if pending:
                await asyncio.sleep(self.retry_backoff_ms / 1000)
        if raise_errors:
            failed = [(tp, result["error"]) for tp, result in results.items() if result["error"] is not None]
            if failed:
                first = failed[0][1]
                raise type(first)("records not deleted: " + ", ".join(
                    f"{tp.topic}-{tp.partition}: {error.message} ({error})" for tp, error in failed))
        return results

    async def _delete_records_on(self, address: str, offsets: dict[TopicPartition, int], deadline: float,
                                 results: dict[TopicPartition, dict[str, Any]]) -> set[TopicPartition]:
        """One DeleteRecords request to the broker at ``address``; records each partition's
        result and returns the partitions to ask again (the leader moved or was unreachable)."""
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        body = {"timeout_ms": remaining_ms, "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "offset": offset} for tp, offset in offsets.items()]}
        try:
            answer = await self.transport.request_json(address, "POST", protocol.DELETE_RECORDS, body,
                                                       timeout_ms=remaining_ms + self.request_timeout_ms)
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            for tp in offsets:
                results[tp] = self._deleted(tp, -1, LeaderNotAvailableError(f"broker {address}: {exc}"))
            return set(offsets)
        retry = set()
        for item in answer.get("partitions", []):
            tp = TopicPartition(str(item["topic"]), int(item["partition"]))
            code = int(item.get("error_code", 0))
            problem = protocol.error_for(code, str(item.get("message") or "")) if code else None
            results[tp] = self._deleted(tp, int(item.get("low_watermark", -1)), problem)
            if isinstance(problem, (NotLeaderForPartitionError, LeaderNotAvailableError)):
                retry.add(tp)
        return retry

    @staticmethod
    def _deleted(tp: TopicPartition, low_watermark: int, error: BrokerResponseError | None) -> dict[str, Any]:
        """One partition's DeleteRecords result, in kafka-python's shape (plus the error itself)."""
        return {"partition_index": tp.partition, "low_watermark": low_watermark,
                "error_code": error.errno if error is not None else 0,
                "error_message": str(error) if error is not None else None, "error": error}

    # -- consumer groups ----------------------------------------------------------------------
    def _link(self, group_id: str) -> CoordinatorLink:
        if not isinstance(group_id, str) or not group_id:
            raise ConfigError(f"a group id must be a non-empty string, got {group_id!r}")
        return CoordinatorLink(self.metadata, self.transport, group_id, request_timeout_ms=self.request_timeout_ms,
                               retry_backoff_ms=self.retry_backoff_ms)

    def _deadline(self) -> float:
        return time.monotonic() + self.request_timeout_ms / 1000

    async def _coordinator_retry(self, link: CoordinatorLink, error: BaseException, deadline: float) -> bool:
        """True, after the retry backoff, when ``error`` says the group's coordinator moved, is
        not available or is still loading and time is left: the caller asks again (a moved
        coordinator is looked up anew)."""
        if not isinstance(error, (NotCoordinatorError, CoordinatorNotAvailableError, CoordinatorLoadInProgressError)) \
                or time.monotonic() >= deadline:
            return False
        if not isinstance(error, CoordinatorLoadInProgressError):
            link.forget()
        await asyncio.sleep(self.retry_backoff_ms / 1000)
        return True

    async def list_consumer_groups(self, broker_ids: Sequence[int] | None,
                                   states: Sequence[str] | None) -> list[tuple[str, str]]:
        cluster = await self.describe_cluster()
        brokers = {item["broker_id"]: f"{item['host']}:{item['port']}" for item in cluster["brokers"]}
        if broker_ids is not None:
            missing = set(broker_ids) - set(brokers)
            if missing:
                raise KafkaConnectionError(f"brokers {sorted(missing)} are not in the cluster")
            brokers = {broker_id: brokers[broker_id] for broker_id in broker_ids}
        body: dict[str, Any] = {"states": list(states)} if states else {}
        deadline = self._deadline()

        async def ask(broker_id: int, address: str) -> list[tuple[str, str]]:
            while True:
                try:
                    answer = await self.transport.request_json(address, "POST", protocol.LIST_GROUPS, body,
                                                               timeout_ms=self.request_timeout_ms)
                except (KafkaConnectionError, KafkaTimeoutError) as exc:
                    raise KafkaConnectionError(f"broker {broker_id} ({address}) did not list its groups: {exc}") \
                        from exc
                if answer.get("error_code"):
                    raise protocol.error_for(int(answer["error_code"]), str(answer.get("message", "")))
                if answer.get("loading") and time.monotonic() < deadline:
                    await asyncio.sleep(self.retry_backoff_ms / 1000)  # still loading some groups: ask again
                    continue
                return [(str(item["group_id"]), str(item.get("protocol_type") or ""))
                        for item in answer.get("groups", [])]

        answers = await asyncio.gather(*(ask(broker_id, address) for broker_id, address in sorted(brokers.items())))
        return sorted({listing for listed in answers for listing in listed})

    async def describe_consumer_groups(self, group_ids: Sequence[str]) -> list[GroupInformation]:
        if isinstance(group_ids, str):
            raise ConfigError("describe_consumer_groups takes a list of group ids")
        return list(await asyncio.gather(*(self._describe_group(group_id) for group_id in group_ids)))

    async def _describe_group(self, group_id: str) -> GroupInformation:
        link = self._link(group_id)
        deadline = self._deadline()
        while True:
            answer = await link.call(protocol.DESCRIBE_GROUPS, {"groups": [group_id]}, deadline=deadline)
            entry = (answer.get("groups") or [{}])[0]
            code = int(entry.get("error_code", 0))
            if code:
                error = protocol.error_for(code, str(entry.get("message", "")))
                if await self._coordinator_retry(link, error, deadline):
                    continue
                return GroupInformation(code, group_id, "", "", "", [], None, -1, "", None)
            consumer = entry.get("protocol_type") in (PROTOCOL_TYPE, "")
            members = []
            for member in entry.get("members", []):
                metadata: Subscription | bytes | None = None
                assignment: Assignment | bytes | None = None
                if consumer:
                    metadata = decode_subscription(member.get("metadata"))
                    assignment = decode_assignment(member.get("assignment"))
                members.append(MemberInformation(str(member.get("member_id", "")), str(member.get("client_id", "")),
                                                 str(member.get("client_host", "")), metadata, assignment,
                                                 member.get("group_instance_id")))
            coordinator = None
            if link.address is not None:
                host, _, port = link.address.rpartition(":")
                coordinator = protocol.BrokerEndpoint(link.node_id, host, int(port))
            return GroupInformation(0, group_id, str(entry.get("state", "")), str(entry.get("protocol_type", "")),
                                    str(entry.get("protocol", "")), members, None,
                                    int(entry.get("generation_id", -1)), str(entry.get("leader", "")), coordinator)

    async def list_consumer_group_offsets(self, group_id: str, partitions: Sequence[Any] | None
                                          ) -> dict[TopicPartition, OffsetAndMetadata]:
        wanted = [TopicPartition(*tp) for tp in partitions] if partitions is not None else None
        return await fetch_offsets(self._link(group_id), wanted, self._deadline())

    async def alter_consumer_group_offsets(self, group_id: str, offsets: dict[Any, Any]) -> None:
        """Commit ``offsets`` for a group without active members (as the reset tool does)."""
        chosen: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, value in offsets.items():
            entry = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
            chosen[TopicPartition(*tp)] = entry
        if not chosen:
            return
        link = self._link(group_id)
        answer = await link.call(protocol.OFFSET_COMMIT, {"generation_id": -1, "member_id": "",
                                                          "topics": offsets_body(chosen)}, deadline=self._deadline())
        for topic in answer.get("topics", []):
            for entry in topic.get("partitions", []):
                if entry.get("error_code"):
                    raise protocol.error_for(int(entry["error_code"]), f"{topic.get('name')}-{entry.get('partition')}: "
                                                                       f"{entry.get('message', '')}")

    async def delete_consumer_groups(self, group_ids: Sequence[str]) -> list[tuple[str, BrokerResponseError | None]]:
        if isinstance(group_ids, str):
            raise ConfigError("delete_consumer_groups takes a list of group ids")

        async def delete(group_id: str) -> tuple[str, BrokerResponseError | None]:
            link = self._link(group_id)
            deadline = self._deadline()
            while True:
                answer = await link.call(protocol.DELETE_GROUPS, {"groups": [group_id]}, deadline=deadline)
                entry = (answer.get("groups") or [{}])[0]
                code = int(entry.get("error_code", 0))
                if not code:
                    return group_id, None
                error = protocol.error_for(code, str(entry.get("message", "")))
                if await self._coordinator_retry(link, error, deadline):
                    continue
                return group_id, error

        return list(await asyncio.gather(*(delete(group_id) for group_id in group_ids)))

    async def consumer_group_lag(self, group_id: str, partitions: Sequence[Any] | None,
                                 isolation_level: int = 0) -> dict[TopicPartition, PartitionLag]:
        committed = await self.list_consumer_group_offsets(group_id, None)
        wanted = sorted({*(tp for tp, value in committed.items() if value.offset >= 0),
                         *(TopicPartition(*tp) for tp in partitions or [])})
        if not wanted:
            return {}
        # read_committed: the lag up to the last stable offset (what such a consumer can read)
        ends = await self.list_offsets(dict.fromkeys(wanted, protocol.LATEST_TIMESTAMP), None, isolation_level)
        result = {}
        for tp in wanted:
            end = ends[tp].offset
            value = committed.get(tp)
            offset = value.offset if value is not None and value.offset >= 0 else None
            result[tp] = PartitionLag(offset, end, None if offset is None else max(0, end - offset))
        return result
