"""The schema registry across broker restarts and the failover of the ``_schemas`` leader.

Schemas registered before a kill -9 of the broker leading ``_schemas``-0 keep their ids and
versions on every surviving broker; registrations through two brokers at once after the
failover get fresh, distinct ids (never one handed out before); the killed broker comes back
with the same view; after a restart of the whole cluster everything is still there.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kafkalite.registry.client import RegistryClient
from kafkalite.registry.errors import SchemaRegistryError
from tests.support.cluster import BrokerCluster, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory, zookeeper, "schema-registry-failover") as brokers:
        yield brokers


def url(cluster: BrokerCluster, broker_id: int) -> str:
    return f"http://{cluster.brokers[broker_id].address}/registry"


def schema(name: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": "f", "type": "int"}]})


def register_until_done(cluster: BrokerCluster, broker_id: int, subject: str, text: str, timeout: float = 60) -> int:
    """Register, retrying the registry's retriable errors (no leader yet, forwarding failed)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return RegistryClient(url(cluster, broker_id), timeout=10).register(subject, text)
        except SchemaRegistryError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def view_of(cluster: BrokerCluster, broker_id: int,
            subjects: dict[str, int]) -> dict[str, tuple[int, list[int]]] | None:
    """Each subject's latest id and its versions as the broker answers them; None while the
    broker refuses reads with a retriable error (it has not read ``_schemas`` yet). Any other
    error, a 404 for a subject that exists above all, fails the test."""
    client = RegistryClient(url(cluster, broker_id))
    try:
        return {name: (client.version(name, "latest").schema_id, client.versions(name)) for name in subjects}
    except SchemaRegistryError as exc:
        if exc.retriable:
            return None
        raise


def schemas_leader(cluster: BrokerCluster, broker_id: int) -> int:
    return int(cluster.wait_for(lambda: next((item["leader"] for item in cluster.partitions("_schemas", broker_id)
                                              if item["leader"] > 0), None), 30, "a _schemas leader"))


def test_ids_and_versions_survive_leader_kill_and_restarts(cluster: BrokerCluster) -> None:
    run = uuid.uuid4().hex[:6]
    before: dict[str, int] = {}
    for number in range(6):
        name = f"fo-{run}-{number}"
        before[name] = register_until_done(cluster, 1 + number % 3, name, schema(f"Before{number}"))
    evolved = f"fo-{run}-0"
    register_until_done(cluster, 2, evolved, json.dumps({"type": "record", "name": "Before0", "fields": [
        {"name": "f", "type": "int"}, {"name": "g", "type": "int", "default": 0}]}))
    expected = view_of(cluster, 1, before)
    assert expected is not None and expected[evolved][1] == [1, 2]
    cluster.wait_in_sync("_schemas")

    leader = schemas_leader(cluster, 1)
    cluster.brokers[leader].kill()
    survivors = [broker_id for broker_id in cluster.brokers if broker_id != leader]
    cluster.wait_for(lambda: schemas_leader(cluster, survivors[0]) in survivors, 60, "a new _schemas leader")
    for broker_id in survivors:  # the new leader's high watermark covers them once its follower fetched
        assert cluster.wait_for(lambda b=broker_id: view_of(cluster, b, before) == expected, 30,
                                f"broker {broker_id}'s view after the failover")

    after: dict[str, int] = {}
    errors: list[BaseException] = []

    def register(broker_id: int, number: int) -> None:
        name = f"fo-{run}-after-{broker_id}-{number}"
        try:
            after[name] = register_until_done(cluster, broker_id, name, schema(f"After{broker_id}x{number}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=register, args=(broker_id, number))
               for broker_id in survivors for number in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert errors == []
    old_ids = {schema_id for schema_id, _ in expected.values()}
    assert len(after) == 6 and len(set(after.values())) == 6
    assert min(after.values()) > max(old_ids)

    cluster.brokers[leader].start()
    cluster.brokers[leader].wait_ready()
    everything = {**before, **after}
    cluster.wait_for(lambda: view_of(cluster, leader, everything) == view_of(cluster, survivors[0], everything),
                     30, "the restarted broker's view")

    final = view_of(cluster, survivors[0], everything)
    assert final is not None
    for broker in cluster.brokers.values():
        broker.stop()
    for broker in cluster.brokers.values():
        broker.start()
    for broker in cluster.brokers.values():
        broker.wait_ready()
    for broker_id in cluster.brokers:
        assert cluster.wait_for(lambda b=broker_id: view_of(cluster, b, everything) == final, 60,
                                f"broker {broker_id}'s view after the restart")
    fresh = register_until_done(cluster, 3, f"fo-{run}-last", schema("Last"))
    assert fresh > max(schema_id for schema_id, _ in final.values())
