"""The live broker against its own OpenAPI description (docs/openapi.yaml, served at
/v1/openapi.json), with schemathesis: every operation, a bounded number of generated requests
each — valid ones (positive mode) and ones that break the description (negative mode) — no
server error, and every answer conforms to the description (status, content type, body
schema)."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator
from typing import Any

import hypothesis
import hypothesis.errors
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from kafkalite import protocol
from tests.support.cluster import BrokerCluster, http

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES_PER_OPERATION = 40
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]
#: Generated values the test keeps small, so that a run stays short: partition counts (a topic
#: of 100,000 partitions is valid but takes minutes on a test machine) and long-poll waits.
_NARROW = {"num_partitions": 3, "count": 3, "replication_factor": 1, "timeout_ms": 200,
           "session_timeout_ms": 2000, "rebalance_timeout_ms": 1000}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    connect = f"{zookeeper.connect_string}/openapi-{uuid.uuid4().hex[:8]}"
    cluster = BrokerCluster(tmp_path_factory.mktemp("openapi"), connect, size=1,
                            extra_properties={"auto.create.topics.enable": "false"}).start()
    try:
        cluster.create_topic("described", partitions=2, replication_factor=1)
        cluster.wait_in_sync("described")
        yield cluster
    finally:
        cluster.stop()


def narrowed(document: dict[str, Any]) -> dict[str, Any]:
    """A copy of the description whose generated sizes and waits stay small (see _NARROW)."""
    result = copy.deepcopy(document)
    stack: list[Any] = [result]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for name, value in item.items():
                if name in _NARROW and isinstance(value, dict) and value.get("type") == "integer":
                    value["maximum"] = min(value.get("maximum", _NARROW[name]), _NARROW[name])
                stack.append(value)
            if item.get("in") == "query" and item.get("name") in _NARROW:
                item["schema"]["maximum"] = _NARROW[item["name"]]
        elif isinstance(item, list):
            stack.extend(item)
    return result


def described(error: BaseException) -> str:
    """The error's text and, for a group (hypothesis reports a flaky example as one), its members'."""
    text = f"{type(error).__name__}: {error}"
    for member in getattr(error, "exceptions", ()):
        text += "\n  - " + described(member).replace("\n", "\n    ")
    return text


def test_the_served_description_lists_every_route(broker: BrokerCluster) -> None:
    address = broker.brokers[1].address
    document = http(address, "GET", protocol.OPENAPI)
    described = set(document["paths"])
    served = set(http(address, "GET", protocol.API_VERSIONS)["apis"])
    assert served - described == set(), "routes without a description"
    assert described - served == set(), "described routes the broker does not serve"


def test_the_broker_conforms_to_its_openapi_description(broker: BrokerCluster) -> None:
    address = broker.brokers[1].address
    base_url = f"http://{address}"
    schema = schemathesis.openapi.from_dict(narrowed(http(address, "GET", protocol.OPENAPI)))
    failures: list[str] = []
    calls = 0
    started = time.monotonic()
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation, mode in [(operation, mode) for operation in operations
                            for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)]:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck), phases=[hypothesis.Phase.generate])
        def exercise(case: Any) -> None:
            nonlocal calls
            calls += 1
            if isinstance(case.body, dict) and isinstance(case.body.get("group_id"), str):
                # Each example gets a group of its own: a join would otherwise wait out the
                # rebalance timeout of members an earlier example left in the same group.
                case.body["group_id"] = f"{case.body['group_id']}~{calls}"
            case.call_and_validate(base_url=base_url, checks=CHECKS, timeout=30)

        try:
            exercise()
        except hypothesis.errors.Unsatisfiable:  # no input to break (GET /health): nothing negative to send
            assert mode is schemathesis.GenerationMode.NEGATIVE
        except Exception as exc:  # one failure per operation is enough to report it
            failures.append(f"{operation.method.upper()} {operation.path} ({mode.value}): {described(exc)[:4000]}")
    elapsed = time.monotonic() - started
    print(f"schemathesis: {calls} requests over {len(operations)} operations in {elapsed:.1f} s, "
          f"{len(failures)} failures")
    assert failures == [], "\n\n".join(failures)
    assert calls >= 10 * len(operations)
    log = broker.brokers[1].log_path.read_text(errors="replace")
    assert [line for line in log.splitlines() if "] ERROR " in line or line.startswith("Traceback")] == []
