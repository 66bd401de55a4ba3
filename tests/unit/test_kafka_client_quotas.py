"""DescribeClientQuotas and AlterClientQuotas handlers on a real entity cache (in-memory coordinator)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from kio.schema.alter_client_quotas.v1 import request as alter
from kio.schema.describe_client_quotas.v1 import request as describe

from kafkalite.broker.entity_configs import EntityConfigs
from kafkalite.broker.kafka.client_quotas import alter_client_quotas, describe_client_quotas
from kafkalite.broker.kafka.context import KafkaRequestContext
from kafkalite.coord import znodes
from kafkalite.coord.memory import InMemoryZooKeeper
from kafkalite.errors import InvalidConfigurationError, InvalidRequestError


class Services:
    def __init__(self, cache: EntityConfigs) -> None:
        self.entity_configs = cache


def context(cache: EntityConfigs, api_key: int) -> KafkaRequestContext:
    return KafkaRequestContext(cast(Any, Services(cache)), api_key, 1, 1, "test", "127.0.0.1")


def entity(**names: str | None) -> tuple[alter.EntityData, ...]:
    return tuple(alter.EntityData(entity_type=kind.replace("_", "-"), entity_name=name) for kind, name in names.items())


def op(key: str, value: float = 0.0, remove: bool = False) -> alter.OpData:
    return alter.OpData(key=key, value=value, remove=remove)


async def scenario() -> None:
    client = InMemoryZooKeeper().client()
    await client.start()
    await client.ensure_paths(znodes.PERSISTENT_PATHS)
    cache = EntityConfigs(client)
    await cache.start()
    await cache.alter("alice", None, {"SCRAM-SHA-256": "salt=c2FsdA==,stored_key=a2V5,server_key=a2V5,"
                                      "iterations=4096"}, [])
    answer = await alter_client_quotas(context(cache, 49), alter.AlterClientQuotasRequest(entries=(
        alter.EntryData(entity=entity(user="alice"), ops=(op("producer_byte_rate", 1048576.0),)),
        alter.EntryData(entity=entity(user=None, client_id="app"), ops=(op("consumer_byte_rate", 2048.0),)),
        alter.EntryData(entity=entity(client_id=None), ops=(op("request_percentage", 12.5),)),
        alter.EntryData(entity=entity(client_id="x"), ops=(op("bytes_per_fortnight", 1.0),)),
        alter.EntryData(entity=entity(client_id="x"), ops=(op("producer_byte_rate", 1.5),)),
        alter.EntryData(entity=entity(ip="10.0.0.1"), ops=(op("producer_byte_rate", 1.0),)),
    ), validate_only=False))
    codes = [item["error_code"] for item in answer["entries"]]
    assert codes == [0, 0, 0, InvalidRequestError.errno, InvalidConfigurationError.errno, InvalidRequestError.errno]
    assert cache.entity_configs("alice", None)["producer_byte_rate"] == "1048576"
    assert "SCRAM-SHA-256" in cache.entity_configs("alice", None)  # the credential stays

    async def described(*components: describe.ComponentData, strict: bool = False) -> list[Any]:
        result = await describe_client_quotas(context(cache, 48), describe.DescribeClientQuotasRequest(
            components=components, strict=strict))
        assert result["error_code"] == 0
        return [({item["entity_type"]: item["entity_name"] for item in entry["entity"]},
                 {value["key"]: value["value"] for value in entry["values"]}) for entry in result["entries"]]

    everything = await described()
    assert ({"user": "alice"}, {"producer_byte_rate": 1048576.0}) in everything  # no credential shown
    assert len(everything) == 3
    assert await described(describe.ComponentData(entity_type="client-id", match_type=1, match=None),
                           strict=True) == [({"client-id": None}, {"request_percentage": 12.5})]
    assert await described(describe.ComponentData(entity_type="client-id", match_type=0, match="app")) == [
        ({"user": None, "client-id": "app"}, {"consumer_byte_rate": 2048.0})]
    assert await described(describe.ComponentData(entity_type="user", match_type=2, match=None)) == [
        ({"user": "alice"}, {"producer_byte_rate": 1048576.0})]
    refused = await describe_client_quotas(context(cache, 48), describe.DescribeClientQuotasRequest(
        components=(describe.ComponentData(entity_type="ip", match_type=0, match="x"),), strict=False))
    assert refused["error_code"] == InvalidRequestError.errno

    removals = (op("producer_byte_rate", remove=True), op("consumer_byte_rate", remove=True))
    removed = await alter_client_quotas(context(cache, 49), alter.AlterClientQuotasRequest(
        entries=(alter.EntryData(entity=entity(user="alice"), ops=removals),), validate_only=False))
    assert removed["entries"][0]["error_code"] == 0
    assert "producer_byte_rate" not in cache.entity_configs("alice", None)
    cache.stop()
    await client.stop()


def test_describe_and_alter_client_quotas() -> None:
    asyncio.run(asyncio.wait_for(scenario(), 10))
