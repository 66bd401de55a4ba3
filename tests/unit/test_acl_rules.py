"""Kafka's authorizer rules (kafkalite.security.acl): matching, deny wins, implied operations,
super users, allow.everyone.if.no.acl.found, the ZooKeeper formats and the ACL filters."""

from __future__ import annotations

import json

import pytest

from kafkalite.errors import InvalidRequestError
from kafkalite.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclRules,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    decode_acls,
    decode_change,
    encode_acls,
    encode_change,
    parse_super_users,
)

TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"


def entry(principal: str, operation: Operation, permission: Permission = ALLOW, host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, operation, permission)


def rules_with(*acls: tuple[ResourcePattern, AccessControlEntry], **options: object) -> AclRules:
    rules = AclRules(**options)  # type: ignore[arg-type]
    by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for pattern, acl in acls:
        by_pattern.setdefault(pattern, set()).add(acl)
    for pattern, entries in by_pattern.items():
        rules.set_acls(pattern, entries)
    return rules


def topic(name: str, pattern_type: PatternType = PatternType.LITERAL) -> ResourcePattern:
    return ResourcePattern(TOPIC, name, pattern_type)


def test_allow_read_on_literal_topic() -> None:
    rules = rules_with((topic("orders"), entry(ALICE, Operation.READ)))
    assert rules.authorize(ALICE, "10.0.0.1", Operation.READ, TOPIC, "orders")
    assert not rules.authorize(ALICE, "10.0.0.1", Operation.WRITE, TOPIC, "orders")
    assert not rules.authorize(BOB, "10.0.0.1", Operation.READ, TOPIC, "orders")
    assert not rules.authorize(ALICE, "10.0.0.1", Operation.READ, TOPIC, "orders2")


def test_no_acl_found_denies_unless_allow_everyone() -> None:
    assert not AclRules().authorize(ALICE, "h", Operation.READ, TOPIC, "t")
    assert AclRules(allow_everyone_if_no_acl_found=True).authorize(ALICE, "h", Operation.READ, TOPIC, "t")
    # once any ACL matches the resource, allow.everyone no longer applies
    rules = rules_with((topic("t"), entry(BOB, Operation.READ)), allow_everyone_if_no_acl_found=True)
    assert not rules.authorize(ALICE, "h", Operation.READ, TOPIC, "t")
    assert rules.authorize(ALICE, "h", Operation.READ, TOPIC, "other")


def test_super_users_bypass_everything() -> None:
    rules = rules_with((topic("t"), entry(ALICE, Operation.ALL, DENY)), super_users=["User:alice", "User:admin"])
    assert rules.authorize(ALICE, "h", Operation.WRITE, TOPIC, "t")
    assert rules.authorize("User:admin", "h", Operation.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert not rules.authorize(BOB, "h", Operation.WRITE, TOPIC, "t")


def test_deny_wins_over_allow() -> None:
    rules = rules_with((topic("t"), entry(ALICE, Operation.READ)),
                       (topic("t", PatternType.PREFIXED), entry(ALICE, Operation.READ, DENY)))
    assert not rules.authorize(ALICE, "h", Operation.READ, TOPIC, "t")


def test_deny_all_and_wildcard_principal_deny() -> None:
    rules = rules_with((topic("t"), entry(ALICE, Operation.WRITE)), (topic("t"), entry("User:*", Operation.ALL, DENY)))
    assert not rules.authorize(ALICE, "h", Operation.WRITE, TOPIC, "t")


def test_deny_of_read_does_not_deny_describe() -> None:
    rules = rules_with((topic("t"), entry(ALICE, Operation.WRITE)), (topic("t"), entry(ALICE, Operation.READ, DENY)))
    assert rules.authorize(ALICE, "h", Operation.DESCRIBE, TOPIC, "t")
    assert not rules.authorize(ALICE, "h", Operation.READ, TOPIC, "t")


@pytest.mark.parametrize("granted", [Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER,
                                     Operation.DESCRIBE, Operation.ALL])
def test_describe_is_implied(granted: Operation) -> None:
    rules = rules_with((topic("t"), entry(ALICE, granted)))
    assert rules.authorize(ALICE, "h", Operation.DESCRIBE, TOPIC, "t")


@pytest.mark.parametrize("granted", [Operation.CREATE, Operation.DESCRIBE_CONFIGS, Operation.CLUSTER_ACTION])
def test_describe_is_not_implied_by_others(granted: Operation) -> None:
    rules = rules_with((topic("t"), entry(ALICE, granted)))
    assert not rules.authorize(ALICE, "h", Operation.DESCRIBE, TOPIC, "t")


def test_describe_configs_implied_by_alter_configs_only() -> None:
    rules = rules_with((topic("t"), entry(ALICE, Operation.ALTER_CONFIGS)))
    assert rules.authorize(ALICE, "h", Operation.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not rules.authorize(ALICE, "h", Operation.ALTER, TOPIC, "t")
    rules = rules_with((topic("t"), entry(ALICE, Operation.DESCRIBE_CONFIGS)))
    assert not rules.authorize(ALICE, "h", Operation.ALTER_CONFIGS, TOPIC, "t")


def test_all_allows_every_operation() -> None:
    rules = rules_with((ResourcePattern(CLUSTER, "kafka-cluster"), entry(ALICE, Operation.ALL)))
    for operation in (Operation.CLUSTER_ACTION, Operation.CREATE, Operation.ALTER, Operation.IDEMPOTENT_WRITE,
                      Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS):
        assert rules.authorize(ALICE, "h", operation, CLUSTER, "kafka-cluster")


def test_wildcard_resource_and_wildcard_principal() -> None:
    rules = rules_with((topic("*"), entry("User:*", Operation.READ)))
    assert rules.authorize(ALICE, "h", Operation.READ, TOPIC, "anything")
    assert rules.authorize("User:ANONYMOUS", "h", Operation.READ, TOPIC, "x")
    assert not rules.authorize(ALICE, "h", Operation.READ, GROUP, "anything")


def test_prefixed_patterns() -> None:
    rules = rules_with((topic("payments.", PatternType.PREFIXED), entry(ALICE, Operation.WRITE)))
    assert rules.authorize(ALICE, "h", Operation.WRITE, TOPIC, "payments.eu")
    assert rules.authorize(ALICE, "h", Operation.WRITE, TOPIC, "payments.")
    assert not rules.authorize(ALICE, "h", Operation.WRITE, TOPIC, "payments")
    assert not rules.authorize(ALICE, "h", Operation.WRITE, TOPIC, "xpayments.eu")


def test_hosts() -> None:
    rules = rules_with((topic("t"), entry(ALICE, Operation.READ, host="10.0.0.1")),
                       (topic("t"), entry(ALICE, Operation.READ, DENY, host="10.0.0.9")))
    assert rules.authorize(ALICE, "10.0.0.1", Operation.READ, TOPIC, "t")
    assert not rules.authorize(ALICE, "10.0.0.2", Operation.READ, TOPIC, "t")
    assert not rules.authorize(ALICE, "10.0.0.9", Operation.READ, TOPIC, "t")


def test_set_acls_replaces_and_removes() -> None:
    rules = rules_with((topic("t"), entry(ALICE, Operation.READ)))
    rules.set_acls(topic("t"), [entry(BOB, Operation.READ)])
    assert not rules.authorize(ALICE, "h", Operation.READ, TOPIC, "t")
    assert rules.authorize(BOB, "h", Operation.READ, TOPIC, "t")
    rules.set_acls(topic("t"), [])
    assert rules.patterns() == []
    assert not rules.authorize(BOB, "h", Operation.READ, TOPIC, "t")


def test_authorize_any_for_idempotent_write() -> None:
    rules = rules_with((topic("t"), entry(ALICE, Operation.WRITE)))
    assert rules.authorize_any(ALICE, "h", Operation.WRITE, TOPIC)
    assert not rules.authorize_any(BOB, "h", Operation.WRITE, TOPIC)
    rules = rules_with((topic("t"), entry(ALICE, Operation.WRITE)), (topic("*"), entry(ALICE, Operation.WRITE, DENY)))
    assert not rules.authorize_any(ALICE, "h", Operation.WRITE, TOPIC)


def test_znode_value_is_kafkas_json() -> None:
    entries = [entry(ALICE, Operation.READ), entry(BOB, Operation.IDEMPOTENT_WRITE, DENY, "10.0.0.1")]
    data = encode_acls(entries)
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "IdempotentWrite", "host": "10.0.0.1"}]}
    assert decode_acls(data) == frozenset(entries)
    assert decode_acls(b"") == frozenset()
    with pytest.raises(InvalidRequestError):
        decode_acls(b'{"version":1}')
    with pytest.raises(InvalidRequestError):
        decode_acls(b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Maybe","operation":"Read","host":"*"}]}')


def test_change_notifications() -> None:
    literal = ResourcePattern(GROUP, "g1")
    prefixed = topic("pay", PatternType.PREFIXED)
    assert encode_change(literal) == b"Group:g1"
    assert json.loads(encode_change(prefixed)) == {"version": 1, "resourceType": "Topic", "name": "pay",
                                                   "patternType": "PREFIXED"}
    assert decode_change(encode_change(literal)) == literal
    assert decode_change(encode_change(prefixed)) == prefixed
    with pytest.raises(InvalidRequestError):
        decode_change(b"nonsense")


def test_invalid_patterns_and_entries() -> None:
    with pytest.raises(InvalidRequestError):
        ResourcePattern(CLUSTER, "other")
    with pytest.raises(InvalidRequestError):
        ResourcePattern(ResourceType.ANY, "x")
    with pytest.raises(InvalidRequestError):
        ResourcePattern(TOPIC, "x", PatternType.MATCH)
    with pytest.raises(InvalidRequestError):
        AccessControlEntry("alice", "*", Operation.READ, ALLOW)
    with pytest.raises(InvalidRequestError):
        AccessControlEntry(ALICE, "*", Operation.ANY, ALLOW)
    with pytest.raises(InvalidRequestError):
        Operation.parse("Fly")


def test_names_parse_leniently_and_codes_are_kafkas() -> None:
    assert Operation.parse("cluster_action") is Operation.CLUSTER_ACTION
    assert Operation.parse("IdempotentWrite") is Operation.IDEMPOTENT_WRITE
    assert ResourceType.parse("transactional-id") is TXN
    assert PatternType.parse("PREFIXED") is PatternType.PREFIXED
    assert (TOPIC.code, GROUP.code, CLUSTER.code, TXN.code) == (2, 3, 4, 5)
    assert (Operation.READ.code, Operation.IDEMPOTENT_WRITE.code, ALLOW.code, DENY.code) == (3, 12, 3, 2)
    assert ResourceType.from_code(4) is CLUSTER
    with pytest.raises(InvalidRequestError):
        ResourceType.from_code(0)


def test_filters() -> None:
    bindings = [AclBinding(topic("orders"), entry(ALICE, Operation.READ)),
                AclBinding(topic("*"), entry(BOB, Operation.WRITE)),
                AclBinding(topic("ord", PatternType.PREFIXED), entry(ALICE, Operation.WRITE, DENY)),
                AclBinding(ResourcePattern(GROUP, "g"), entry(ALICE, Operation.READ))]
    rules = AclRules()
    for binding in bindings:
        rules.set_acls(binding.pattern, rules.acls(binding.pattern) | {binding.entry})
    assert {b.pattern.name for b in rules.bindings(AclBindingFilter())} == {"orders", "*", "g"}
    assert {b.pattern.name for b in rules.bindings(AclBindingFilter(pattern_type=PatternType.ANY))} == \
        {"orders", "*", "ord", "g"}
    assert {b.pattern.name for b in rules.bindings(AclBindingFilter(TOPIC, "orders", PatternType.MATCH))} == \
        {"orders", "*", "ord"}
    assert {b.pattern.name for b in rules.bindings(AclBindingFilter(TOPIC, "ord", PatternType.PREFIXED))} == {"ord"}
    assert [b.pattern.name for b in rules.bindings(AclBindingFilter(TOPIC, pattern_type=PatternType.LITERAL))] == \
        ["*", "orders"]
    assert {b.pattern.resource_type for b in rules.bindings(
        AclBindingFilter(pattern_type=PatternType.ANY, principal=ALICE, permission=ALLOW))} == {TOPIC, GROUP}
    denied_writes = AclBindingFilter(pattern_type=PatternType.ANY, operation=Operation.WRITE, permission=DENY)
    assert [b.pattern.name for b in rules.bindings(denied_writes)] == ["ord"]


def test_parse_super_users() -> None:
    assert parse_super_users("User:a; User:b;") == ["User:a", "User:b"]
    assert parse_super_users("") == []
    with pytest.raises(InvalidRequestError):
        parse_super_users("admin")
