"""zookeeper.set.acl and zookeeper.digest.auth: the settings and Kafka's ACLs per path."""

from __future__ import annotations

import pytest
from kazoo.security import ACL, Permissions

from kafkalite.config import BrokerConfig
from kafkalite.coord.zk import ZooKeeperClient, secure_acl
from kafkalite.errors import ConfigError


def test_set_acl_without_credentials_stops_the_broker_with_a_named_error() -> None:
    with pytest.raises(ConfigError, match=r"zookeeper\.set\.acl=true .*zookeeper\.digest\.auth"):
        BrokerConfig.from_properties({"zookeeper.set.acl": "true"})
    with pytest.raises(ConfigError, match=r"zookeeper\.digest\.auth must be user:password"):
        BrokerConfig.from_properties({"zookeeper.digest.auth": "no-colon"})
    config = BrokerConfig.from_properties({"zookeeper.set.acl": "true", "zookeeper.digest.auth": "broker:pw"})
    assert config.zookeeper_auth_data() == [("digest", "broker:pw")]
    assert BrokerConfig.from_properties({}).zookeeper_auth_data() == []
    with pytest.raises(ValueError, match="auth_data"):
        ZooKeeperClient("127.0.0.1:2181", secure_acls=True)


def test_secure_acls_are_creator_all_plus_world_read_except_sensitive_paths() -> None:
    def rights(acls: list[ACL]) -> set[tuple[str, str, int]]:
        return {(acl.id.scheme, acl.id.id, acl.perms) for acl in acls}

    everyone_reads = ("world", "anyone", Permissions.READ)
    assert rights(secure_acl("/brokers/ids/1")) == {("auth", "", Permissions.ALL), everyone_reads}
    for sensitive in ("/config/users", "/config/users/alice", "/config/brokers/1"):
        assert rights(secure_acl(sensitive)) == {("auth", "", Permissions.ALL)}
    assert ("world", "anyone", Permissions.READ) in rights(secure_acl("/config/usersx"))
    assert ("world", "anyone", Permissions.READ) in rights(secure_acl("/config"))
