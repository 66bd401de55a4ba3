"""WriteTxnMarkers (API 27) over the Kafka protocol: a transaction coordinator asks partition
leaders to append the commit or abort markers of finished transactions.

The handler reads the kio request into :class:`~kafkalite.broker.services.TxnMarkerRequest`
items, calls :meth:`~kafkalite.broker.services.ReplicaService.write_txn_markers` (the leader's
append and acks=all wait) and answers Kafka's per-partition error codes. Kafka waits for the
markers with the broker's ``request.timeout.ms``; so does this handler.

Concurrency: event-loop only, like every handler.
"""

from __future__ import annotations

from typing import Any

from kafkalite.broker.kafka.context import ApiHandler, KafkaAnswer, KafkaRequestContext
from kafkalite.broker.services import TxnMarkerRequest

WRITE_TXN_MARKERS = 27


async def write_txn_markers(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """Every marker's partitions, answered per marker, topic and partition in the order asked."""
    markers = [TxnMarkerRequest(int(marker.producer_id), int(marker.producer_epoch),
                                bool(marker.transaction_result), int(marker.coordinator_epoch),
                                [(topic.name, int(index)) for topic in marker.topics
                                 for index in topic.partition_indexes])
               for marker in request.markers]
    services = context.services
    results = await services.replicas.write_txn_markers(markers, services.config.request_timeout_ms)
    answers: list[dict[str, Any]] = []
    for marker, result in zip(markers, results):
        topics: dict[str, list[dict[str, Any]]] = {}
        for topic, number in marker.partitions:
            topics.setdefault(topic, []).append({"partition_index": number,
                                                 "error_code": result.errors.get((topic, number), 0)})
        answers.append({"producer_id": result.producer_id,
                        "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()]})
    return {"markers": answers}


HANDLERS: tuple[ApiHandler, ...] = (
    # v1 only: kio has no v0 schema (v0 and v1 carry the same fields; v1 is the flexible one every
    # Kafka since 2.8 sends), and v2 belongs to KIP-890's transaction version 2.
    ApiHandler(WRITE_TXN_MARKERS, 1, 1, write_txn_markers),
)
