"""Interpreter floors of the per-record client paths, measured on the machine at hand.

``send()`` and ``poll()`` hand the caller one Python object per record, so whatever else they do,
each record costs at least the interpreter work below. This program times those floors in
isolation (no I/O, no broker, no other thread) and prints the records/s they allow, so the
per-record figures of the benchmark suite can be read against what this machine's CPython can
do at all:

* ``send()`` floor — one call that takes a record, looks its partition up, appends it under a
  lock to a batch and returns a new slotted future (the least a producer with kafka-python's API
  does per record), then the same with one callback registered per record, as the perf tool does;
* ``poll()`` floor — building one 13-field ``ConsumerRecord`` per record from values already
  sliced out (no decoding at all), then slicing values out of a payload plus building the records;
* the real ``decode_records`` of this package on a 5,000-record batch for comparison.

It is a program to read the figures of, not a timed test. Run: ``python -m kafkalite.bench.floors``.

Concurrency: single-threaded.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from kafkalite.client.fetcher import decode_records
from kafkalite.client.types import ConsumerRecord
from kafkalite.record.batch import RecordBatch, build_batch

VALUE_SIZE = 100


class _Future:
    __slots__ = ("batch", "index", "timestamp", "callbacks")

    def __init__(self, batch: list[Any], index: int, timestamp: int) -> None:
        self.batch = batch
        self.index = index
        self.timestamp = timestamp
        self.callbacks: list[Any] | None = None

    def add_callback(self, function: Callable[..., Any], *args: Any) -> _Future:
        self.callbacks = [(function, args)]
        return self


class _MinimalProducer:
    """The least per-record bookkeeping of a send(): partition lookup, locked append, a future."""

    def __init__(self) -> None:
        self.partitions = {"topic": (0,)}
        self.lock = threading.Lock()
        self.batch: list[Any] = []

    def send(self, topic: str, value: bytes, key: bytes | None = None) -> _Future:
        partitions = self.partitions.get(topic)
        if not partitions:
            raise KeyError(topic)
        timestamp = int(time.time() * 1000)
        with self.lock:
            batch = self.batch
            index = len(batch)
            batch.append((key, value, timestamp))
            if index >= 5000:
                self.batch = []
        return _Future(batch, index, timestamp)


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def _best_of(rounds: int, run: Callable[[], float]) -> float:
    return min(run() for _ in range(rounds))


def send_floor(count: int, rounds: int) -> tuple[float, float]:
    """records/s of the minimal send loop without and with one callback per record."""
    producer = _MinimalProducer()
    value = b"x" * VALUE_SIZE

    def on_done(started: float, metadata: Any) -> None:
        pass

    def plain() -> float:
        send = producer.send
        began = time.perf_counter()
        for _ in range(count):
            send("topic", value)
        return time.perf_counter() - began

    def with_callback() -> float:
        send = producer.send
        clock = time.perf_counter
        began = clock()
        for _ in range(count):
            send("topic", value).add_callback(on_done, clock())
        return clock() - began

    return _rate(count, _best_of(rounds, plain)), _rate(count, _best_of(rounds, with_callback))


def poll_floor(count: int, rounds: int) -> tuple[float, float, float]:
    """records/s of building ConsumerRecords only, of slicing + building, and of decode_records."""
    stride = VALUE_SIZE + 9
    payload = bytes(stride * count)
    values = [payload[i * stride:i * stride + VALUE_SIZE] for i in range(count)]
    new = tuple.__new__

    def build_only() -> float:
        began = time.perf_counter()
        records = [new(ConsumerRecord, ("topic", 0, 0, offset, 1_700_000_000_000, 0, None, value, [], None, -1,
                                         VALUE_SIZE, -1)) for offset, value in enumerate(values)]
        elapsed = time.perf_counter() - began
        assert len(records) == count
        return elapsed

    def slice_and_build() -> float:
        began = time.perf_counter()
        records: list[ConsumerRecord] = []
        append = records.append
        position = 0
        for offset in range(count):
            start = position + 8
            append(new(ConsumerRecord, ("topic", 0, 0, offset, 1_700_000_000_000, 0, None,
                                        payload[start:start + VALUE_SIZE], [], None, -1, VALUE_SIZE, -1)))
            position += stride
        elapsed = time.perf_counter() - began
        assert len(records) == count
        return elapsed

    batch_records = 5000
    timestamps = [1_700_000_000_000 + index // 100 for index in range(batch_records)]
    batch = RecordBatch(build_batch([b"x" * VALUE_SIZE] * batch_records, timestamps=timestamps), 0)

    def decode() -> float:
        began = time.perf_counter()
        for _ in range(max(1, count // batch_records)):
            decode_records(batch, "topic", 0, 0, 1 << 62)
        return time.perf_counter() - began

    decoded = max(1, count // batch_records) * batch_records
    return (_rate(count, _best_of(rounds, build_only)), _rate(count, _best_of(rounds, slice_and_build)),
            _rate(decoded, _best_of(rounds, decode)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkalite.bench.floors", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000, help="records per round (default 500,000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the best is reported (default 5)")
    arguments = parser.parse_args(argv)
    count, rounds = arguments.records, arguments.rounds
    send_plain, send_callback = send_floor(count, rounds)
    build, slice_build, decode = poll_floor(count, rounds)
    print(f"Interpreter floors, {count:,} records of {VALUE_SIZE} bytes, best of {rounds} rounds, "
          f"Python {sys.version.split()[0]}:")
    print()
    print("| per-record work | records/s |")
    print("| --- | --- |")
    print(f"| minimal send(): partition lookup, locked append, a future | {send_plain:,.0f} |")
    print(f"| minimal send() + one callback per record (as the perf tool) | {send_callback:,.0f} |")
    print(f"| building one ConsumerRecord per record (values already sliced) | {build:,.0f} |")
    print(f"| slicing the value and building the ConsumerRecord | {slice_build:,.0f} |")
    print(f"| kafkalite decode_records (5,000-record batches, per-record timestamps) | {decode:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
