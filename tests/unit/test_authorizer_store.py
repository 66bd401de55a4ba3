"""The broker's ACL authorizer over the in-memory ZooKeeper twin: Kafka's znode layout and JSON,
change notifications followed by a second broker's cache, concurrent conditional writes, the
errors a denial raises, and the broker settings that turn it on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from kafkalite.broker.authorizer import Authorizer
from kafkalite.config import BrokerConfig
from kafkalite.coord import znodes
from kafkalite.coord.memory import InMemoryZooKeeper
from kafkalite.errors import (
    ClusterAuthorizationFailedError,
    ConfigError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from kafkalite.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from kafkalite.security.principal import ANONYMOUS, KafkaPrincipal

ALICE = KafkaPrincipal.user("alice")


def binding(resource_type: ResourceType, name: str, principal: str, operation: Operation,
            permission: Permission = Permission.ALLOW, pattern_type: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern_type),
                      AccessControlEntry(principal, "*", operation, permission))


def run(scenario: Callable[[InMemoryZooKeeper, Authorizer, Authorizer], Awaitable[None]]) -> None:
    async def main() -> None:
        ensemble = InMemoryZooKeeper()
        clients = [ensemble.client(), ensemble.client()]
        for client in clients:
            await client.start()
        first, second = Authorizer(clients[0], ["User:admin"]), Authorizer(clients[1])
        await first.start()
        await second.start()
        try:
            await scenario(ensemble, first, second)
        finally:
            first.stop()
            second.stop()
            for client in clients:
                await client.stop()

    asyncio.run(asyncio.wait_for(main(), 10.0))


def test_acls_are_stored_in_kafkas_layout_and_followed_by_other_brokers() -> None:
    async def scenario(ensemble: InMemoryZooKeeper, first: Authorizer, second: Authorizer) -> None:
        await first.create_acls([binding(ResourceType.TOPIC, "orders", "User:alice", Operation.READ),
                                 binding(ResourceType.TOPIC, "pay.", "User:alice", Operation.WRITE,
                                         pattern_type=PatternType.PREFIXED)])
        stored = ensemble.read("/kafka-acl/Topic/orders")
        assert stored is not None
        assert json.loads(stored[0]) == {"version": 1, "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
        assert ensemble.read("/kafka-acl-extended/prefixed/Topic/pay.") is not None
        changes = ensemble.children(znodes.ACL_CHANGES_PATH) or []
        assert [ensemble.read(f"{znodes.ACL_CHANGES_PATH}/{child}")[0] for child in changes] == [b"Topic:orders"]  # type: ignore[index]
        extended = ensemble.children(znodes.ACL_EXTENDED_CHANGES_PATH) or []
        assert len(extended) == 1 and extended[0].startswith("acl_changes_")
        await ensemble.settle()
        assert second.authorize(ALICE, "10.0.0.1", Operation.READ, ResourceType.TOPIC, "orders")
        assert second.authorize(ALICE, "10.0.0.1", Operation.WRITE, ResourceType.TOPIC, "pay.eu")
        assert not second.authorize(ALICE, "10.0.0.1", Operation.WRITE, ResourceType.TOPIC, "orders")

        deleted = await second.delete_acls(AclBindingFilter(ResourceType.TOPIC, "orders"))
        assert [str(b.entry.operation) for b in deleted] == ["Read"]
        assert ensemble.read("/kafka-acl/Topic/orders") is None  # an empty ACL list removes the znode
        await ensemble.settle()
        assert not first.authorize(ALICE, "h", Operation.READ, ResourceType.TOPIC, "orders")
        assert [b.pattern.name for b in first.describe_acls(AclBindingFilter(pattern_type=PatternType.ANY))] == \
            ["pay."]

    run(scenario)


def test_a_broker_starting_later_loads_every_acl() -> None:
    async def main() -> None:
        ensemble = InMemoryZooKeeper()
        writer_client = ensemble.client()
        await writer_client.start()
        writer = Authorizer(writer_client)
        await writer.start()
        await writer.create_acls([binding(ResourceType.GROUP, "g", "User:*", Operation.READ),
                                  binding(ResourceType.CLUSTER, "kafka-cluster", "User:alice", Operation.ALL,
                                          Permission.DENY)])
        reader_client = ensemble.client()
        await reader_client.start()
        reader = Authorizer(reader_client)
        await reader.start()
        assert reader.authorize(ANONYMOUS, "h", Operation.READ, ResourceType.GROUP, "g")
        assert len(reader.describe_acls(AclBindingFilter(pattern_type=PatternType.ANY))) == 2
        writer.stop()
        reader.stop()
        await writer_client.stop()
        await reader_client.stop()

    asyncio.run(asyncio.wait_for(main(), 10.0))


def test_concurrent_writers_to_one_resource_lose_nothing() -> None:
    async def scenario(ensemble: InMemoryZooKeeper, first: Authorizer, second: Authorizer) -> None:
        await asyncio.gather(*(
            (first if index % 2 else second).create_acls(
                [binding(ResourceType.TOPIC, "shared", f"User:u{index}", Operation.READ)])
            for index in range(10)))
        stored = ensemble.read("/kafka-acl/Topic/shared")
        assert stored is not None
        assert len(json.loads(stored[0])["acls"]) == 10

    run(scenario)


def test_denials_raise_the_error_of_the_resource_type() -> None:
    async def scenario(ensemble: InMemoryZooKeeper, first: Authorizer, second: Authorizer) -> None:
        cases = [(ResourceType.TOPIC, "t", TopicAuthorizationFailedError, 29),
                 (ResourceType.GROUP, "g", GroupAuthorizationFailedError, 30),
                 (ResourceType.CLUSTER, "kafka-cluster", ClusterAuthorizationFailedError, 31),
                 (ResourceType.TRANSACTIONAL_ID, "tx", TransactionalIdAuthorizationFailedError, 53)]
        for resource_type, name, error, code in cases:
            with pytest.raises(error) as raised:
                first.check(ALICE, "h", Operation.DESCRIBE, resource_type, name)
            assert raised.value.errno == code
            first.check(KafkaPrincipal.user("admin"), "h", Operation.DESCRIBE, resource_type, name)  # super user

    run(scenario)


def test_broker_settings() -> None:
    assert not BrokerConfig.from_properties({}).authorizer_enabled()
    for name in ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                 "kafkalite.broker.authorizer.Authorizer"):
        config = BrokerConfig.from_properties({"authorizer.class.name": name, "super.users": "User:a;User:b",
                                               "allow.everyone.if.no.acl.found": "true"})
        assert config.authorizer_enabled() and config.allow_everyone_if_no_acl_found
        assert config.super_users == "User:a;User:b"
    with pytest.raises(ConfigError, match=r"authorizer\.class\.name"):
        BrokerConfig.from_properties({"authorizer.class.name": "com.example.MyAuthorizer"})
    with pytest.raises(ConfigError, match=r"super\.users"):
        BrokerConfig.from_properties({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                      "super.users": "admin"})
