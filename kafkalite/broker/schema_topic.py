"""The schema registry's ``_schemas`` partition over the broker's services.

:class:`BrokerSchemaTopic` implements :class:`kafkalite.registry.store.SchemaTopic`: reads go
through the records service (served locally when this broker leads ``_schemas``-0, fetched
from the leader otherwise), appends only on the leader (acks=all), and the topic is created on
first use as a compacted topic of one partition with ``default.replication.factor`` replicas
(at most the number of live brokers), like Confluent's ``kafkastore.topic``.

Concurrency: event-loop only.
"""

from __future__ import annotations

from kafkalite.broker.admin import NewTopic
from kafkalite.broker.services import AdminRequests, MetadataService, RecordsService, RecordToProduce
from kafkalite.config import BrokerConfig
from kafkalite.errors import (
    LeaderNotAvailableError,
    NotLeaderForPartitionError,
    TopicAlreadyExistsError,
)
from kafkalite.registry.store import SCHEMAS_TOPIC, KeyedRecord, TopicRead

_READ_MAX_BYTES = 4 * 1024 * 1024


class BrokerSchemaTopic:
    """``_schemas``-0 as the registry's store sees it (see the module docstring)."""

    def __init__(self, config: BrokerConfig, metadata: MetadataService, records: RecordsService,
                 admin: AdminRequests) -> None:
        self.config = config
        self.metadata = metadata
        self.records = records
        self.admin = admin

    async def read(self, offset: int, timeout_ms: int) -> TopicRead:
        fetched = await self.records.fetch(SCHEMAS_TOPIC, 0, offset, _READ_MAX_BYTES, timeout_ms)
        return TopicRead([(record.offset, record.key, record.value) for record in fetched.records],
                         fetched.next_offset, fetched.high_watermark, fetched.log_start_offset)

    async def append(self, records: list[KeyedRecord]) -> int:
        info = self.metadata.cache.partition(SCHEMAS_TOPIC, 0)
        if info is None or info.leader != self.config.broker_id:
            raise NotLeaderForPartitionError(f"broker {self.config.broker_id} does not lead {SCHEMAS_TOPIC}-0")
        answers = await self.records.produce(
            SCHEMAS_TOPIC, [RecordToProduce(key, value, partition=0) for key, value in records], acks=-1)
        for produced in answers:
            if produced.error is not None:
                raise produced.error
        return max(produced.offset for produced in answers)

    async def ensure_topic(self) -> None:
        if self.metadata.cache.partition(SCHEMAS_TOPIC, 0) is None:
            factor = max(1, min(self.config.default_replication_factor, len(self.metadata.cache.live_broker_ids())))
            topic = NewTopic(SCHEMAS_TOPIC, 1, factor, configs={"cleanup.policy": "compact"})
            [outcome] = await self.admin.create_topics([topic], self.config.request_timeout_ms, False)
            if outcome.error is not None and not isinstance(outcome.error, TopicAlreadyExistsError):
                raise outcome.error
        if not await self.metadata.cache.wait_for(self.has_leader, self.config.request_timeout_ms / 1000):
            raise LeaderNotAvailableError(f"{SCHEMAS_TOPIC}-0 has no leader")

    def has_leader(self) -> bool:
        info = self.metadata.cache.partition(SCHEMAS_TOPIC, 0)
        if info is None or info.leader < 0:
            return False
        return info.leader == self.config.broker_id or self.metadata.cache.endpoint(info.leader) is not None

    def exists(self) -> bool:
        return self.metadata.cache.partition(SCHEMAS_TOPIC, 0) is not None

    def leader_url(self) -> str | None:
        info = self.metadata.cache.partition(SCHEMAS_TOPIC, 0)
        if info is None or info.leader < 0 or info.leader == self.config.broker_id:
            return None
        endpoint = self.metadata.cache.endpoint(info.leader)
        return f"http://{endpoint.address}/registry" if endpoint is not None else None
