"""The broker's quota hooks: what a produce or fetch costs, throttled fetches, follower fetches."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from kafkalite import protocol
from kafkalite.broker.quotas import BrokerQuotas, client_id_of_agent
from kafkalite.config import BrokerConfig
from kafkalite.security.principal import ANONYMOUS, KafkaPrincipal
from kafkalite.security.quota import DEFAULT_ENTITY


def quotas(entities: dict[tuple[str | None, str | None], dict[str, str]]) -> tuple[BrokerQuotas, list[float]]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    def configs(user: str | None, client: str | None) -> Mapping[str, str]:
        return entities.get((user, client), {})

    return BrokerQuotas(BrokerConfig(), configs, sleep=sleep), slept


def test_client_id_comes_from_the_kafkalite_user_agent() -> None:
    assert client_id_of_agent("kafkalite/orders-app") == "orders-app"
    assert client_id_of_agent("curl/8.0") == "curl/8.0"
    assert client_id_of_agent(None) == ""


def test_produce_counts_record_bytes_per_user_quota() -> None:
    broker, _ = quotas({("alice", None): {"producer_byte_rate": "100"}})
    batch = [protocol.ProducePartition("t", 0, b"x" * 1000)]
    assert broker.record_produce(KafkaPrincipal.user("bob"), "app", batch) == 0
    assert broker.record_produce(ANONYMOUS, "app", batch) == 0
    # 1000 B over the 10 s minimum window is exactly the bound; the next 1000 B double it.
    assert broker.record_produce(KafkaPrincipal.user("alice"), "app", batch) == 0
    assert broker.record_produce(KafkaPrincipal.user("alice"), "other-app", batch) == 10_000


def test_a_throttled_fetch_goes_without_records_and_is_not_counted() -> None:
    broker, _ = quotas({(None, DEFAULT_ENTITY): {"consumer_byte_rate": "100"}})
    results = [protocol.FetchResult("t", 0, records=b"r" * 1500), protocol.FetchResult("t", 1, records=b"")]
    answer, throttle = broker.record_fetch(ANONYMOUS, "c", results)
    assert throttle == 5000 and all(not result.records for result in answer)
    assert answer[0].partition == 0 and results[0].records  # the caller's results are left alone
    answer, throttle = broker.record_fetch(ANONYMOUS, "c", [protocol.FetchResult("t", 0, records=b"r" * 900)])
    assert throttle == 0 and answer[0].records


def test_http_fetch_holds_the_answer_but_never_a_followers() -> None:
    broker, slept = quotas({(None, DEFAULT_ENTITY): {"consumer_byte_rate": "10"}})
    records = [protocol.FetchResult("t", 0, records=b"r" * 1000)]
    follower = protocol.FetchRequest([], replica_id=2)
    assert asyncio.run(broker.hold_http_fetch(follower, records)) is records and slept == []
    consumer = protocol.FetchRequest([])
    answer = asyncio.run(broker.hold_http_fetch(consumer, records))
    assert answer[0].records == b"" and slept == [11.0]  # capped at quota.window.num x size
    assert broker.throttle_totals()["consumer_byte_rate"] == (1, 11_000)
