"""The producer keeps going when a broker stops answering or leadership moves: leader hints in
NOT_LEADER answers, metadata refresh that skips a silent broker, a sender that never waits on one
broker, and close() that honours its timeout. Against scripted local brokers (aiohttp servers
speaking the metadata route and the binary channel)."""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from kafkalite import errors, protocol
from kafkalite.client.metadata import ClusterView, MetadataManager, leader_hint
from kafkalite.client.producer import AIOKafkaProducer
from kafkalite.client.types import TopicPartition
from kafkalite.transport import AsyncTransport

TOPIC = "t"
TP = TopicPartition(TOPIC, 0)
OK = struct.pack(">H", 200)


@dataclass
class ScriptedBroker:
    """One scripted broker: a metadata route answering ``metadata()`` and a binary channel whose
    produce answers come from ``produce(request)``; ``silent`` makes both never answer."""

    broker_id: int
    cluster: ScriptedCluster
    silent: bool = False
    produce_requests: int = 0
    metadata_requests: int = 0
    address: str = ""
    runner: web.AppRunner | None = None
    answers: dict[int, tuple[int, str]] = field(default_factory=dict)  # partition → (error code, message)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(protocol.METADATA, self._metadata)
        app.router.add_get(protocol.CHANNEL, self._channel)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.address = f"127.0.0.1:{port}"

    async def _hang_if_silent(self) -> None:
        while self.silent:
            await asyncio.sleep(0.05)

    async def _metadata(self, request: web.Request) -> web.Response:
        self.metadata_requests += 1
        await self._hang_if_silent()
        return web.json_response(self.cluster.metadata())

    async def _channel(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        async for message in socket:
            self.produce_requests += 1
            await self._hang_if_silent()
            produce = protocol.decode_produce_request(message.data[2:])
            results = []
            for item in produce.partitions:
                code, text = self.answers.get(item.partition, (0, ""))
                results.append(protocol.ProduceResult(item.topic, item.partition, code,
                                                      self.produce_requests if code == 0 else -1, -1, 0, text))
            await socket.send_bytes(OK + protocol.encode_produce_response(results))
        return socket

    async def stop(self) -> None:
        self.silent = False
        if self.runner is not None:
            await self.runner.cleanup()


class ScriptedCluster:
    """Brokers 1..n; every one answers metadata naming ``leaders`` (partition → broker id)."""

    def __init__(self, size: int, leaders: dict[int, int]) -> None:
        self.brokers = {broker_id: ScriptedBroker(broker_id, self) for broker_id in range(1, size + 1)}
        self.leaders = leaders
        self.epoch = 0

    async def start(self) -> ScriptedCluster:
        for broker in self.brokers.values():
            await broker.start()
        return self

    async def stop(self) -> None:
        for broker in self.brokers.values():
            await broker.stop()

    def metadata(self) -> dict[str, Any]:
        brokers = [protocol.BrokerEndpoint(broker.broker_id, "127.0.0.1", int(broker.address.rpartition(":")[2]))
                   for broker in self.brokers.values()]
        partitions = [protocol.PartitionMetadata(number, leader, self.epoch, sorted(self.brokers), sorted(self.brokers))
                      for number, leader in self.leaders.items()]
        return protocol.ClusterMetadata("scripted", 1, brokers, [protocol.TopicMetadata(TOPIC, partitions)]).to_json()

    def bootstrap(self, *broker_ids: int) -> str:
        return ",".join(self.brokers[broker_id].address for broker_id in broker_ids or sorted(self.brokers))


def test_leader_hint_is_read_from_not_leader_messages() -> None:
    assert leader_hint("broker 1 is not the leader of t-0 (leader is 3)") == 3
    assert leader_hint("broker 2 is not a replica of t-4 (leader is 12)") == 12
    assert leader_hint("t-0: leadership moved to broker 2") == 2
    assert leader_hint("broker 1 is not the leader of t-0 (leader is -1)") is None
    assert leader_hint("broker 1 is not serving: the ZooKeeper session expired") is None
    assert leader_hint("") is None and leader_hint(None) is None
    assert leader_hint("topic (leader is x)") is None


def test_a_hint_stands_until_metadata_with_a_newer_leader_epoch() -> None:
    def answer(leader: int, epoch: int) -> protocol.ClusterMetadata:
        return protocol.ClusterMetadata("c", 1, [protocol.BrokerEndpoint(i, "h", 9000 + i) for i in (1, 2, 3)],
                                        [protocol.TopicMetadata(TOPIC, [protocol.PartitionMetadata(0, leader, epoch,
                                                                                                   [1, 2, 3],
                                                                                                   [1, 2, 3])])])
    view = ClusterView().merged(answer(1, 4), [TOPIC], 0.0)
    hinted = view.with_hint(TP, 2)
    assert hinted.leader(TP) == 2 and view.leader(TP) == 1  # views stay immutable
    assert hinted.merged(answer(1, 4), [TOPIC], 1.0).leader(TP) == 2  # same epoch: stale, the hint stands
    assert hinted.merged(answer(1, 4), None, 1.0).leader(TP) == 2
    newer = hinted.merged(answer(3, 5), [TOPIC], 2.0)
    assert newer.leader(TP) == 3 and TP not in newer.hints  # newer epoch: the metadata wins
    assert hinted.without_hint(TP).merged(answer(1, 4), [TOPIC], 3.0).leader(TP) == 1


def test_metadata_with_an_older_leader_epoch_never_replaces_a_newer_leader() -> None:
    """Kafka's KIP-320 rule: a broker that missed the latest election (cut off from ZooKeeper)
    answers with the deposed leader and its older epoch; the client keeps the newer leader. A
    topic created again (another topic id) starts afresh."""
    def answer(leader: int, epoch: int, topic_id: str = "id-1") -> protocol.ClusterMetadata:
        partition = protocol.PartitionMetadata(0, leader, epoch, [1, 2, 3], [1, 2, 3])
        return protocol.ClusterMetadata("c", 1, [protocol.BrokerEndpoint(i, "h", 9000 + i) for i in (1, 2, 3)],
                                        [protocol.TopicMetadata(TOPIC, [partition], topic_id=topic_id)])
    view = ClusterView().merged(answer(1, 4), [TOPIC], 0.0).merged(answer(2, 5), [TOPIC], 1.0)
    assert (view.leader(TP), view.leader_epochs[TP]) == (2, 5)
    for requested in ([TOPIC], None):
        stale = view.merged(answer(1, 4), requested, 2.0)
        assert (stale.leader(TP), stale.leader_epochs[TP]) == (2, 5)
        assert 0 in stale.available[TOPIC]
    assert view.merged(answer(3, 6), [TOPIC], 3.0).leader(TP) == 3
    recreated = view.merged(answer(1, 0, topic_id="id-2"), [TOPIC], 4.0)
    assert (recreated.leader(TP), recreated.leader_epochs[TP]) == (1, 0)


def test_not_leader_hint_sends_the_retry_to_the_named_leader() -> None:
    """Every broker's metadata still names broker 1; broker 1 answers NOT_LEADER naming broker 2:
    the retry goes to broker 2 (without the hint it would go to broker 1 until the delivery
    timeout)."""
    async def scenario() -> None:
        cluster = await ScriptedCluster(2, {0: 1}).start()
        cluster.brokers[1].answers[0] = (errors.NotLeaderForPartitionError.errno,
                                         "broker 1 is not the leader of t-0 (leader is 2)")
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap(1), acks=1, enable_idempotence=False,
                                    retry_backoff_ms=20, linger_ms=0)
        await producer.start()
        try:
            started = time.monotonic()
            metadata = await asyncio.wait_for(producer.send_and_wait(TOPIC, b"value", partition=0), 5)
            assert metadata.offset == 1  # broker 2's first produce
            assert cluster.brokers[1].produce_requests == 1 and cluster.brokers[2].produce_requests == 1
            assert time.monotonic() - started < 2
            assert producer._core.metadata.view.leader(TP) == 2
        finally:
            await asyncio.wait_for(producer.stop(), 10)
            await cluster.stop()

    asyncio.run(scenario())


def test_metadata_refresh_skips_a_silent_broker() -> None:
    """A broker that accepts connections and never answers costs one short per-attempt timeout,
    then counts as failed and is asked last."""
    async def scenario() -> None:
        cluster = await ScriptedCluster(3, {0: 2}).start()
        cluster.brokers[1].silent = True
        transport = AsyncTransport(request_timeout_ms=30_000)
        manager = MetadataManager(transport, cluster.bootstrap(), request_timeout_ms=30_000,
                                  metadata_request_timeout_ms=1000)
        manager.add_topics([TOPIC])
        try:
            durations = []
            for _ in range(4):  # the rotation puts the silent broker first at least once
                started = time.monotonic()
                view = await manager.refresh()
                durations.append(time.monotonic() - started)
                assert view.leader(TP) == 2
            assert max(durations) < 2.5, durations
            assert sum(durations) < 3.5, durations  # asked once, then skipped while failed
            assert cluster.brokers[1].metadata_requests == 1
            assert manager._candidates()[-1] == cluster.brokers[1].address
        finally:
            await manager.close()
            await transport.close()
            await cluster.stop()

    asyncio.run(scenario())


def test_a_silent_leader_does_not_hold_back_other_leaders_partitions() -> None:
    """Broker 1 leads partition 0 and stops answering; broker 2's partition 1 keeps being
    acknowledged at once. When the metadata moves partition 0 to broker 2, its waiting record is
    resent there and acknowledged, long before the request timeout."""
    async def scenario() -> None:
        cluster = await ScriptedCluster(2, {0: 1, 1: 2}).start()
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap(2), acks=1, enable_idempotence=False,
                                    retry_backoff_ms=20, request_timeout_ms=30_000, metadata_request_timeout_ms=500)
        await producer.start()
        try:
            await asyncio.wait_for(producer.send_and_wait(TOPIC, b"warm-up", partition=0), 5)
            cluster.brokers[1].silent = True
            stuck = await producer.send(TOPIC, b"stuck", partition=0)
            for index in range(20):
                started = time.monotonic()
                await asyncio.wait_for(producer.send_and_wait(TOPIC, b"other-%d" % index, partition=1), 5)
                assert time.monotonic() - started < 0.5
            assert not stuck.done()
            cluster.leaders[0] = 2
            cluster.epoch += 1
            moved_at = time.monotonic()
            metadata = await asyncio.wait_for(stuck, 10)
            assert metadata.partition == 0 and time.monotonic() - moved_at < 4
        finally:
            cluster.brokers[1].silent = False
            await asyncio.wait_for(producer.stop(), 10)
            await cluster.stop()

    asyncio.run(scenario())


def test_close_with_a_timeout_fails_what_a_silent_leader_holds() -> None:
    """close(timeout) returns after about ``timeout`` even with requests waiting on a broker that
    never answers; their records fail instead of waiting for the request timeout."""
    async def scenario() -> None:
        cluster = await ScriptedCluster(1, {0: 1}).start()
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap(1), acks=1, enable_idempotence=False,
                                    request_timeout_ms=60_000)
        await producer.start()
        try:
            await asyncio.wait_for(producer.send_and_wait(TOPIC, b"warm-up", partition=0), 5)
            cluster.brokers[1].silent = True
            pending = await producer.send(TOPIC, b"never", partition=0)
            started = time.monotonic()
            await asyncio.wait_for(producer.stop(timeout=0.5), 10)
            assert time.monotonic() - started < 3
            with pytest.raises(errors.IllegalStateError):
                await pending
        finally:
            await cluster.stop()

    asyncio.run(scenario())


def test_timeouts_are_validated_and_capped() -> None:
    from kafkalite.client.producer import ProducerSettings

    settings = ProducerSettings.from_options({"bootstrap_servers": "h:1", "metadata_request_timeout_ms": 1500,
                                              "socket_connection_setup_timeout_ms": 2000})
    assert settings.metadata_request_timeout_ms == 1500 and settings.socket_connection_setup_timeout_ms == 2000
    with pytest.raises(errors.ConfigError):
        ProducerSettings.from_options({"bootstrap_servers": "h:1", "metadata_request_timeout_ms": 0})
    manager = MetadataManager(AsyncTransport(), "h:1", request_timeout_ms=1000, metadata_request_timeout_ms=5000)
    assert manager.metadata_request_timeout_ms == 1000  # never longer than the request timeout


def test_reconnect_backoff_stays_capped_after_many_failures_in_a_row() -> None:
    """A broker down for a long time: thousands of failed connections in a row keep the backoff at
    reconnect.backoff.max.ms (no overflow of the doubling)."""
    async def scenario() -> list[float]:
        transport = AsyncTransport()
        try:
            backoffs = []
            for failures in range(1, 5001):
                transport.note_failure("127.0.0.1:1")
                if failures in (1, 2, 5, 1100, 5000):
                    backoffs.append(transport.reconnect_backoff("127.0.0.1:1"))
            return backoffs
        finally:
            await transport.close()
    first, second, fifth, many, most = asyncio.run(scenario())
    assert 0 < first <= 0.05 and first < second <= 0.1
    assert fifth <= 1.0 and many <= 1.0 and most <= 1.0
