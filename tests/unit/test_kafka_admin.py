"""The admin APIs over the Kafka protocol, handler by handler.

The handlers call the real :class:`AdminRequests` batch service; under it a small stand-in for
the ZooKeeper-backed :class:`AdminService` records what it is asked to do (the integration tests
run the real one), and the cluster metadata is a dict of topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import uuid
from collections import deque
from types import SimpleNamespace
from typing import Any

from kio.schema.alter_configs.v2 import request as alter_configs_v2
from kio.schema.create_partitions.v3 import request as create_partitions_v3
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.delete_records.v2 import request as delete_records_v2
from kio.schema.delete_topics.v6 import request as delete_topics_v6
from kio.schema.describe_configs.v4 import request as describe_configs_v4
from kio.schema.describe_producers.v0 import request as describe_producers_v0
from kio.schema.elect_leaders.v2 import request as elect_leaders_v2
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1

from kafkalite.broker.admin import NewTopic
from kafkalite.broker.kafka import admin, codec
from kafkalite.broker.kafka.context import KafkaRequestContext
from kafkalite.broker.producer_state import BatchEntry, ProducerEntry
from kafkalite.broker.services import AdminRequests, DeleteRecordsAnswer, DeleteRecordsQuery, ReplicaService
from kafkalite.config import BrokerConfig
from kafkalite.errors import (
    ElectionNotNeededError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidRequestError,
    NotLeaderForPartitionError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

TIMEOUT = datetime.timedelta(seconds=5)
TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


class Admin:
    """Records the admin operations it is asked for; topics live in ``topics``."""

    def __init__(self, topics: dict[str, Any]) -> None:
        self.topics = topics
        self.calls: list[tuple[Any, ...]] = []
        #: topics whose partitions get no leader (wait_for_leaders reports them late)
        self.unled: set[str] = set()
        #: when set, each create waits for it before it writes (a slow ZooKeeper)
        self.gate: asyncio.Event | None = None

    async def wait_for_leaders(self, partitions: dict[str, int], wait_ms: int) -> set[str]:
        self.calls.append(("wait", dict(partitions), wait_ms))
        return self.unled & set(partitions)

    async def wait_for_deletion(self, topics: list[str], wait_ms: int) -> set[str]:
        self.calls.append(("wait deleted", list(topics), wait_ms))
        return set()

    async def create_topic(self, topic: NewTopic, *, validate_only: bool = False, wait_ms: int = 30_000,
                           internal: bool = False) -> dict[int, list[int]]:
        self.calls.append(("create", topic, validate_only, wait_ms))
        if self.gate is not None:
            await self.gate.wait()
        if topic.name in self.topics:
            raise TopicAlreadyExistsError(f"topic '{topic.name}' already exists")
        if not validate_only:
            self.topics[topic.name] = SimpleNamespace(topic_id=TOPIC_ID.hex, configs=topic.configs or {},
                                                      partitions=dict.fromkeys(range(topic.num_partitions)))
        return {number: [1, 2][:topic.replication_factor] for number in range(topic.num_partitions)}

    async def delete_topic(self, topic: str, wait_ms: int = 30_000) -> None:
        self.calls.append(("delete", topic, wait_ms))
        if self.topics.pop(topic, None) is None:
            raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")

    def describe_topic_configs(self, topic: str) -> list[dict[str, Any]]:
        if topic not in self.topics:
            raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
        return [{"name": "retention.ms", "value": "1000", "source": "DYNAMIC_TOPIC_CONFIG", "is_default": False,
                 "read_only": False},
                {"name": "segment.bytes", "value": "1073741824", "source": "DEFAULT_CONFIG", "is_default": True,
                 "read_only": False}]

    async def describe_broker_configs(self, broker_id: int) -> list[dict[str, Any]]:
        return [{"name": "log.dirs", "value": "/data", "source": "STATIC_BROKER_CONFIG", "read_only": True}]

    async def alter_topic_configs(self, topic: str, set_configs: dict[str, str], delete_configs: list[str],
                                  validate_only: bool) -> None:
        self.calls.append(("alter", topic, set_configs, sorted(delete_configs), validate_only))
        if "bad" in set_configs:
            raise InvalidConfigurationError("bad is not a topic config")

    async def create_partitions(self, topic: str, total: int, new_assignment: list[list[int]] | None = None,
                                wait_ms: int = 30_000) -> dict[int, list[int]]:
        self.calls.append(("partitions", topic, total, new_assignment))
        return {total - 1: [1]}


def harness() -> tuple[Admin, KafkaRequestContext]:
    topics: dict[str, Any] = {"clicks": SimpleNamespace(topic_id=TOPIC_ID.hex, configs={"retention.ms": "1000",
                                                                                          "cleanup.policy": "compact"},
                                                        partitions={0: None, 1: None})}
    service = Admin(topics)
    config = BrokerConfig()

    class Controller:
        async def elect_preferred_leaders(self, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], str]:
            service.calls.append(("elect", partitions))
            return {("clicks", 0): "NONE", ("clicks", 1): "ELECTION_NOT_NEEDED"}

    services: Any = SimpleNamespace(config=config, admin=AdminRequests(config, service),  # type: ignore[arg-type]
                                    metadata=SimpleNamespace(cache=SimpleNamespace(topics=topics)),
                                    controller=Controller())
    return service, KafkaRequestContext(services, 0, 0, 1, "adminclient-1", "127.0.0.1")


async def _until(condition: Any) -> None:
    """Let the loop run until ``condition()`` holds (a bounded number of turns)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


def call(handler: Any, context: KafkaRequestContext, request: Any) -> Any:
    """The handler's answer to ``request`` (at the request's version); the answer must also build
    into the kio response of that version and encode, as the listener does with it."""
    api = next(item for item in admin.HANDLERS if item.handle is handler)
    version = int(request.__version__)
    assert api.min_version <= version <= api.max_version
    answer = asyncio.run(handler(dataclasses.replace(context, api_key=api.api_key, api_version=version), request))
    codec.encode_response(api.api_key, version, 1, codec.build_response(api.api_key, version, answer))
    return answer


def test_create_topics_answers_counts_ids_configs_and_item_errors() -> None:
    service, context = harness()
    request = create_topics_v7.CreateTopicsRequest(topics=(
        create_topics_v7.CreatableTopic(name="views", num_partitions=3, replication_factor=2, assignments=(),
                                        configs=(create_topics_v7.CreatableTopicConfig(name="retention.ms",
                                                                                       value="60000"),)),
        create_topics_v7.CreatableTopic(name="clicks", num_partitions=1, replication_factor=1, assignments=(),
                                        configs=()),
        create_topics_v7.CreatableTopic(name="nulls", num_partitions=1, replication_factor=1, assignments=(),
                                        configs=(create_topics_v7.CreatableTopicConfig(name="retention.ms",
                                                                                       value=None),)),
    ), timeout=TIMEOUT, validate_only=False)
    views, clicks, nulls = call(admin.create_topics, context, request)["topics"]
    assert (views["error_code"], views["num_partitions"], views["replication_factor"], views["topic_id"]) == (
        0, 3, 2, TOPIC_ID)
    assert [entry["name"] for entry in views["configs"]] == ["retention.ms", "segment.bytes"]
    assert [entry["config_source"] for entry in views["configs"]] == [1, 5]
    # every topic written first (no wait each), then one wait for the leaders of those created
    assert service.calls[0] == ("create", NewTopic("views", 3, 2, None, {"retention.ms": "60000"}), False, 0)
    assert (clicks["error_code"], clicks["num_partitions"]) == (TopicAlreadyExistsError.errno, -1)
    assert "already exists" in clicks["error_message"]
    assert nulls["error_code"] == InvalidConfigurationError.errno
    assert [call[0] for call in service.calls] == ["create", "create", "wait"]  # the rejected one never arrives
    assert service.calls[2] == ("wait", {"views": 3}, 5000)


def test_a_created_topic_still_without_leaders_at_the_timeout_is_request_timed_out_and_the_rest_are_not() -> None:
    service, context = harness()
    service.unled = {"slow"}
    request = create_topics_v7.CreateTopicsRequest(topics=tuple(
        create_topics_v7.CreatableTopic(name=name, num_partitions=2, replication_factor=1, assignments=(),
                                        configs=()) for name in ("fast", "slow")), timeout=TIMEOUT,
        validate_only=False)
    fast, slow = call(admin.create_topics, context, request)["topics"]
    assert fast["error_code"] == 0
    assert slow["error_code"] == RequestTimedOutError.errno
    assert "was created" in slow["error_message"]
    assert {"fast", "slow"} <= set(service.topics)


def test_a_create_topics_request_cancelled_mid_way_still_writes_every_topic_it_accepted() -> None:
    async def scenario() -> None:
        service, _ = harness()
        service.gate = asyncio.Event()
        requests = AdminRequests(BrokerConfig(), service)  # type: ignore[arg-type]
        names = [f"topic-{number}" for number in range(20)]
        task = asyncio.ensure_future(requests.create_topics([NewTopic(name, 1, 1) for name in names], 30_000, False))
        await _until(lambda: len(service.calls) >= 1)  # the writes started, none done ...
        task.cancel()  # ... when the client goes away
        service.gate.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await _until(lambda: set(names) <= set(service.topics))
        assert len(service.calls) == len(names)  # each written once, no wait after the cancel

    asyncio.run(scenario())


def test_delete_topics_by_name_or_id() -> None:
    _, context = harness()
    context = dataclasses.replace(context, api_version=6)
    answer = call(admin.delete_topics, context, delete_topics_v6.DeleteTopicsRequest(topics=(
        delete_topics_v6.DeleteTopicState(name=None, topic_id=TOPIC_ID),
        delete_topics_v6.DeleteTopicState(name=None, topic_id=uuid.UUID(int=5)),
        delete_topics_v6.DeleteTopicState(name="nope", topic_id=None)), timeout=TIMEOUT))
    assert answer["responses"] == [
        {"name": "clicks", "topic_id": TOPIC_ID, "error_code": 0, "error_message": None},
        {"name": None, "topic_id": uuid.UUID(int=5), "error_code": admin.UNKNOWN_TOPIC_ID,
         "error_message": f"no topic has id {uuid.UUID(int=5)}"},
        {"name": "nope", "topic_id": None, "error_code": UnknownTopicOrPartitionError.errno,
         "error_message": "topic 'nope' does not exist"}]


def test_create_partitions_and_validate_only() -> None:
    service, context = harness()
    topics = (create_partitions_v3.CreatePartitionsTopic(name="clicks", count=3, assignments=None),
              create_partitions_v3.CreatePartitionsTopic(name="clicks", count=2, assignments=None))
    checked = call(admin.create_partitions, context, create_partitions_v3.CreatePartitionsRequest(
        topics=topics, timeout=TIMEOUT, validate_only=True))
    assert [item["error_code"] for item in checked["results"]] == [0, InvalidPartitionsError.errno]
    assert service.calls == []
    done = call(admin.create_partitions, context, create_partitions_v3.CreatePartitionsRequest(
        topics=topics[:1], timeout=TIMEOUT, validate_only=False))
    assert done["results"] == [{"name": "clicks", "error_code": 0, "error_message": None}]
    assert service.calls == [("partitions", "clicks", 3, None), ("wait", {"clicks": 3}, 5000)]


def test_describe_configs_maps_resource_types_sources_and_key_filter() -> None:
    _, context = harness()
    answer = call(admin.describe_configs, context, describe_configs_v4.DescribeConfigsRequest(resources=(
        describe_configs_v4.DescribeConfigsResource(resource_type=2, resource_name="clicks",
                                                    configuration_keys=("segment.bytes",)),
        describe_configs_v4.DescribeConfigsResource(resource_type=4, resource_name="", configuration_keys=None),
        describe_configs_v4.DescribeConfigsResource(resource_type=8, resource_name="1", configuration_keys=None),
    ), include_synonyms=False, include_documentation=False))
    topic, broker, logger = answer["results"]
    assert [(entry["name"], entry["value"], entry["config_source"]) for entry in topic["configs"]] == [
        ("segment.bytes", "1073741824", 5)]
    assert [(entry["name"], entry["read_only"], entry["config_source"]) for entry in broker["configs"]] == [
        ("log.dirs", True, 4)]
    assert (logger["error_code"], logger["resource_type"], logger["configs"]) == (InvalidRequestError.errno, 8, [])


def test_alter_configs_replaces_and_incremental_sets_and_deletes() -> None:
    service, context = harness()
    replaced = call(admin.alter_configs, context, alter_configs_v2.AlterConfigsRequest(resources=(
        alter_configs_v2.AlterConfigsResource(resource_type=2, resource_name="clicks", configs=(
            alter_configs_v2.AlterableConfig(name="retention.ms", value="5000"),)),), validate_only=False))
    assert replaced["responses"] == [{"resource_type": 2, "resource_name": "clicks", "error_code": 0,
                                      "error_message": None}]
    # AlterConfigs is not incremental: cleanup.policy, left out, goes back to its default
    assert service.calls[-1] == ("alter", "clicks", {"retention.ms": "5000"}, ["cleanup.policy"], False)

    answer = call(admin.incremental_alter_configs, context, incremental_v1.IncrementalAlterConfigsRequest(resources=(
        incremental_v1.AlterConfigsResource(resource_type=2, resource_name="clicks", configs=(
            incremental_v1.AlterableConfig(name="retention.ms", config_operation=0, value="7"),
            incremental_v1.AlterableConfig(name="cleanup.policy", config_operation=1, value=None))),
        incremental_v1.AlterConfigsResource(resource_type=2, resource_name="clicks", configs=(
            incremental_v1.AlterableConfig(name="cleanup.policy", config_operation=2, value="delete"),)),
        incremental_v1.AlterConfigsResource(resource_type=2, resource_name="clicks", configs=(
            incremental_v1.AlterableConfig(name="bad", config_operation=0, value="1"),)),
    ), validate_only=True))
    assert [item["error_code"] for item in answer["responses"]] == [
        0, InvalidRequestError.errno, InvalidConfigurationError.errno]
    assert service.calls[-2:] == [("alter", "clicks", {"retention.ms": "7"}, ["cleanup.policy"], True),
                                  ("alter", "clicks", {"bad": "1"}, [], True)]


def test_elect_leaders_preferred_results_and_unclean_refused() -> None:
    service, context = harness()
    answer = call(admin.elect_leaders, context, elect_leaders_v2.ElectLeadersRequest(
        election_type=0, topic_partitions=(elect_leaders_v2.TopicPartitions(topic="clicks", partitions=(0, 1)),),
        timeout=TIMEOUT))
    assert answer["error_code"] == 0
    results = answer["replica_election_results"][0]["partition_result"]
    assert [(item["partition_id"], item["error_code"]) for item in results] == [
        (0, 0), (1, ElectionNotNeededError.errno)]
    assert service.calls == [("elect", [("clicks", 0), ("clicks", 1)])]
    unclean = call(admin.elect_leaders, context, elect_leaders_v2.ElectLeadersRequest(
        election_type=1, topic_partitions=None, timeout=TIMEOUT))
    assert unclean["error_code"] == InvalidRequestError.errno


def test_describe_producers_from_the_leaders_producer_state() -> None:
    class ReplicaManager:
        def producers(self, topic: str, number: int) -> dict[int, ProducerEntry]:
            if number == 1:
                raise NotLeaderForPartitionError(f"broker 0 does not lead {topic}-{number}")
            return {7: ProducerEntry(2, deque([BatchEntry(0, 4, 10, 14, 1234)]), 1234)}

    _, context = harness()
    services: Any = SimpleNamespace(replicas=ReplicaService(ReplicaManager(), None))  # type: ignore[arg-type]
    context = dataclasses.replace(context, services=services)
    answer = call(admin.describe_producers, context, describe_producers_v0.DescribeProducersRequest(topics=(
        describe_producers_v0.TopicRequest(name="clicks", partition_indexes=(0, 1)),)))
    assert answer == {"topics": [{"name": "clicks", "partitions": [
        {"partition_index": 0, "error_code": 0, "error_message": None, "active_producers": [
            {"producer_id": 7, "producer_epoch": 2, "last_sequence": 4, "last_timestamp": 1234,
             "coordinator_epoch": -1, "current_txn_start_offset": -1}]},
        {"partition_index": 1, "error_code": NotLeaderForPartitionError.errno,
         "error_message": "broker 0 does not lead clicks-1", "active_producers": []}]}]}


def test_delete_records_answers_low_watermarks_per_partition() -> None:
    class Replicas:
        async def delete_records(self, queries: list[DeleteRecordsQuery],
                                 timeout_ms: int) -> list[DeleteRecordsAnswer]:
            assert timeout_ms == 5000
            return [DeleteRecordsAnswer(query.topic, query.partition, None, 10) if query.partition == 0 else
                    DeleteRecordsAnswer(query.topic, query.partition, OffsetOutOfRangeError("beyond the end"))
                    for query in queries]

    _, context = harness()
    context = dataclasses.replace(context, services=SimpleNamespace(replicas=Replicas()))
    answer = call(admin.delete_records, context, delete_records_v2.DeleteRecordsRequest(topics=(
        delete_records_v2.DeleteRecordsTopic(name="clicks", partitions=(
            delete_records_v2.DeleteRecordsPartition(partition_index=0, offset=10),
            delete_records_v2.DeleteRecordsPartition(partition_index=1, offset=99))),), timeout=TIMEOUT))
    assert answer == {"topics": [{"name": "clicks", "partitions": [
        {"partition_index": 0, "low_watermark": 10, "error_code": 0},
        {"partition_index": 1, "low_watermark": -1, "error_code": OffsetOutOfRangeError.errno}]}]}
