"""The users/clients config entities (kafkalite.broker.entity_configs) on the in-memory coordinator:
Kafka's znode layout and notifications, two brokers' caches following one write, validation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from kafkalite.broker.entity_configs import EntityConfigs
from kafkalite.coord import znodes
from kafkalite.coord.memory import InMemoryCoordinator, InMemoryZooKeeper
from kafkalite.errors import InvalidConfigurationError
from kafkalite.security import scram

_Result = TypeVar("_Result")


def run(scenario: Callable[[], Awaitable[_Result]]) -> _Result:
    async def bounded() -> _Result:
        return await asyncio.wait_for(scenario(), 10.0)

    return asyncio.run(bounded())


async def started(ensemble: InMemoryZooKeeper) -> InMemoryCoordinator:
    client = ensemble.client()
    await client.start()
    await client.ensure_paths(znodes.PERSISTENT_PATHS)
    return client


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.001)


def test_two_brokers_follow_one_write_in_kafkas_layout() -> None:
    async def scenario() -> None:
        ensemble = InMemoryZooKeeper()
        first_client, second_client = await started(ensemble), await started(ensemble)
        credential = scram.new_credential("SCRAM-SHA-512", "secret", 8192).to_text()
        await first_client.create("/config/users/bob", znodes.ConfigEntity({"producer_byte_rate": "10"}).to_bytes())
        first, second = EntityConfigs(first_client), EntityConfigs(second_client)
        await first.start()
        await second.start()
        assert second.user_configs("bob") == {"producer_byte_rate": "10"}  # loaded at start
        changed: list[str] = []
        second.add_listener(changed.append)
        await first.alter("alice", None, {"SCRAM-SHA-512": credential, "consumer_byte_rate": "2048"}, [])
        await first.alter("alice", "c1", {"producer_byte_rate": "1024"}, [])
        await first.alter(None, "<default>", {"request_percentage": "12.5"}, [])
        await until(lambda: len(changed) == 3)
        assert changed == ["users/alice", "users/alice/clients/c1", "clients/<default>"]
        data, _ = await first_client.get("/config/users/alice")
        assert json.loads(data) == {"version": 1, "config": {"SCRAM-SHA-512": credential,
                                                             "consumer_byte_rate": "2048"}}
        assert "secret" not in data.decode()
        data, _ = await first_client.get("/config/users/alice/clients/c1")
        assert json.loads(data)["config"] == {"producer_byte_rate": "1024"}
        notices = await first_client.get_children(znodes.CONFIG_CHANGES_PATH)
        data, _ = await first_client.get(f"{znodes.CONFIG_CHANGES_PATH}/{notices[-1]}")
        assert json.loads(data) == {"version": 2, "entity_path": "clients/<default>"}
        assert second.entity_configs(None, "<default>") == {"request_percentage": "12.5"}
        stored = second.scram_credential("alice", "SCRAM-SHA-512")
        assert stored is not None and scram.verify_password("SCRAM-SHA-512", stored, "secret")
        assert second.scram_credential("alice", "SCRAM-SHA-256") is None
        described = {item["entity_path"]: item["configs"] for item in second.describe()}
        assert described["users/alice"]["SCRAM-SHA-512"] == "iterations=8192"
        await first.alter("alice", None, {}, ["SCRAM-SHA-512", "consumer_byte_rate"])
        await until(lambda: second.user_configs("alice") == {})
        assert "users/alice" not in second.entities()
        first.stop()
        second.stop()
    run(scenario)


def test_invalid_keys_and_values_are_refused_by_name() -> None:
    async def scenario() -> None:
        client = await started(InMemoryZooKeeper())
        cache = EntityConfigs(client)
        await cache.start()
        credential = scram.new_credential("SCRAM-SHA-256", "pw").to_text()
        for user, client_id, configs in (
                (None, "c1", {"SCRAM-SHA-256": credential}),     # credentials belong to users only
                ("alice", None, {"retention.ms": "1"}),
                ("alice", None, {"producer_byte_rate": "fast"}),
                ("alice", None, {"producer_byte_rate": "-5"}),
                ("alice", None, {"SCRAM-SHA-256": "password=plain"}),
                ("<default>", None, {"SCRAM-SHA-256": credential})):
            with pytest.raises(InvalidConfigurationError):
                await cache.alter(user, client_id, configs, [])
        with pytest.raises(InvalidConfigurationError, match="Invalid config"):
            await cache.alter("alice", None, {}, ["producer_byte_rate"])
        assert await client.exists("/config/users/alice") is None
        cache.stop()
    run(scenario)
