"""Transactional offset commits in the group coordinator's offset store: pending until the
producer's marker, then materialised (commit) or dropped (abort); OffsetFetch with
require_stable answers UNSTABLE_OFFSET_COMMIT meanwhile; loading a partition holds the commits
of transactions still open and applies the markers found in the log.

The offsets partition is a real partition log in a temporary directory; transactional batches
and markers are the bytes a broker stores.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kafkalite.broker.group import Group
from kafkalite.broker.group_api import CommitPartition
from kafkalite.broker.group_offsets import (
    OFFSETS_TOPIC,
    OffsetStore,
    ReplicaOffsetLog,
    ResolvedOffsets,
    replay,
    resolve_transactions,
)
from kafkalite.broker.group_records import OffsetKey
from kafkalite.config import BrokerConfig, LogConfig
from kafkalite.errors import BrokerResponseError, UnstableOffsetCommitError
from kafkalite.record.batch import build_batch
from kafkalite.record.control import ControlMarker, build_marker_batch
from kafkalite.storage.log import PartitionLog
from kafkalite.storage.validation import check_batches

GROUP = "copier"
PRODUCER = 4000
KeyedRecords = list[tuple[bytes, bytes | None]]


class PartitionOffsetLog:
    """The OffsetLog seam over one real partition log (partition 0)."""

    def __init__(self, directory: Path) -> None:
        self.log = PartitionLog(directory / "__consumer_offsets-0", "__consumer_offsets", 0, LogConfig())
        self.sequence = 0

    async def append(self, partition: int, records: KeyedRecords) -> BrokerResponseError | None:
        self.log.append_as_leader(build_batch([value for _, value in records], keys=[key for key, _ in records]), 0)
        return None

    async def append_transactional(self, partition: int, records: KeyedRecords, producer_id: int,
                                   producer_epoch: int) -> BrokerResponseError | None:
        batch = build_batch([value for _, value in records], keys=[key for key, _ in records],
                            producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=self.sequence,
                            transactional=True)
        self.sequence += len(records)
        self.log.append_as_leader(batch, 0)
        return None

    def marker(self, committed: bool) -> None:
        """The coordinator's marker, appended as a partition leader appends one."""
        batch = build_marker_batch(PRODUCER, 0, ControlMarker(committed, 1), 0)
        self.log.append_checked_as_leader(check_batches(batch, self.log.config, from_client=False), 0)

    async def read_resolved(self, partition: int) -> ResolvedOffsets:
        return ResolvedOffsets(0).extended(self.log.batches(0))


def commit(offset: int, partition: int = 0) -> list[CommitPartition]:
    return [CommitPartition("input", partition, offset)]


def test_pending_commits_take_effect_at_commit_and_vanish_at_abort(tmp_path: Path) -> None:
    async def scenario() -> None:
        offset_log = PartitionOffsetLog(tmp_path)
        store = OffsetStore(BrokerConfig(), offset_log)
        group = Group(GROUP, 0)
        groups = {GROUP: group}
        outcomes = await store.commit_transactional(group, commit(10), PRODUCER, 0, 1000)
        assert [outcome.error for outcome in outcomes] == [None]
        assert group.offsets == {}
        assert store.has_pending(GROUP, "input", 0)
        [stable] = store.committed_stable(GROUP, group, [("input", [0])])
        assert isinstance(stable.error, UnstableOffsetCommitError) and stable.offset == -1
        [plain] = store.committed(group, [("input", [0])])
        assert plain.offset == -1 and plain.error is None
        offset_log.marker(committed=True)
        store.complete_transaction(0, PRODUCER, True, lambda group_id, number: groups[group_id])
        assert group.offsets[("input", 0)].offset == 10
        assert not store.has_pending(GROUP, "input", 0)

        await store.commit_transactional(group, commit(20), PRODUCER, 0, 2000)
        offset_log.marker(committed=False)
        store.complete_transaction(0, PRODUCER, False, lambda group_id, number: groups[group_id])
        assert group.offsets[("input", 0)].offset == 10
        assert store.pending == {}

        await store.commit_transactional(group, commit(30), PRODUCER, 0, 3000)  # left open

        # a new coordinator reads the log: committed at the marker, aborted dropped, open pending
        resolved = await offset_log.read_resolved(0)
        records = resolved.records
        assert (records, resolved.open_transactions) == resolve_transactions(offset_log.log.batches(0))
        loaded = replay(records, 0, 5000, 0.0)
        assert loaded[GROUP].offsets[("input", 0)].offset == 10
        open_transactions = resolved.open_transactions
        assert list(open_transactions) == [PRODUCER]
        fresh = OffsetStore(BrokerConfig(), offset_log)
        fresh.load_pending(0, open_transactions)
        assert fresh.has_pending(GROUP, "input", 0)
        created: dict[str, Group] = {}
        fresh.complete_transaction(0, PRODUCER, True,
                                   lambda group_id, number: created.setdefault(group_id, Group(group_id, number)))
        assert created[GROUP].offsets[("input", 0)].offset == 30
        assert OffsetKey(GROUP, "input", 0).encode() in [key for key, _ in records]
    asyncio.run(scenario())


def test_unloading_a_partition_forgets_its_pending_commits(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = OffsetStore(BrokerConfig(), PartitionOffsetLog(tmp_path))
        group = Group(GROUP, 0)
        await store.commit_transactional(group, commit(5), PRODUCER, 0, 1000)
        store.unload_pending(0)
        assert store.pending == {} and not store.has_pending(GROUP, "input", 0)
    asyncio.run(scenario())


def test_a_marker_appended_while_a_load_reads_on_a_worker_is_in_what_the_load_adopts(tmp_path: Path) -> None:
    """The read the group coordinator loads a partition from runs on a worker thread; a commit
    marker the partition's leader appends meanwhile (on the event loop, where the coordinator
    does not own the partition yet and so ignores it) must still be in what the load adopts."""
    async def scenario() -> None:
        offset_log = PartitionOffsetLog(tmp_path)
        store = OffsetStore(BrokerConfig(), offset_log)
        group = Group(GROUP, 0)
        await store.commit_transactional(group, commit(42), PRODUCER, 0, 1000)
        loop = asyncio.get_running_loop()
        hosts: Any = SimpleNamespace(partitions={(OFFSETS_TOPIC, 0): SimpleNamespace(log=offset_log.log)})
        replica_log = ReplicaOffsetLog(BrokerConfig(), hosts)
        read_from = ReplicaOffsetLog._read_from
        reads: list[str] = []

        def read_then_marker(partition_log: Any, resolved: ResolvedOffsets) -> ResolvedOffsets:
            result = read_from(partition_log, resolved)
            if threading.current_thread() is not threading.main_thread() and not reads:
                appended = threading.Event()  # the marker lands after the worker's read, before it returns

                def marker() -> None:
                    offset_log.marker(committed=True)
                    appended.set()
                loop.call_soon_threadsafe(marker)
                assert appended.wait(10)
            reads.append("worker" if threading.current_thread() is not threading.main_thread() else "loop")
            return result

        replica_log._read_from = read_then_marker  # type: ignore[method-assign]
        resolved = await replica_log.read_resolved(0)
        assert reads == ["worker", "loop"]
        assert resolved.open_transactions == {}
        loaded = replay(resolved.records, 0, 5000, 0.0)
        assert loaded[GROUP].offsets[("input", 0)].offset == 42
    asyncio.run(scenario())
