"""The broker's quota hooks: what a produce or fetch costs, throttled fetches, follower fetches."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import pytest

from kafkalite import protocol
from kafkalite.broker.quotas import BrokerQuotas, LoopTimer, client_id_of_agent
from kafkalite.config import BrokerConfig
from kafkalite.security.principal import ANONYMOUS, KafkaPrincipal
from kafkalite.security.quota import DEFAULT_ENTITY


def quotas(entities: dict[tuple[str | None, str | None], dict[str, str]]) -> tuple[BrokerQuotas, list[float]]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    def configs(user: str | None, client: str | None) -> Mapping[str, str]:
        return entities.get((user, client), {})

    # a clock that stands still: a throttle is computed from the bytes alone, not from how long
    # the test took between two requests
    return BrokerQuotas(BrokerConfig(), configs, sleep=sleep, clock=lambda: 1_000.0), slept


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


class Cache:
    """The parts of the broker's entity cache quotas use."""

    def __init__(self) -> None:
        self.stored: dict[str, dict[str, str]] = {}
        self.listeners: list[Callable[[str], None]] = []
        self.lookups = 0

    def entity_configs(self, user: str | None, client_id: str | None) -> dict[str, str]:
        self.lookups += 1
        path = "/".join(part for part in (f"users/{user}" if user is not None else "",
                                          f"clients/{client_id}" if client_id is not None else "") if part)
        return dict(self.stored.get(path, {}))

    def entities(self) -> dict[str, dict[str, str]]:
        return dict(self.stored)

    def add_listener(self, listener: Callable[[str], None]) -> None:
        self.listeners.append(listener)

    def put(self, path: str, configs: dict[str, str]) -> None:
        self.stored[path] = configs
        for listener in self.listeners:
            listener(path)


def test_nothing_is_counted_until_an_entity_sets_a_quota() -> None:
    cache = Cache()
    broker = BrokerQuotas.following(BrokerConfig(), cast(Any, cache))
    batch = [protocol.ProducePartition("t", 0, b"x" * 10**6)]
    cache.put("users/alice", {"SCRAM-SHA-256": "salt=..."})
    assert broker.record_produce(ANONYMOUS, "app", batch) == 0 and cache.lookups == 0
    cache.put("clients/app", {"producer_byte_rate": "1000"})
    assert broker.record_produce(ANONYMOUS, "app", batch) > 0 and cache.lookups > 0


def test_http_answers_carry_the_throttle_time_header_and_the_agents_client_id() -> None:
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    broker, slept = quotas({(None, "slow"): {"producer_byte_rate": "100"}})
    produce = protocol.ProduceRequest(1, 1000, [protocol.ProducePartition("t", 0, b"x" * 2000)])

    async def handler(request: web.Request) -> web.Response:
        await broker.hold_http_produce(produce)
        return web.Response(text="ok")

    async def scenario() -> tuple[str | None, str | None]:
        app = web.Application(middlewares=[broker.http_middleware(lambda request: ANONYMOUS)])
        app.router.add_post("/produce", handler)
        async with TestClient(TestServer(app)) as client:
            fast = await client.post("/produce", headers={"User-Agent": "kafkalite/fast"})
            slow = await client.post("/produce", headers={"User-Agent": "kafkalite/slow"})
            return fast.headers.get("Throttle-Time-Ms"), slow.headers.get("Throttle-Time-Ms")

    assert asyncio.run(scenario()) == (None, "10000")  # 2000 B over 10 s: twice the bound
    assert slept == [10.0]


def test_mute_holds_only_for_a_throttle() -> None:
    broker, slept = quotas({})
    asyncio.run(broker.mute(0))
    asyncio.run(broker.mute(250))
    assert slept == [0.25]


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_loop_timer_counts_the_steps_of_its_coroutine_and_not_its_waits() -> None:
    async def handler() -> str:
        _busy(0.02)
        await asyncio.sleep(0.3)  # waiting: not counted
        _busy(0.02)
        return "answer"

    async def main() -> tuple[str, float]:
        timer = LoopTimer(handler())
        return await timer, timer.seconds

    result, seconds = asyncio.run(main())
    assert result == "answer"
    assert 0.04 <= seconds < 0.2


def test_loop_timer_passes_exceptions_and_cancellation_through() -> None:
    cleaned: list[str] = []

    async def failing() -> None:
        _busy(0.01)
        raise ValueError("bad request")

    async def waiting() -> None:
        try:
            await asyncio.sleep(30)
        finally:
            cleaned.append("cancelled inside")

    async def main() -> float:
        timer = LoopTimer(failing())
        with pytest.raises(ValueError, match="bad request"):
            await timer
        task = asyncio.ensure_future(LoopTimer(waiting()))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return timer.seconds

    assert asyncio.run(main()) >= 0.01
    assert cleaned == ["cancelled inside"]


def test_request_time_is_counted_in_percent_of_a_second_against_request_percentage() -> None:
    broker, _ = quotas({(None, "busy"): {"request_percentage": "1"}})  # 10 ms of broker time per second
    assert broker.record_request_time(ANONYMOUS, "idle", 5.0) == 0  # no quota for this client id
    assert broker.record_request_time(ANONYMOUS, "busy", 0.001) == 0  # 0.1 % of the window
    throttle = broker.record_request_time(ANONYMOUS, "busy", 0.5)  # 50 %: far above 1 %
    assert 0 < throttle <= 1000  # capped at one window
