"""The broker's running counts: per-topic traffic and per-API request figures.

:class:`TopicStats` holds Kafka's ``BrokerTopicMetrics`` per topic (messages and bytes in,
bytes out, replication bytes, produce and fetch requests and their failures);
:class:`RequestStats` holds Kafka's ``RequestMetrics`` per front end and API (requests,
errors, a latency histogram). :class:`BrokerStats` bundles both. They are plain counters,
bumped once per request (never per record) by the replica manager and the front ends, and read
by :mod:`kafkalite.broker.metrics` when ``GET /metrics`` is scraped.

Concurrency: event-loop only, like the partition state they describe; nothing here locks.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

#: Upper bounds (seconds) of the request latency histogram's buckets; +Inf is implied.
LATENCY_BUCKETS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                                      2.5, 5.0, 10.0)

#: The front ends, as the ``listener`` label names them.
HTTP, CHANNEL, KAFKA = "http", "channel", "kafka"


@dataclass(slots=True)
class TopicCounts:
    """Running totals of one topic on this broker (Kafka's ``BrokerTopicMetrics`` names)."""

    messages_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    replication_bytes_in: int = 0
    replication_bytes_out: int = 0
    produce_requests: int = 0
    failed_produce_requests: int = 0
    fetch_requests: int = 0
    failed_fetch_requests: int = 0


class TopicStats:
    """Traffic per topic: what leaders appended for producers and served to consumers, and what
    replication moved. A partition's produce or fetch counts as one request of its topic."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicCounts] = {}

    def counts(self, topic: str) -> TopicCounts:
        counts = self.topics.get(topic)
        if counts is None:
            counts = self.topics[topic] = TopicCounts()
        return counts

    def produced(self, topic: str, messages: int, size: int) -> None:
        counts = self.counts(topic)
        counts.produce_requests += 1
        counts.messages_in += messages
        counts.bytes_in += size

    def produce_failed(self, topic: str) -> None:
        counts = self.counts(topic)
        counts.produce_requests += 1
        counts.failed_produce_requests += 1

    def fetched(self, topic: str, size: int, by_follower: bool) -> None:
        counts = self.counts(topic)
        if by_follower:
            counts.replication_bytes_out += size
        else:
            counts.fetch_requests += 1
            counts.bytes_out += size

    def fetch_failed(self, topic: str) -> None:
        counts = self.counts(topic)
        counts.fetch_requests += 1
        counts.failed_fetch_requests += 1

    def replicated(self, topic: str, size: int) -> None:
        """A follower appended ``size`` bytes fetched from its leader."""
        self.counts(topic).replication_bytes_in += size

    def forget(self, topic: str) -> None:
        """A deleted topic's series go away with it."""
        self.topics.pop(topic, None)


@dataclass(slots=True)
class RequestCounts:
    """Requests of one API on one front end: how many, how many failed, how long they took."""

    requests: int = 0
    errors: int = 0
    seconds_total: float = 0.0
    #: per bucket of :data:`LATENCY_BUCKETS` plus +Inf, not cumulative (the collector sums)
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))


class RequestStats:
    """Requests per ``(listener, api)``: counted and timed by the front end that served them."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str], RequestCounts] = {}

    def observe(self, listener: str, api: str, seconds: float, failed: bool) -> None:
        key = (listener, api)
        counts = self.requests.get(key)
        if counts is None:
            counts = self.requests[key] = RequestCounts()
        counts.requests += 1
        if failed:
            counts.errors += 1
        counts.seconds_total += seconds
        counts.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1


@dataclass(slots=True)
class BrokerEvents:
    """Counts of the broker's state changes (Kafka's ``IsrShrinksPerSec``, ``IsrExpandsPerSec``,
    ``LeaderElectionRateAndTimeMs``, ``UncleanLeaderElectionsPerSec``, the group coordinator's
    completed rebalances)."""

    isr_shrinks: int = 0
    isr_expands: int = 0
    leader_elections: int = 0
    unclean_leader_elections: int = 0
    rebalances: int = 0


class LoopLag:
    """How late the event loop ran a timer: the last measurement and the largest of about the
    last :data:`WINDOW_SECONDS` (two windows, so a scrape always covers a whole one)."""

    WINDOW_SECONDS = 10.0

    def __init__(self) -> None:
        self.last = 0.0
        self._current = 0.0
        self._previous = 0.0
        self._started: float | None = None

    def record(self, lag: float, now: float) -> None:
        if self._started is None or now - self._started >= self.WINDOW_SECONDS:
            self._previous, self._current, self._started = self._current, 0.0, now
        self.last = lag
        if lag > self._current:
            self._current = lag

    @property
    def recent_max(self) -> float:
        return max(self._current, self._previous)


@dataclass
class BrokerStats:
    """Every running count of one broker, shared by its services and front ends."""

    topics: TopicStats = field(default_factory=TopicStats)
    requests: RequestStats = field(default_factory=RequestStats)
    events: BrokerEvents = field(default_factory=BrokerEvents)
    loop_lag: LoopLag = field(default_factory=LoopLag)
