"""The broker's Prometheus metrics (``GET /metrics``), named after Kafka's MBeans.

:class:`BrokerStateCollector` is a ``prometheus_client`` collector that reads the broker's
state when it is scraped, so nothing on the produce or fetch path pays for it:

* ``kafkalite_controller_active_controller_count`` (Kafka's ``ActiveControllerCount``): 1 on
  the active controller, 0 elsewhere; summed over the brokers it is 1.
* ``kafkalite_controller_offline_partitions_count`` (``OfflinePartitionsCount``), reported by
  the active controller only (0 elsewhere, as in Kafka): partitions without a leader.
* ``kafkalite_server_replica_manager_under_replicated_partitions``
  (``UnderReplicatedPartitions``): partitions this broker leads whose ISR is smaller than
  their replica set; ``..._under_min_isr_partition_count`` (``UnderMinIsrPartitionCount``);
  ``..._leader_count`` and ``..._partition_count``.
* ``kafkalite_log_log_start_offset``, ``kafkalite_log_log_end_offset`` and
  ``kafkalite_log_size`` (bytes) per hosted partition (``topic``, ``partition`` labels), as
  Kafka's ``kafka.log:type=Log`` beans; left out with ``metrics.partition.series.enable=false``.
* ``kafkalite_zookeeper_session_state`` (one series per state, 1 for the current one) and
  ``kafkalite_server_serving`` (1 while the broker serves: the same answer as ``/ready``);
  ``kafkalite_zookeeper_request_latency_seconds`` (a summary: requests and their seconds).
* per topic (``topic`` label), from :class:`~kafkalite.broker.stats.TopicStats`, as Kafka's
  ``BrokerTopicMetrics``: ``kafkalite_server_broker_topic_metrics_messages_in_total``,
  ``..._bytes_in_total``, ``..._bytes_out_total`` (to consumers),
  ``..._replication_bytes_in_total`` and ``..._replication_bytes_out_total``,
  ``..._total_produce_requests_total``, ``..._failed_produce_requests_total``,
  ``..._total_fetch_requests_total`` and ``..._failed_fetch_requests_total`` (a partition of
  a request counts as one request of its topic);
* per front end (``listener``: http, channel, kafka) and API (``request``), from
  :class:`~kafkalite.broker.stats.RequestStats`, as Kafka's ``RequestMetrics``:
  ``kafkalite_network_requests_total``, ``kafkalite_network_request_errors_total`` (answered
  with an error as a whole) and the histogram ``kafkalite_network_request_total_time_seconds``;
* the groups this broker coordinates: ``kafkalite_group_coordinator_groups`` by ``state``
  (Kafka's ``NumGroupsStable`` ...), and per group and partition with a committed offset
  ``kafkalite_group_coordinator_committed_offset`` and ``..._consumer_lag`` (high watermark
  minus committed offset, from :class:`~kafkalite.broker.group_lag.ConsumerLag`), and
  ``kafkalite_group_coordinator_rebalances_total``;
* state changes (Kafka's ``IsrShrinksPerSec``, ``LeaderElectionRateAndTimeMs`` ...):
  ``kafkalite_server_replica_manager_isr_shrinks_total`` / ``_isr_expands_total``,
  ``kafkalite_controller_leader_elections_total`` and ``..._unclean_leader_elections_total``;
  producer ids handed out (``kafkalite_server_producer_ids_allocated_total``), transactional
  ids by state (``kafkalite_transaction_coordinator_transactions``); how late
  the event loop runs (``kafkalite_server_event_loop_lag_seconds``, ``..._max_seconds``).
* client quotas, by quota key (``quota``): ``kafkalite_server_quota_throttled_responses_total``
  and ``kafkalite_server_quota_throttle_time_seconds_total`` (Kafka's per-client ``throttle-time``).

Plus the ``process_*`` collector of ``prometheus_client`` (CPU, memory, open files).

Concurrency: ``collect`` and the per-partition rows run on the broker's event loop, the only
thread that changes partition state, and only read it; the text is written on a worker
thread from what they read.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from itertools import accumulate

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from kafkalite.broker.group import GroupState
from kafkalite.broker.group_coordinator import GroupCoordinator
from kafkalite.broker.group_lag import PartitionLag
from kafkalite.broker.services import BrokerServices
from kafkalite.broker.stats import LATENCY_BUCKETS, RequestStats, TopicStats
from kafkalite.broker.txn_records import TxnState
from kafkalite.coord.coordinator import SessionState
from kafkalite.coord.zk import ZooKeeperClient


class BrokerStateCollector(Collector):
    """Gauges computed from the broker's state at scrape time (see the module docstring)."""

    def __init__(self, services: BrokerServices) -> None:
        self.services = services
        #: set by :func:`render` right before it renders (the lag needs requests to leaders)
        self.lag: list[PartitionLag] = []

    def partition_rows(self) -> list[tuple[str, int, int, int, int]]:
        """(topic, partition, log start, log end, size) of every hosted partition, sorted; read
        on the loop (the text is written on a worker)."""
        return [(topic, number, partition.log.log_start_offset, partition.log.log_end_offset,
                 partition.log.size_in_bytes)
                for (topic, number), partition in sorted(self.services.replicas.replica_manager.partitions.items())]

    def collect(self) -> Iterator[Metric]:
        services = self.services
        cache = services.metadata.cache
        active = services.metadata.controller.active
        yield _gauge("kafkalite_controller_active_controller_count",
                     "1 on the active controller, 0 on every other broker.", 1 if active else 0)
        offline = 0
        if active:
            for topic_info in cache.topics.values():
                offline += sum(1 for info in topic_info.partitions.values() if info.leader < 0)
        yield _gauge("kafkalite_controller_offline_partitions_count",
                     "Partitions without a leader (reported by the active controller only).", offline)

        partitions = services.replicas.replica_manager.partitions
        leaders = list(services.replicas.replica_manager.leaders.values())
        under_replicated = sum(1 for partition in leaders if len(partition.isr) < len(partition.replicas))
        under_min_isr = sum(1 for partition in leaders
                            if len(partition.isr) < partition.log.config.min_insync_replicas)
        prefix = "kafkalite_server_replica_manager_"
        yield _gauge(prefix + "under_replicated_partitions",
                     "Partitions this broker leads whose ISR is smaller than their replica set.", under_replicated)
        yield _gauge(prefix + "under_min_isr_partition_count",
                     "Partitions this broker leads whose ISR is smaller than min.insync.replicas.", under_min_isr)
        yield _gauge(prefix + "leader_count", "Partitions this broker leads.", len(leaders))
        yield _gauge(prefix + "partition_count", "Partitions this broker hosts.", len(partitions))

        state = cache.zookeeper.state
        session = GaugeMetricFamily("kafkalite_zookeeper_session_state",
                                    "1 for the broker's current ZooKeeper session state.", labels=["state"])
        for candidate in SessionState:
            session.add_metric([candidate.value], 1 if candidate is state else 0)
        yield session
        zookeeper = cache.zookeeper
        if isinstance(zookeeper, ZooKeeperClient):  # not the in-memory twin of the unit tests
            yield SummaryMetricFamily("kafkalite_zookeeper_request_latency_seconds",
                                      "ZooKeeper requests of this broker and the time they took.",
                                      count_value=zookeeper.requests_completed, sum_value=zookeeper.request_seconds)
        yield _gauge("kafkalite_server_serving", "1 while the broker serves partitions (GET /ready answers 200).",
                     1 if services.replicas.not_serving_reason() is None else 0)
        yield from _topic_metrics(services.stats.topics)
        yield from _request_metrics(services.stats.requests)
        yield from _group_metrics(services.groups, self.lag)
        events = services.stats.events
        yield CounterMetricFamily(prefix + "isr_shrinks", "ISR shrinks this broker wrote as leader.",
                                  value=events.isr_shrinks)
        yield CounterMetricFamily(prefix + "isr_expands", "ISR expands this broker wrote as leader.",
                                  value=events.isr_expands)
        yield CounterMetricFamily("kafkalite_controller_leader_elections",
                                  "Leader elections this broker made as controller.", value=events.leader_elections)
        yield CounterMetricFamily("kafkalite_controller_unclean_leader_elections",
                                  "Leader elections of a replica outside the ISR (unclean.leader.election.enable).",
                                  value=events.unclean_leader_elections)
        yield CounterMetricFamily("kafkalite_server_producer_ids_allocated",
                                  "Producer ids this broker handed out (idempotent and transactional producers).",
                                  value=services.producer_ids.admin.producer_ids_handed_out)
        transactions = GaugeMetricFamily("kafkalite_transaction_coordinator_transactions",
                                         "Transactional ids this broker coordinates, by state.", labels=["state"])
        states = Counter(metadata.state.name for metadata in services.transactions.transactions.values())
        for txn_state in TxnState:
            transactions.add_metric([txn_state.value[1]], states[txn_state.name])
        yield transactions
        loop_lag = services.stats.loop_lag
        yield _gauge("kafkalite_server_event_loop_lag_seconds",
                     "How late the event loop last ran a 100 ms timer.", loop_lag.last)
        yield _gauge("kafkalite_server_event_loop_lag_max_seconds",
                     "The most the event loop was late in about the last 10 to 20 s.", loop_lag.recent_max)
        throttled = CounterMetricFamily("kafkalite_server_quota_throttled_responses",
                                        "Answers that carried a quota throttle time.", labels=["quota"])
        throttle_time = CounterMetricFamily("kafkalite_server_quota_throttle_time_seconds",
                                            "Throttle time handed out to clients over quota.", labels=["quota"])
        for key, (count, milliseconds) in services.quotas.throttle_totals().items():
            throttled.add_metric([key], count)
            throttle_time.add_metric([key], milliseconds / 1000)
        yield throttled
        yield throttle_time


_TOPIC_COUNTERS = (
    ("messages_in", "Records appended by this broker as leader."),
    ("bytes_in", "Bytes of record batches appended by this broker as leader."),
    ("bytes_out", "Bytes of record batches served to consumers."),
    ("replication_bytes_in", "Bytes of record batches this broker appended as a follower."),
    ("replication_bytes_out", "Bytes of record batches served to followers."),
    ("produce_requests", "Produce requests (a partition of a request counts as one)."),
    ("failed_produce_requests", "Produce requests whose append failed."),
    ("fetch_requests", "Consumer fetch requests (a partition of a request counts as one)."),
    ("failed_fetch_requests", "Consumer fetch requests answered with an error."),
)
#: Kafka's names for the request counters (``TotalProduceRequestsPerSec`` ...)
_TOPIC_COUNTER_NAMES = {"produce_requests": "total_produce_requests", "fetch_requests": "total_fetch_requests"}


def _topic_metrics(stats: TopicStats) -> Iterator[Metric]:
    prefix = "kafkalite_server_broker_topic_metrics_"
    for attribute, documentation in _TOPIC_COUNTERS:
        family = CounterMetricFamily(prefix + _TOPIC_COUNTER_NAMES.get(attribute, attribute), documentation,
                                     labels=["topic"])
        for topic, counts in sorted(stats.topics.items()):
            family.add_metric([topic], getattr(counts, attribute))
        yield family


def _request_metrics(stats: RequestStats) -> Iterator[Metric]:
    labels = ["listener", "request"]
    requests = CounterMetricFamily("kafkalite_network_requests", "Requests served, per front end and API.",
                                   labels=labels)
    errors = CounterMetricFamily("kafkalite_network_request_errors",
                                 "Requests answered with an error as a whole, per front end and API.", labels=labels)
    latency = HistogramMetricFamily("kafkalite_network_request_total_time_seconds",
                                    "Time from a request's arrival to its answer, per front end and API.",
                                    labels=labels)
    for (listener, request), counts in sorted(stats.requests.items()):
        requests.add_metric([listener, request], counts.requests)
        errors.add_metric([listener, request], counts.errors)
        cumulative = list(accumulate(counts.buckets))
        buckets = [(repr(bound), count) for bound, count in zip(LATENCY_BUCKETS, cumulative)]
        buckets.append(("+Inf", cumulative[-1]))
        latency.add_metric([listener, request], buckets, counts.seconds_total)
    yield requests
    yield errors
    yield latency


def _group_metrics(groups: GroupCoordinator, lag: list[PartitionLag]) -> Iterator[Metric]:
    prefix = "kafkalite_group_coordinator_"
    states = GaugeMetricFamily(prefix + "groups", "Groups this broker coordinates, by state.", labels=["state"])
    counted = Counter(group.state.value for group in groups.groups.values() if group.partition in groups.owned)
    for state in GroupState:
        states.add_metric([state.value], counted[state.value])
    yield states
    yield CounterMetricFamily(prefix + "rebalances", "Rebalances completed with members (new generations).",
                              value=groups.membership.rebalances)
    labels = ["group", "topic", "partition"]
    committed = GaugeMetricFamily(prefix + "committed_offset", "A group's committed offset of a partition.",
                                  labels=labels)
    lags = GaugeMetricFamily(prefix + "consumer_lag",
                             "A partition's high watermark minus the group's committed offset.", labels=labels)
    for item in lag:
        labels_of_item = [item.group_id, item.topic, str(item.partition)]
        committed.add_metric(labels_of_item, item.committed_offset)
        lags.add_metric(labels_of_item, item.lag)
    yield committed
    yield lags


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


_PARTITION_SERIES = (
    ("kafkalite_log_log_start_offset", "First offset of a hosted partition's log."),
    ("kafkalite_log_log_end_offset", "Next offset of a hosted partition's log."),
    ("kafkalite_log_size", "Bytes of a hosted partition's log segments."),
)


def _partition_text(rows: list[tuple[str, int, int, int, int]]) -> bytes:
    """The per-partition gauges in Prometheus' text format, written directly: topic names are
    made of ``[a-zA-Z0-9._-]`` only, so no label value needs escaping."""
    lines: list[str] = []
    for column, (name, documentation) in enumerate(_PARTITION_SERIES, start=2):
        lines.append(f"# HELP {name} {documentation}\n# TYPE {name} gauge\n")
        lines.extend(f'{name}{{topic="{row[0]}",partition="{row[1]}"}} {row[column]}.0\n' for row in rows)
    return "".join(lines).encode()


class _Collected(Collector):
    """Metric families collected on the loop, rendered on a worker."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


class BrokerMetrics:
    """What ``GET /metrics`` renders: the broker's state, its running counts and its process.

    The state is read on the loop (gauges, and one row per hosted partition unless
    ``metrics.partition.series.enable`` is false); the text is written on a worker thread."""

    def __init__(self, services: BrokerServices) -> None:
        self.services = services
        self.collector = BrokerStateCollector(services)

    async def render(self) -> bytes:
        """The Prometheus text: consumer lag is gathered first (it may ask other brokers), the
        state is read on the loop in one go, the text written on a worker."""
        lag = self.services.consumer_lag
        if lag is not None:
            self.collector.lag = await lag.compute(LAG_TIMEOUT_MS)
        families = list(self.collector.collect())
        rows = self.collector.partition_rows() if self.services.config.metrics_partition_series_enable else []
        return await asyncio.to_thread(self._text, families, rows)

    @staticmethod
    def _text(families: list[Metric], rows: list[tuple[str, int, int, int, int]]) -> bytes:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collected(families))
        ProcessCollector(registry=registry)
        return generate_latest(registry) + (_partition_text(rows) if rows else b"")


#: How long a scrape waits for other brokers' high watermarks (Prometheus' default timeout is 10 s).
LAG_TIMEOUT_MS = 3000
