"""Client metrics in kafka-python's shape: ``metrics()`` answers ``{group: {name: value}}`` with
Kafka's group and metric names (``producer-metrics``, ``producer-topic-metrics.<topic>``,
``producer-node-metrics.node-<id>``, ``consumer-fetch-manager-metrics``,
``consumer-fetch-manager-metrics.<topic>``, ``consumer-coordinator-metrics``).

A :class:`Sensor` keeps Kafka's sampled statistics: the count, sum and maximum of what was
recorded in each of the last two 30-second windows, so ``*-rate`` is per second over about the
last minute (divided by at least 30 s, as Kafka does, so a young client's rates start low),
``*-avg`` and ``*-max`` cover the same samples (NaN when nothing was recorded, as in Kafka),
and ``*-total`` counts since the client started.

The clients record once per request or per batch of records, never per record: the cost of a
metric on the send path is one lock and a few additions per produce request.

Concurrency: recorded on the client's event-loop thread, read by ``metrics()`` from any thread;
one lock per :class:`ClientMetrics` guards both.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

WINDOW_SECONDS = 30.0
SAMPLES = 2
NAN = math.nan


class Sensor:
    """Sampled count, sum and maximum over the last :data:`SAMPLES` windows, and running totals."""

    __slots__ = ("_starts", "_counts", "_sums", "_maxima", "_current", "total_count", "total_sum")

    def __init__(self, now: float) -> None:
        self._starts = [now] + [-math.inf] * (SAMPLES - 1)  # the others start when first rolled into
        self._counts = [0] * SAMPLES
        self._sums = [0.0] * SAMPLES
        self._maxima = [-math.inf] * SAMPLES
        self._current = 0
        self.total_count = 0
        self.total_sum = 0.0

    def _roll(self, now: float) -> None:
        current = self._current
        if now - self._starts[current] < WINDOW_SECONDS:
            return
        current = self._current = (current + 1) % SAMPLES
        self._starts[current] = now
        self._counts[current] = 0
        self._sums[current] = 0.0
        self._maxima[current] = -math.inf

    def record(self, value: float, now: float) -> None:
        self._roll(now)
        current = self._current
        self._counts[current] += 1
        self._sums[current] += value
        if value > self._maxima[current]:
            self._maxima[current] = value
        self.total_count += 1
        self.total_sum += value

    def _live(self, now: float) -> list[int]:
        """The samples that are not older than the whole span."""
        return [index for index in range(SAMPLES) if now - self._starts[index] < WINDOW_SECONDS * SAMPLES]

    def _elapsed(self, now: float, live: list[int]) -> float:
        oldest = min((self._starts[index] for index in live), default=now)
        # Kafka's Rate: at least (samples - 1) full windows, so a fresh sensor does not spike
        return max(now - oldest, WINDOW_SECONDS * (SAMPLES - 1))

    def rate(self, now: float) -> float:
        """Sum of the recorded values per second."""
        live = self._live(now)
        return sum(self._sums[index] for index in live) / self._elapsed(now, live)

    def count_rate(self, now: float) -> float:
        """Recordings per second."""
        live = self._live(now)
        return sum(self._counts[index] for index in live) / self._elapsed(now, live)

    def average(self, now: float) -> float:
        live = self._live(now)
        count = sum(self._counts[index] for index in live)
        return sum(self._sums[index] for index in live) / count if count else NAN

    def maximum(self, now: float) -> float:
        live = [index for index in self._live(now) if self._counts[index]]
        return max(self._maxima[index] for index in live) if live else NAN


class ClientMetrics:
    """Named sensors grouped as Kafka groups them, and gauges read when ``metrics()`` is called."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.sensors: dict[tuple[str, str], Sensor] = {}
        self.gauges: dict[tuple[str, str], Callable[[], float]] = {}

    def sensor(self, group: str, name: str) -> Sensor:
        """The sensor ``name`` of ``group``; call with :attr:`lock` held."""
        key = (group, name)
        sensor = self.sensors.get(key)
        if sensor is None:
            sensor = self.sensors[key] = Sensor(self.clock())
        return sensor

    def gauge(self, group: str, name: str, read: Callable[[], float]) -> None:
        self.gauges[(group, name)] = read

    def snapshot(self, render: Callable[[str, str, Sensor, float], dict[str, float]]) -> dict[str, dict[str, float]]:
        """``{group: {metric: value}}``: each sensor rendered by ``render(group, sensor name,
        sensor, now)`` into its metrics, plus the gauges."""
        answer: dict[str, dict[str, float]] = {}
        with self.lock:
            now = self.clock()
            for (group, name), sensor in self.sensors.items():
                answer.setdefault(group, {}).update(render(group, name, sensor, now))
        for (group, name), read in self.gauges.items():
            answer.setdefault(group, {})[name] = float(read())
        return answer


def rate_and_total(name: str) -> Callable[[Sensor, float], dict[str, float]]:
    """``<name>-rate`` (sum per second) and ``<name>-total`` (sum since start)."""
    return lambda sensor, now: {f"{name}-rate": sensor.rate(now), f"{name}-total": sensor.total_sum}


def count_rate_and_total(name: str) -> Callable[[Sensor, float], dict[str, float]]:
    """``<name>-rate`` (events per second) and ``<name>-total`` (events since start)."""
    return lambda sensor, now: {f"{name}-rate": sensor.count_rate(now), f"{name}-total": float(sensor.total_count)}


def average_and_maximum(name: str) -> Callable[[Sensor, float], dict[str, float]]:
    return lambda sensor, now: {f"{name}-avg": sensor.average(now), f"{name}-max": sensor.maximum(now)}


class ProducerMetrics:
    """What a producer's sender records, as kafka-python's ``KafkaProducer.metrics()`` names it."""

    GROUP = "producer-metrics"

    def __init__(self, buffer_total: Callable[[], float], buffer_used: Callable[[], float]) -> None:
        self.metrics = ClientMetrics()
        for name in _PRODUCER_SENSORS:  # reported from the start, as Kafka's (0, or NaN for averages)
            self.metrics.sensor(self.GROUP, name)
        self.metrics.gauge(self.GROUP, "buffer-total-bytes", buffer_total)
        self.metrics.gauge(self.GROUP, "buffer-available-bytes", lambda: buffer_total() - buffer_used())

    def request_sent(self, node: int, size: int, batches: list[tuple[str, int, int]]) -> None:
        """A produce request of ``size`` bytes to ``node`` carrying ``(topic, records, bytes)`` batches."""
        metrics = self.metrics
        with metrics.lock:
            now = metrics.clock()
            metrics.sensor(self.GROUP, "requests").record(size, now)
            metrics.sensor(f"producer-node-metrics.node-{node}", "requests").record(size, now)
            records = 0
            for topic, count, batch_bytes in batches:
                records += count
                metrics.sensor(self.GROUP, "batch-size").record(batch_bytes, now)
                metrics.sensor(self.GROUP, "record-size").record(batch_bytes / max(count, 1), now)
                metrics.sensor(f"producer-topic-metrics.{topic}", "records").record(count, now)
                metrics.sensor(f"producer-topic-metrics.{topic}", "bytes").record(batch_bytes, now)
            metrics.sensor(self.GROUP, "records").record(records, now)
            metrics.sensor(self.GROUP, "records-per-request").record(records, now)

    def response_received(self, node: int, seconds: float, size: int) -> None:
        metrics = self.metrics
        with metrics.lock:
            now = metrics.clock()
            metrics.sensor(self.GROUP, "request-latency").record(seconds * 1000, now)
            metrics.sensor(self.GROUP, "responses").record(size, now)
            metrics.sensor(f"producer-node-metrics.node-{node}", "request-latency").record(seconds * 1000, now)
            metrics.sensor(f"producer-node-metrics.node-{node}", "responses").record(size, now)

    def records_retried(self, topic: str, count: int) -> None:
        self._count("record-retry", topic, count)

    def records_failed(self, topic: str, count: int) -> None:
        self._count("record-error", topic, count)

    def _count(self, name: str, topic: str, count: int) -> None:
        metrics = self.metrics
        with metrics.lock:
            now = metrics.clock()
            metrics.sensor(self.GROUP, name).record(count, now)
            metrics.sensor(f"producer-topic-metrics.{topic}", name).record(count, now)

    def snapshot(self) -> dict[str, dict[str, float]]:
        return self.metrics.snapshot(_render_producer)


_PRODUCER_SENSORS = ("requests", "responses", "records", "record-retry", "record-error", "batch-size", "record-size",
                     "records-per-request", "request-latency")
_PRODUCER_RENDERERS: dict[str, Callable[[Sensor, float], dict[str, float]]] = {
    "records": rate_and_total("record-send"),
    "record-retry": rate_and_total("record-retry"),
    "record-error": rate_and_total("record-error"),
    "batch-size": average_and_maximum("batch-size"),
    "record-size": average_and_maximum("record-size"),
    "records-per-request": lambda sensor, now: {"records-per-request-avg": sensor.average(now)},
    "request-latency": average_and_maximum("request-latency"),
}


def _render_producer(group: str, name: str, sensor: Sensor, now: float) -> dict[str, float]:
    if name == "requests":  # sizes of the requests sent
        return {"request-rate": sensor.count_rate(now), "request-total": float(sensor.total_count),
                "outgoing-byte-rate": sensor.rate(now), "outgoing-byte-total": sensor.total_sum,
                "request-size-avg": sensor.average(now), "request-size-max": sensor.maximum(now)}
    if name == "responses":
        return {"response-rate": sensor.count_rate(now), "response-total": float(sensor.total_count),
                "incoming-byte-rate": sensor.rate(now), "incoming-byte-total": sensor.total_sum}
    if name == "bytes":  # per topic
        return {"byte-rate": sensor.rate(now), "byte-total": sensor.total_sum}
    return _PRODUCER_RENDERERS[name](sensor, now)


class ConsumerMetrics:
    """What a consumer's fetcher and group membership record, as kafka-python's
    ``KafkaConsumer.metrics()`` names it."""

    FETCH = "consumer-fetch-manager-metrics"
    COORDINATOR = "consumer-coordinator-metrics"

    def __init__(self) -> None:
        self.metrics = ClientMetrics()
        for name in ("fetch-latency", "fetch-size", "records", "bytes", "records-per-request", "records-lag"):
            self.metrics.sensor(self.FETCH, name)
        #: the last lag seen per partition (high watermark minus the next offset to fetch)
        self.lags: dict[tuple[str, int], int] = {}

    def fetch_completed(self, seconds: float, size: int, partitions: list[tuple[str, int, int, int, int]]) -> None:
        """A fetch answer of ``size`` bytes after ``seconds``, with ``(topic, partition, records,
        bytes, lag)`` per partition that answered without error."""
        metrics = self.metrics
        with metrics.lock:
            now = metrics.clock()
            metrics.sensor(self.FETCH, "fetch-latency").record(seconds * 1000, now)
            metrics.sensor(self.FETCH, "fetch-size").record(size, now)
            records = 0
            for topic, partition, count, partition_bytes, lag in partitions:
                records += count
                metrics.sensor(f"{self.FETCH}.{topic}", "records").record(count, now)
                metrics.sensor(f"{self.FETCH}.{topic}", "bytes").record(partition_bytes, now)
                metrics.sensor(self.FETCH, "bytes").record(partition_bytes, now)
                metrics.sensor(self.FETCH, "records-lag").record(lag, now)
                self.lags[(topic, partition)] = lag
            metrics.sensor(self.FETCH, "records").record(records, now)
            metrics.sensor(self.FETCH, "records-per-request").record(records, now)

    def coordinator_call(self, name: str, seconds: float) -> None:
        """A group call answered after ``seconds``: ``commit``, ``join``, ``sync`` or ``heartbeat``."""
        metrics = self.metrics
        with metrics.lock:
            metrics.sensor(self.COORDINATOR, name).record(seconds * 1000, metrics.clock())

    def snapshot(self) -> dict[str, dict[str, float]]:
        answer = self.metrics.snapshot(_render_consumer)
        with self.metrics.lock:
            lags = dict(self.lags)
        for (topic, partition), lag in lags.items():
            answer.setdefault(f"{self.FETCH}.{topic}-{partition}", {})["records-lag"] = float(lag)
        return answer


def _render_consumer(group: str, name: str, sensor: Sensor, now: float) -> dict[str, float]:
    if name == "fetch-latency":  # one recording per fetch answer
        return {"fetch-latency-avg": sensor.average(now), "fetch-latency-max": sensor.maximum(now),
                "fetch-rate": sensor.count_rate(now), "fetch-total": float(sensor.total_count)}
    if name == "fetch-size":
        return {"fetch-size-avg": sensor.average(now), "fetch-size-max": sensor.maximum(now)}
    if name == "records":
        return {"records-consumed-rate": sensor.rate(now), "records-consumed-total": sensor.total_sum}
    if name == "bytes":
        return {"bytes-consumed-rate": sensor.rate(now), "bytes-consumed-total": sensor.total_sum}
    if name == "records-per-request":
        return {"records-per-request-avg": sensor.average(now)}
    if name == "records-lag":
        return {"records-lag-max": sensor.maximum(now), "records-lag-avg": sensor.average(now)}
    # coordinator calls, with Kafka's names
    counts = {f"{name}-rate": sensor.count_rate(now), f"{name}-total": float(sensor.total_count)}
    if name == "commit":
        return {"commit-latency-avg": sensor.average(now), "commit-latency-max": sensor.maximum(now), **counts}
    if name == "heartbeat":
        return {"heartbeat-response-time-max": sensor.maximum(now), **counts}
    return {f"{name}-time-avg": sensor.average(now), f"{name}-time-max": sensor.maximum(now), **counts}  # join, sync
