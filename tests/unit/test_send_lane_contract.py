"""The compiled send path (kafkalite.client._speedups) against its pure-Python twin.

Two producer cores get the same sequence of ``send()`` calls, one through
``ProducerCore.send_plain`` and one through the compiled ``SendLane``; afterwards their
accumulators must hold the same batches (values, keys, timestamps, sizes, memory, closed flags)
and every send must have answered alike: a future with the same fields and the same batch, or
None (the general path's turn). The sequences mix keyed and keyless records, explicit
timestamps, sizes that fill and close batches, a full ``buffer_memory``, unknown topics, other
record shapes, a closed producer and a transaction. The compiled FutureFields must make the same
RecordMetadata as the Python twin.
"""

from __future__ import annotations

import gc
import random
import sys
import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kafkalite.client import futures
from kafkalite.client.accumulator import ProducerBatch, RecordAccumulator, _PartitionState
from kafkalite.client.futures import BatchResult, PyFutureFields, RecordFuture
from kafkalite.client.metadata import ClusterView
from kafkalite.client.partitioner import DefaultPartitioner
from kafkalite.client.producer import ProducerSettings
from kafkalite.client.producer_core import ProducerCore
from kafkalite.client.types import RecordMetadata, TopicPartition

try:
    from kafkalite.client import _speedups as compiled
except ImportError:  # pragma: no cover - a machine without a compiler
    pytest.skip("the compiled extension is not built (no C compiler at install time)", allow_module_level=True)

if not issubclass(RecordFuture, compiled.FutureFields):
    pytest.skip("KAFKALITE_NO_EXTENSIONS=1: RecordFuture has the Python fields, which the compiled lane cannot make",
                allow_module_level=True)
compiled.configure(RecordAccumulator, ProducerBatch, _PartitionState, RecordFuture, TopicPartition)

TOPICS = {"one": (0,), "keyed": (0, 1, 2, 3)}


def new_core(batch_size: int, buffer_memory: int) -> ProducerCore:
    core = ProducerCore(ProducerSettings.from_options({
        "bootstrap_servers": "127.0.0.1:1", "batch_size": batch_size, "buffer_memory": buffer_memory,
        "max_request_size": 4096, "acks": 1}))
    core.metadata.view = ClusterView(partitions=dict(TOPICS), available=dict(TOPICS))
    core.partitioner = DefaultPartitioner(batch_size, rng=random.Random(7))  # both cores pick alike
    return core


def snapshot(core: ProducerCore) -> Any:
    accumulator = core.accumulator
    order = {}
    batches = []
    for tp, state in sorted(accumulator._partitions.items()):
        for batch in state.batches:
            order[id(batch.result)] = len(order)
            batches.append((tp, list(batch.values), None if batch.keys is None else list(batch.keys),
                            list(batch.timestamps), batch.headers, batch.size, batch.memory, batch.record_count,
                            batch.closed, batch.min_timestamp, batch.max_timestamp))
    return batches, accumulator.used_memory, order


def answer(future: Any, order: dict[int, int]) -> Any:
    if future is None:
        return None
    return (type(future).__name__, order[id(future._batch)], future._index, future.timestamp_ms, future._key_size,
            future._value_size, future._header_size)


sends = st.lists(st.tuples(
    st.sampled_from(["one", "one", "one", "keyed", "unknown"]),
    st.one_of(st.binary(max_size=300), st.binary(min_size=900, max_size=1200), st.just("text")),
    st.one_of(st.none(), st.none(), st.binary(min_size=1, max_size=8)),
    st.one_of(st.none(), st.integers(0, 1 << 41)),
    st.sampled_from([None, None, None, [("h", b"v")]]),
), min_size=1, max_size=60)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sends, st.sampled_from([256, 2048, 16384]), st.sampled_from([3000, 20000, 1 << 20]), st.integers(0, 3))
def test_both_send_paths_leave_the_same_batches(calls: list[Any], batch_size: int, buffer_memory: int,
                                                 twist: int) -> None:
    python_core = new_core(batch_size, buffer_memory)
    compiled_core = new_core(batch_size, buffer_memory)
    lane = compiled.SendLane(compiled_core)
    python_answers: list[Any] = []
    compiled_answers: list[Any] = []
    for number, (topic, value, key, timestamp, headers) in enumerate(calls):
        if twist == 1 and number == len(calls) // 2:
            python_core.closed = compiled_core.closed = True
        if twist == 2 and number == len(calls) // 2:  # a metadata refresh that no longer knows "keyed"
            for core in (python_core, compiled_core):
                core.metadata.view = ClusterView(partitions={"one": (0,)}, available={"one": (0,)})
        timestamp = 1_700_000_000_000 + number if timestamp is None and twist == 3 else timestamp
        arguments = (topic, value, key, headers, None, timestamp)
        python_answers.append(ProducerCore.send_plain(python_core, *arguments))
        compiled_answers.append(lane.send(*arguments))
    python_batches, python_memory, python_order = snapshot(python_core)
    compiled_batches, compiled_memory, compiled_order = snapshot(compiled_core)
    if all(call[3] is not None for call in calls) or twist == 3:
        assert python_batches == compiled_batches
    else:  # "now" differs between the two runs: compare everything else
        strip = [batch[:3] + batch[4:9] for batch in python_batches]
        assert strip == [batch[:3] + batch[4:9] for batch in compiled_batches]
    assert python_memory == compiled_memory
    for call, python_future, compiled_future in zip(calls, python_answers, compiled_answers):
        expected = answer(python_future, python_order)
        got = answer(compiled_future, compiled_order)
        if expected is not None and got is not None and call[3] is None and twist != 3:  # "now"
            expected, got = expected[:3] + expected[4:], got[:3] + got[4:]
        assert expected == got


def test_a_transactional_core_takes_the_general_path() -> None:
    core = new_core(16384, 1 << 20)
    core.transaction = object()  # type: ignore[assignment]  # fixed when a core is made, before its lane
    lane = compiled.SendLane(core)
    assert lane.send("one", b"v", None, None, None, 5) is None
    assert core.accumulator.used_memory == 0


def test_a_full_batch_wakes_the_sender_once() -> None:
    core = new_core(61 + 2 * 112, 1 << 20)  # a batch's overhead and two records of 112 bytes fill it exactly
    lane = compiled.SendLane(core)
    wakes: list[int] = []
    core.accumulator.wakeup = lambda: wakes.append(1)
    first = lane.send("one", b"x" * 100, None, None, None, 1)  # opens a batch (Python's append)
    second = lane.send("one", b"x" * 100, None, None, None, 2)  # fills it (the compiled append)
    assert first is not None and second is not None and second._batch is first._batch
    assert len(wakes) == 2 and core.accumulator._partitions[TopicPartition("one", 0)].batches[0].closed


def test_a_send_waits_while_another_thread_holds_the_accumulators_lock() -> None:
    core = new_core(16384, 1 << 20)
    lane = compiled.SendLane(core)
    lane.send("one", b"first", None, None, None, 1)  # the partition's batch is open
    answers: list[Any] = []
    lock = core.accumulator._lock
    with lock:
        sender = threading.Thread(target=lambda: answers.append(lane.send("one", b"second", None, None, None, 2)))
        sender.start()
        sender.join(0.3)
        assert sender.is_alive() and not answers  # it waits for the lock
        batch = core.accumulator._partitions[TopicPartition("one", 0)].batches[0]
        assert batch.values == [b"first"]
    sender.join(10)
    assert answers and answers[0] is not None and answers[0]._index == 1
    assert batch.values == [b"first", b"second"] and not lock.locked()


def test_senders_on_several_threads_and_a_draining_thread_lose_and_repeat_nothing() -> None:
    """Senders on three threads, switching as often as the interpreter lets them, against a
    thread that drains and completes batches: every record lands once, in each sender's order,
    and the memory is given back."""
    core = new_core(2048, 1 << 30)  # small batches: many new batches (the Python append) and drains
    lane = compiled.SendLane(core)
    accumulator = core.accumulator
    leaders = {TopicPartition("one", 0): 1}
    drained: list[bytes] = []
    senders_done = threading.Event()
    failures: list[BaseException] = []

    def drain() -> None:
        try:
            while True:
                finished = senders_done.is_set()
                for batches in accumulator.drain(leaders, [1], time.monotonic()).values():
                    for batch in batches:
                        drained.extend(batch.values)
                        accumulator.complete(batch, 0, -1, 0)
                if finished and not any(state.batches for state in accumulator._partitions.values()):
                    return
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    def send(number: int) -> None:
        try:
            for index in range(5000):
                assert lane.send("one", b"%d:%05d" % (number, index), None, None, None, 1) is not None
        except BaseException as exc:
            failures.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        drainer = threading.Thread(target=drain)
        senders = [threading.Thread(target=send, args=(number,)) for number in range(3)]
        drainer.start()
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join(60)
        senders_done.set()
        drainer.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert not failures and not drainer.is_alive()
    for number in range(3):
        mine = [value for value in drained if value.startswith(b"%d:" % number)]
        assert mine == [b"%d:%05d" % (number, index) for index in range(5000)]
    assert len(drained) == 15000 and accumulator.used_memory == 0


class Owner:
    """Stands for the KafkaProducer a lane is bound to."""


def bound_lane() -> tuple[Any, Owner, list[Any]]:
    core = new_core(16384, 1 << 20)
    lane = compiled.SendLane(core)
    owner = Owner()
    calls: list[Any] = []

    def fallback(producer: Owner, *args: Any, **kwargs: Any) -> str:
        calls.append((producer, args, kwargs))
        return "fallback"

    lane.bind(owner, fallback)
    return lane, owner, calls


def test_send_record_takes_positional_and_keyword_arguments_as_send_does() -> None:
    lane, _owner, calls = bound_lane()
    first = lane.send_record("keyed", b"v", b"key", None, None, 11)
    second = lane.send_record("keyed", value=b"v", key=b"key", timestamp_ms=12)
    third = lane.send_record("one", b"w")
    assert not calls
    assert first._batch is second._batch and third._batch is not first._batch  # by key, then by topic
    assert (first._index, second._index, third._index) == (0, 1, 0)
    assert (first.timestamp_ms, second.timestamp_ms) == (11, 12)


@pytest.mark.parametrize(("args", "kwargs"), [
    (("one", "text"), {}),  # another value type
    (("one", b"v"), {"headers": [("h", b"v")]}),
    (("one", b"v"), {"partition": 0}),
    (("unknown", b"v"), {}),  # not in the metadata
    (("one", b"v"), {"bogus": 1}),  # an unknown keyword: Python's send raises the TypeError
    (("one", b"v"), {"value": b"w"}),  # given twice
    ((), {"topic": "one", "value": b"v"}),  # topic by name
    (("one", b"v", None, None, None, None, None), {}),  # too many
])
def test_send_record_hands_everything_else_to_the_fallback(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    lane, owner, calls = bound_lane()
    assert lane.send_record(*args, **kwargs) == "fallback"
    assert len(calls) == 1 and calls[0][0] is owner
    if calls[0][2] or len(args) != 2 or "bogus" in kwargs:  # the call as it was made
        assert calls[0][1:] == (args, kwargs)
    else:  # the six fields, filled in
        fields = dict(zip(["topic", "value", "key", "headers", "partition", "timestamp_ms"], calls[0][1]))
        assert fields == {"topic": args[0], "value": args[1], "key": None, "headers": kwargs.get("headers"),
                          "partition": kwargs.get("partition"), "timestamp_ms": None}


def test_send_record_of_a_lane_whose_producer_is_gone_raises() -> None:
    lane, owner, _calls = bound_lane()
    del owner
    gc.collect()
    with pytest.raises(ReferenceError):
        lane.send_record("one", "text")
    unbound = compiled.SendLane(new_core(16384, 1 << 20))
    with pytest.raises(RuntimeError, match="not bound"):
        unbound.send_record("one", "text")


@pytest.mark.parametrize("base_offset", [-1, 0, 41])
@pytest.mark.parametrize("log_append_time", [-1, 1_700_000_000_123])
def test_future_fields_make_the_same_metadata(base_offset: int, log_append_time: int) -> None:
    result = BatchResult(TopicPartition("t", 3))
    result.succeed(base_offset, log_append_time, 0)
    sizes = [random.randrange(-1, 100) for _ in range(3)]
    native = compiled.FutureFields(result, 7, 1_700_000_000_000, *sizes)
    python = PyFutureFields(result, 7, 1_700_000_000_000, *sizes)
    made = native._metadata()
    assert type(made) is RecordMetadata and made == python._metadata()
    assert (native._batch, native._index, native.timestamp_ms) == (python._batch, python._index, python.timestamp_ms)


def test_record_futures_use_the_compiled_fields() -> None:
    assert futures.RecordFuture.__mro__[1] is compiled.FutureFields


class _PythonFuture(PyFutureFields):
    __slots__ = ()


def _callbacks_seen(future_class: Any, succeed: bool, late: bool) -> list[Any]:
    """What callbacks and errbacks registered before (or after, ``late``) completion receive."""
    seen: list[Any] = []
    result = BatchResult(TopicPartition("t", 1))
    future = future_class(result, 2, 1_700_000_000_000, 3, 4, -1)
    error = ValueError("refused")

    def register() -> None:
        assert future.add_callback(lambda metadata: seen.append(("callback", metadata))) is future
        future.add_callback(lambda tag, metadata, suffix="": seen.append((tag, metadata, suffix)), "bound",
                            suffix="kw")
        assert future.add_errback(lambda exception: seen.append(("errback", repr(exception)))) is future
        future.add_errback(lambda tag, exception: seen.append((tag, repr(exception))), "bound-errback")

    if not late:
        register()
    if succeed:
        result.succeed(10, -1, 0)
    else:
        result.fail(error)
    if late:
        register()
    return seen


@pytest.mark.parametrize("succeed", [True, False])
@pytest.mark.parametrize("late", [True, False])
def test_compiled_callbacks_receive_what_python_ones_do(succeed: bool, late: bool) -> None:
    python = _callbacks_seen(_PythonFuture, succeed, late)
    native = _callbacks_seen(RecordFuture, succeed, late)
    assert python == native and len(native) == 2
    if succeed:
        assert native[0] == ("callback", RecordMetadata("t", 1, TopicPartition("t", 1), 12, 1_700_000_000_000, None,
                                                        3, 4, -1))


@pytest.mark.parametrize("run", [futures.py_run_callbacks, compiled.run_callbacks], ids=["python", "compiled"])
def test_a_failing_callback_is_reported_and_the_others_still_run(run: Any) -> None:
    result = BatchResult(TopicPartition("t", 0))
    result.base_offset = 5
    order: list[Any] = []
    future = RecordFuture(result, 0, 1, -1, 1, -1)

    def broken(metadata: Any) -> None:
        raise RuntimeError("a callback's bug")

    entries = [(future, broken, True), (future, lambda metadata: order.append(metadata.offset), True),
               (None, order.append, None), (future, order.append, False)]
    reported: list[BaseException] = []
    run(entries, result, None, reported.append)
    assert order == [5, result] and [str(error) for error in reported] == ["a callback's bug"]
    run(entries, result, KeyError("k"), reported.append)
    assert isinstance(order[-1], KeyError) and order[-2] is result  # the batch-level entry runs either way
