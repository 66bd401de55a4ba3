"""The transactional producer's options and its transaction manager's local rules (no broker:
what needs one is in tests/integration/test_transactions.py)."""

from __future__ import annotations

import asyncio

import pytest

from kafkalite.client import KafkaProducer
from kafkalite.client.producer_core import ProducerCore
from kafkalite.client.producer_settings import ProducerSettings
from kafkalite.client.transactions import TxnState, group_metadata_of
from kafkalite.client.types import ConsumerGroupMetadata, TopicPartition
from kafkalite.errors import ConfigError, IllegalStateError, ProducerFencedError, UnknownTopicOrPartitionError


def test_transactional_id_implies_idempotence_and_acks_all() -> None:
    settings = ProducerSettings.from_options({"transactional_id": "tx", "transaction_timeout_ms": 5000})
    assert (settings.transactional_id, settings.transaction_timeout_ms, settings.enable_idempotence,
            settings.acks) == ("tx", 5000, True, -1)
    with pytest.raises(ConfigError, match="acks"):
        ProducerSettings.from_options({"transactional_id": "tx", "acks": 1})
    with pytest.raises(ConfigError, match="enable_idempotence"):
        ProducerSettings.from_options({"transactional_id": "tx", "enable_idempotence": False})
    with pytest.raises(ConfigError):
        ProducerSettings.from_options({"transactional_id": ""})


def test_records_only_inside_a_transaction_and_only_added_partitions_drain() -> None:
    async def scenario() -> None:
        core = ProducerCore(ProducerSettings.from_options({"bootstrap_servers": "127.0.0.1:1",
                                                           "transactional_id": "tx"}))
        manager = core.transactions()
        tp = TopicPartition("out", 0)
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            manager.before_append(tp)
        with pytest.raises(IllegalStateError):
            manager.begin_transaction()  # not initialised yet
        manager.state = TxnState.READY
        manager.begin_transaction()
        manager.before_append(tp)
        assert not manager.sendable(tp) and core.accumulator.transactional
        # a batch that failed for good makes the transaction abortable; fencing makes it fatal
        manager._batch_failed(UnknownTopicOrPartitionError("gone"))
        assert manager.state is TxnState.ABORTABLE_ERROR
        with pytest.raises(UnknownTopicOrPartitionError):
            await manager.end_transaction(True, [])
        manager._batch_failed(ProducerFencedError("newer instance"))
        assert manager.state is TxnState.FATAL_ERROR
        with pytest.raises(IllegalStateError, match="fatal"):
            manager.before_append(tp)
        await core.transport.close()
        await core.metadata.close()
    asyncio.run(scenario())


def test_group_metadata_or_a_group_id() -> None:
    metadata = ConsumerGroupMetadata("g", 3, "member-1", None)
    assert group_metadata_of(metadata) is metadata
    assert group_metadata_of("g") == ConsumerGroupMetadata("g")
    with pytest.raises(TypeError):
        group_metadata_of(42)


def test_a_plain_producer_has_no_transactions() -> None:
    with KafkaProducer(bootstrap_servers="127.0.0.1:1") as producer, \
            pytest.raises(IllegalStateError, match="transactional_id"):
        producer.begin_transaction()
