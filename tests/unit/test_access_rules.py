"""Every API the brokers serve has an authorization rule (or is deliberately open), so a new API
cannot slip past the authorizer unnoticed."""

from __future__ import annotations

from kafkalite import protocol
from kafkalite.broker import access, acl_http
from kafkalite.broker.kafka import access as kafka_access
from kafkalite.broker.kafka.registry import ApiRegistry

#: Kafka APIs open to everyone (ApiVersions, SaslHandshake, DescribeCluster, as in Kafka) or
#: filtered rather than refused (Metadata, ListGroups, ListTransactions), and the two split
#: partition by partition (Produce, Fetch).
OPEN_OR_FILTERED_KAFKA = {18, 17, 36, 60, 3, 16, 66, 0, 1}  # 17, 36: the SASL handshake

#: HTTP routes that need nothing (health, docs, cluster description, the console's read-only
#: views, the schema registry's own API) or are checked elsewhere (produce, fetch and the binary
#: channel per partition; metadata and list-groups filtered).
OPEN_OR_FILTERED_HTTP = {protocol.HEALTH, protocol.READY, protocol.METRICS, protocol.API_VERSIONS, protocol.OPENAPI,
                         protocol.DESCRIBE_CLUSTER, protocol.METADATA, protocol.LIST_GROUPS, protocol.PRODUCE,
                         protocol.FETCH, protocol.CHANNEL, protocol.LIST_TRANSACTIONS}


def test_every_kafka_api_has_a_rule() -> None:
    served = set(ApiRegistry.default().handlers)
    unruled = served - set(kafka_access.KAFKA_NEEDS) - set(kafka_access.ITEM_SPLITS) - OPEN_OR_FILTERED_KAFKA
    assert unruled == set()


def test_every_http_route_has_a_rule() -> None:
    routes = {value for name, value in vars(protocol).items()
              if name.isupper() and isinstance(value, str) and value.startswith(protocol.PREFIX + "/")}
    routes |= {protocol.HEALTH, protocol.READY, protocol.METRICS}
    assert routes - set(access.HTTP_NEEDS) - set(access.HTTP_SPLITS) - OPEN_OR_FILTERED_HTTP == set()
    assert {acl_http.CREATE_ACLS, acl_http.DESCRIBE_ACLS, acl_http.DELETE_ACLS} <= set(access.HTTP_NEEDS)
