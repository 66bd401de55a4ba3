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
  Kafka's ``kafka.log:type=Log`` beans.
* ``kafkalite_zookeeper_session_state`` (one series per state, 1 for the current one) and
  ``kafkalite_server_serving`` (1 while the broker serves: the same answer as ``/ready``).

Plus the ``process_*`` collector of ``prometheus_client`` (CPU, memory, open files).

Concurrency: ``collect`` runs on the broker's event loop (the HTTP handler renders the
registry there), the only thread that changes partition state; it only reads.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kafkalite.broker.partition import Role
from kafkalite.broker.services import BrokerServices
from kafkalite.coord.coordinator import SessionState


class BrokerStateCollector(Collector):
    """Gauges computed from the broker's state at scrape time (see the module docstring)."""

    def __init__(self, services: BrokerServices) -> None:
        self.services = services

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
        leaders = [partition for partition in partitions.values() if partition.role is Role.LEADER]
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

        starts = GaugeMetricFamily("kafkalite_log_log_start_offset", "First offset of a hosted partition's log.",
                                   labels=["topic", "partition"])
        ends = GaugeMetricFamily("kafkalite_log_log_end_offset", "Next offset of a hosted partition's log.",
                                 labels=["topic", "partition"])
        sizes = GaugeMetricFamily("kafkalite_log_size", "Bytes of a hosted partition's log segments.",
                                  labels=["topic", "partition"])
        for (topic, number), partition in sorted(partitions.items()):
            labels = [topic, str(number)]
            starts.add_metric(labels, partition.log.log_start_offset)
            ends.add_metric(labels, partition.log.log_end_offset)
            sizes.add_metric(labels, partition.log.size_in_bytes)
        yield starts
        yield ends
        yield sizes

        state = cache.zookeeper.state
        session = GaugeMetricFamily("kafkalite_zookeeper_session_state",
                                    "1 for the broker's current ZooKeeper session state.", labels=["state"])
        for candidate in SessionState:
            session.add_metric([candidate.value], 1 if candidate is state else 0)
        yield session
        yield _gauge("kafkalite_server_serving", "1 while the broker serves partitions (GET /ready answers 200).",
                     1 if services.replicas.not_serving_reason() is None else 0)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def broker_registry(services: BrokerServices) -> CollectorRegistry:
    """The registry ``GET /metrics`` renders: the broker's state and its process."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerStateCollector(services))
    ProcessCollector(registry=registry)
    return registry
