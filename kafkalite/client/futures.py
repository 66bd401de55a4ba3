"""What a producer's send hands back: :class:`RecordFuture` (one record), :class:`BulkFuture`
(one bulk send) and the :class:`BatchResult` they share (one record batch's outcome).

A batch is completed once, by the sender (:mod:`.sender`) through the accumulator
(:mod:`.accumulator`), with the offsets the broker gave or an error; every record future of the
batch reads it from there. A future is both kafka-python's FutureRecordMetadata (``get``,
``add_callback``, ``add_errback``) and awaitable (aiokafka's shape).

Concurrency: completion (:meth:`BatchResult.succeed`, :meth:`BatchResult.fail`) happens on the
producer's event loop, whose thread also runs the callbacks (as kafka-python runs them on its
I/O thread); registering a callback and ``get()`` work from any thread (one lock per batch
result); ``await`` and :meth:`BatchResult.future` must run on the producer's loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self, cast

from kafkalite.client.types import BatchMetadata, RecordMetadata, TopicPartition
from kafkalite.errors import KafkaTimeoutError
from kafkalite.record.speedups import load_extension

log = logging.getLogger(__name__)


class BatchResult:
    """The outcome of one batch, shared by the futures of its records.

    Completed once, on the sender's loop, with (base_offset, log_append_time, log_start_offset)
    or an error. Threads wait with :meth:`wait`; coroutines await :meth:`future`.
    """

    __slots__ = ("topic_partition", "done", "base_offset", "log_append_time", "log_start_offset", "error",
                 "_lock", "_event", "_callbacks", "_future")

    def __init__(self, topic_partition: TopicPartition) -> None:
        self.topic_partition = topic_partition
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.log_start_offset = -1
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._event: threading.Event | None = None
        # (record future or None, function, on success?) — see _finish
        self._callbacks: list[tuple[Any, Callable[..., Any], bool | None]] | None = None
        self._future: asyncio.Future[BatchResult] | None = None

    def _finish(self) -> None:
        with self._lock:
            self.done = True
            callbacks, self._callbacks = self._callbacks, None
            event = self._event
            future = self._future
        if event is not None:
            event.set()
        if future is not None and not future.done():
            future.set_result(self)
        if callbacks:
            _run_callbacks(callbacks, self, self.error, _report_callback_error)

    def succeed(self, base_offset: int, log_append_time: int, log_start_offset: int) -> None:
        if self.done:
            return
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self._finish()

    def fail(self, error: BaseException) -> None:
        if self.done:
            return
        self.error = error
        self._finish()

    def add_callback(self, callback: Callable[[BatchResult], None]) -> None:
        """Call ``callback(self)`` on completion (at once, here, when already complete)."""
        if not self._register(None, callback, None):
            callback(self)

    def _register(self, record: PyFutureFields | None, function: Callable[..., Any], on_success: bool | None) -> bool:
        """Keep one callback for completion; False when the batch is already complete."""
        with self._lock:
            if self.done:
                return False
            callbacks = self._callbacks
            if callbacks is None:
                callbacks = self._callbacks = []
            callbacks.append((record, function, on_success))
            return True

    def wait(self, timeout: float | None) -> bool:
        """Block this thread until complete; False on timeout."""
        if self.done:
            return True
        with self._lock:
            if self.done:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def future(self) -> asyncio.Future[BatchResult]:
        """An asyncio future of the running loop (which must be the sender's loop)."""
        with self._lock:
            if self._future is None:
                self._future = asyncio.get_running_loop().create_future()
                if self.done:
                    self._future.set_result(self)
            return self._future


class PyFutureFields:
    """What a :class:`RecordFuture` keeps: its batch's result, its index in the batch, its
    timestamp and serialized sizes; :meth:`_metadata` makes its RecordMetadata. The pure-Python
    twin of ``kafkalite.client._speedups.FutureFields`` (same fields, same metadata)."""

    __slots__ = ("_batch", "_index", "timestamp_ms", "_key_size", "_value_size", "_header_size")

    def __init__(self, batch: BatchResult, index: int, timestamp_ms: int, key_size: int, value_size: int,
                 header_size: int) -> None:
        self._batch = batch
        self._index = index
        self.timestamp_ms = timestamp_ms
        self._key_size = key_size
        self._value_size = value_size
        self._header_size = header_size

    def _metadata(self) -> RecordMetadata:
        batch = self._batch
        tp = batch.topic_partition
        offset = batch.base_offset + self._index if batch.base_offset >= 0 else -1
        timestamp = batch.log_append_time if batch.log_append_time >= 0 else self.timestamp_ms
        return RecordMetadata(tp.topic, tp.partition, tp, offset, timestamp, None, self._key_size,
                              self._value_size, self._header_size)

    def add_callback(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Self:
        call = functools.partial(function, *args, **kwargs) if args or kwargs else function
        batch = self._batch
        if not batch._register(self, call, True) and batch.error is None:
            call(self._metadata())
        return self

    def add_errback(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Self:
        call = functools.partial(function, *args, **kwargs) if args or kwargs else function
        batch = self._batch
        if not batch._register(self, call, False) and batch.error is not None:
            call(batch.error)
        return self


def _report_callback_error(error: BaseException) -> None:
    log.error("producer callback failed", exc_info=error)  # a user callback's bug must not stop the sender


def py_run_callbacks(callbacks: list[tuple[Any, Callable[..., Any], bool | None]], result: BatchResult,
                     error: BaseException | None, report: Callable[[BaseException], None]) -> None:
    """:meth:`BatchResult._finish`'s loop: ``function(result)`` for a batch-level entry,
    ``function(metadata)`` for a record's callback on success, ``function(error)`` for its
    errback on failure; an exception a function raises goes to ``report``."""
    for record, function, on_success in callbacks:
        try:
            if record is None:
                function(result)
            elif error is None:
                if on_success:
                    function(record._metadata())
            elif not on_success:
                function(error)
        except Exception as exc:
            report(exc)


def _future_fields() -> type[PyFutureFields]:
    """The compiled FutureFields (configured) when the extension is loaded, else :class:`PyFutureFields`."""
    extension = load_extension("kafkalite.client._speedups")
    if extension is None:
        return PyFutureFields
    extension.configure_futures(RecordMetadata, BatchResult, functools.partial)
    global _run_callbacks
    _run_callbacks = extension.run_callbacks
    fields: Any = extension.FutureFields  # the same fields and _metadata (tests/unit/test_speedups_contract.py)
    return cast("type[PyFutureFields]", fields)


#: BatchResult._finish's loop: :func:`py_run_callbacks`, or its compiled twin once loaded.
_run_callbacks: Callable[[list[tuple[Any, Callable[..., Any], bool | None]], BatchResult, BaseException | None,
                          Callable[[BaseException], None]], None] = py_run_callbacks

if TYPE_CHECKING:
    _FutureFields = PyFutureFields
else:
    _FutureFields = _future_fields()


class RecordFuture(_FutureFields):
    """The future of one ``send()``: kafka-python's FutureRecordMetadata, and awaitable.

    ``get(timeout)`` blocks a thread; ``await future`` works on the producer's loop (the async
    producer). ``add_callback(f, *args)`` calls ``f(*args, metadata)`` and ``add_errback(f)``
    calls ``f(exception)``, on the producer's I/O thread. Its fields are those of its base
    (compiled, or :class:`PyFutureFields`); created as ``RecordFuture(batch_result, index,
    timestamp_ms, key_size, value_size, header_size)``.
    """

    __slots__ = ()

    # -- kafka-python's Future --
    @property
    def is_done(self) -> bool:
        return self._batch.done

    @property
    def value(self) -> RecordMetadata | None:
        batch = self._batch
        return self._metadata() if batch.done and batch.error is None else None

    @property
    def exception(self) -> BaseException | None:
        return self._batch.error

    def succeeded(self) -> bool:
        return self._batch.done and self._batch.error is None

    def failed(self) -> bool:
        return self._batch.done and self._batch.error is not None

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` seconds (None: forever); the metadata, or the send's error."""
        batch = self._batch
        if not batch.done and not batch.wait(timeout):
            raise KafkaTimeoutError(f"the record was not acknowledged within {timeout} s")
        if batch.error is not None:
            raise batch.error
        return self._metadata()

    def add_both(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> RecordFuture:
        self.add_callback(function, *args, **kwargs)
        return self.add_errback(function, *args, **kwargs)

    # -- asyncio flavour --
    def done(self) -> bool:
        return self._batch.done

    def result(self) -> RecordMetadata:
        batch = self._batch
        if not batch.done:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        if batch.error is not None:
            raise batch.error
        return self._metadata()

    def __await__(self) -> Any:
        batch = self._batch
        if not batch.done:
            yield from batch.future().__await__()
        return self.result()

    def __repr__(self) -> str:
        state = "pending" if not self._batch.done else ("failed" if self._batch.error else "done")
        return f"<RecordFuture {self._batch.topic_partition} #{self._index} {state}>"


class BulkFuture:
    """The future of one bulk send: a list of :class:`BatchMetadata`, one per batch written."""

    __slots__ = ("_results", "_topic", "_counts", "_timestamps")

    def __init__(self, topic: str) -> None:
        self._topic = topic
        self._results: list[BatchResult] = []
        self._counts: list[int] = []
        self._timestamps: list[int] = []

    def _add(self, result: BatchResult, count: int, timestamp: int) -> None:
        self._results.append(result)
        self._counts.append(count)
        self._timestamps.append(timestamp)

    @property
    def is_done(self) -> bool:
        return all(result.done for result in self._results)

    @property
    def record_count(self) -> int:
        return sum(self._counts)

    def _value(self) -> list[BatchMetadata]:
        for result in self._results:
            if result.error is not None:
                raise result.error
        return [BatchMetadata(self._topic, result.topic_partition.partition, result.base_offset, count,
                              result.log_append_time if result.log_append_time >= 0 else timestamp,
                              result.log_start_offset)
                for result, count, timestamp in zip(self._results, self._counts, self._timestamps)]

    def get(self, timeout: float | None = None) -> list[BatchMetadata]:
        deadline = None if timeout is None else time.monotonic() + timeout
        for result in self._results:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not result.wait(remaining):
                raise KafkaTimeoutError(f"the bulk send was not acknowledged within {timeout} s")
        return self._value()

    def __await__(self) -> Any:
        for result in self._results:
            if not result.done:
                yield from result.future().__await__()
        return self._value()
