"""Rebalance benchmark: how fast a consumer group settles after a member joins, and how many
partitions stop (are revoked) on the way, eager against cooperative-sticky.

Starts one ZooKeeper and three brokers, creates a 60-partition topic, and for each protocol
forms a group of 20 asyncio consumers (one event loop, one poll task each), waits until it is
stable, then adds members one at a time (``--joins``, default 3). For each join it prints:

* the settle time — from the new consumer's ``subscribe()`` until every partition is owned by
  exactly one member and every member owns its fair share (2 or 3 of 60 with 21 members),
  follow-up rebalances included (target: ≤ 3 s);
* how many partitions were revoked (paused) meanwhile, over all members.

The eager run uses the default strategies ``[range, cooperative-sticky]`` (an EAGER rebalance
with ``range``); the cooperative run uses ``[cooperative-sticky]`` alone. Members learn of a
rebalance through their heartbeat, so ``--heartbeat-ms`` (default 1000) bounds the detection
delay; Kafka's default 3000 ms is a plain flag away. It is a program to read the figures of, not
a timed test. Run: ``python -m kafkalite.bench.rebalance [--consumers 20 --partitions 60]``.

Concurrency: everything runs on the main thread's event loop; brokers are processes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kafkalite.bench.local_cluster import start_cluster
from kafkalite.client import AIOKafkaAdminClient, AIOKafkaConsumer, ConsumerRebalanceListener, NewTopic, TopicPartition

PROTOCOLS = {"eager": None, "cooperative": ["cooperative-sticky"]}


class BenchMember(ConsumerRebalanceListener):
    """One consumer and its poll task; counts what it revoked and when."""

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self.consumer = consumer
        self.owned: set[TopicPartition] = set()
        self.revoked: list[tuple[float, int]] = []
        self.task: asyncio.Task[None] | None = None

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.revoked.append((time.monotonic(), len(revoked)))
        self.owned -= revoked

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.on_partitions_revoked(lost)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.owned |= assigned

    async def run(self) -> None:
        while True:
            await self.consumer.getmany(timeout_ms=200)


async def _add_member(bootstrap: str, topic: str, group: str, options: dict[str, Any],
                      members: list[BenchMember], index: int) -> BenchMember:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=f"bench-{index}", **options)
    await consumer.start()
    member = BenchMember(consumer)
    consumer.subscribe([topic], listener=member)
    member.task = asyncio.get_running_loop().create_task(member.run())
    members.append(member)
    return member


def _settled(members: list[BenchMember], partitions: int) -> bool:
    owned = [tp for member in members for tp in member.owned]
    if len(owned) != partitions or len(set(owned)) != partitions:
        return False
    low = partitions // len(members)
    return all(low <= len(member.owned) <= low + (1 if partitions % len(members) else 0) for member in members)


async def _wait_settled(members: list[BenchMember], partitions: int, timeout: float) -> float:
    started = time.monotonic()
    while not _settled(members, partitions):
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"the group did not settle within {timeout} s")
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def run_protocol(bootstrap: str, topic: str, name: str, consumers: int, partitions: int, joins: int,
                       heartbeat_ms: int, session_ms: int) -> list[tuple[float, int]]:
    group = f"bench-{name}-{uuid.uuid4().hex[:6]}"
    options: dict[str, Any] = {"heartbeat_interval_ms": heartbeat_ms, "session_timeout_ms": session_ms,
                               "enable_auto_commit": False, "auto_offset_reset": "latest"}
    if PROTOCOLS[name] is not None:
        options["partition_assignment_strategy"] = PROTOCOLS[name]
    members: list[BenchMember] = []
    results: list[tuple[float, int]] = []
    try:
        started = time.monotonic()
        for index in range(consumers):
            await _add_member(bootstrap, topic, group, options, members, index)
        await _wait_settled(members, partitions, 120)
        formed = time.monotonic() - started
        print(f"  {name:<12} {consumers} consumers formed the group in {formed:5.2f} s", flush=True)
        await asyncio.sleep(2 * heartbeat_ms / 1000)  # let follow-ups and stragglers finish
        for join in range(joins):
            before = sum(count for member in members for _, count in member.revoked)
            joined_at = time.monotonic()
            await _add_member(bootstrap, topic, group, options, members, consumers + join)
            await _wait_settled(members, partitions, 120)
            settle = time.monotonic() - joined_at
            await asyncio.sleep(0.5)
            revoked = sum(count for member in members for moment, count in member.revoked if moment >= joined_at)
            assert revoked == sum(count for member in members for _, count in member.revoked) - before
            results.append((settle, revoked))
            print(f"  {name:<12} join #{join + 1} ({len(members)} members): settled in {settle:5.2f} s, "
                  f"{revoked:3d} of {partitions} partitions revoked (paused) on the way", flush=True)
            await asyncio.sleep(2 * heartbeat_ms / 1000)
    finally:
        for member in members:
            if member.task is not None:
                member.task.cancel()
        await asyncio.gather(*(member.task for member in members if member.task is not None), return_exceptions=True)
        await asyncio.gather(*(member.consumer.stop(autocommit=False) for member in members), return_exceptions=True)
    return results


async def bench(bootstrap: str, consumers: int, partitions: int, joins: int, heartbeat_ms: int,
                session_ms: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    topic = f"bench-rebalance-{uuid.uuid4().hex[:6]}"
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)], timeout_ms=60_000)
    finally:
        await admin.close()
    summary = {}
    for name in PROTOCOLS:
        summary[name] = await run_protocol(bootstrap, topic, name, consumers, partitions, joins, heartbeat_ms,
                                           session_ms)
    print()
    print(f"{'protocol':<12} {'median settle':>14} {'worst settle':>13} {'revoked per join':>17}")
    for name, results in summary.items():
        settles = [settle for settle, _ in results]
        revoked = [count for _, count in results]
        print(f"{name:<12} {statistics.median(settles):13.2f}s {max(settles):12.2f}s "
              f"{statistics.mean(revoked):17.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--consumers", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=60)
    parser.add_argument("--joins", type=int, default=3, help="members added one at a time after the group formed")
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    parser.add_argument("--session-ms", type=int, default=10_000)
    parser.add_argument("--bootstrap", help="use running brokers instead of starting ZooKeeper and three brokers")
    args = parser.parse_args(argv)
    settings = (args.consumers, args.partitions, args.joins, args.heartbeat_ms, args.session_ms)
    if args.bootstrap:
        asyncio.run(bench(args.bootstrap, *settings))
        return 0
    with tempfile.TemporaryDirectory(prefix="kafkalite-bench-") as directory:
        zookeeper, cluster = start_cluster(Path(directory), 3)
        try:
            print(f"3 brokers at {cluster.bootstrap}; {args.consumers} consumers on {args.partitions} partitions, "
                  f"heartbeat {args.heartbeat_ms} ms, session {args.session_ms} ms", flush=True)
            asyncio.run(bench(cluster.bootstrap, *settings))
        finally:
            cluster.stop()
            zookeeper.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
