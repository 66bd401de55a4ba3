"""The web console every broker serves at ``/console``: static pages (shipped in the package,
nothing from a CDN) and the read-only JSON they draw, under ``/console/api``.

The JSON is the cluster's, not only this broker's: partition offsets are asked of each
partition's leader (one ListOffsets request per leader), groups are listed on every broker (each
lists the groups it coordinates), a group is described by its coordinator, sizes and traffic
come from every broker's ``GET /metrics``. Each call to another broker is bounded by
:data:`PEER_TIMEOUT_MS`; a broker that does not answer is left out (and named in ``missing``),
never waited on.

* ``GET /console/api/cluster`` — brokers, controller, this broker's ZooKeeper session, topic and
  partition counts, alerts (offline and under-replicated partitions);
* ``GET /console/api/topics`` and ``/console/api/topics/{topic}`` — partitions with leader,
  replicas, ISR, log start and end offsets, sizes, and the topic's configs;
* ``GET /console/api/groups`` and ``/console/api/groups/{group}`` — state, members with their
  assignment, committed offsets and lag per partition;
* ``GET /console/api/messages?topic=&partition=&offset=|timestamp=&limit=`` — records from an
  offset (or the first at or after a time), keys and values as text or base64;
* ``GET /console/api/throughput`` — the cluster's running totals of messages and bytes in and
  bytes out (the page charts their rates).

Concurrency: handlers run on the broker's event loop; they read the metadata cache and services
there and await only requests to other brokers.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from kafkalite import protocol
from kafkalite.broker import http_codec as codec
from kafkalite.broker.group_api import FindCoordinatorRequest
from kafkalite.broker.group_lag import offsets_at_leaders
from kafkalite.broker.services import BrokerServices, ConfigResource
from kafkalite.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    KafkaliteError,
    UnknownTopicOrPartitionError,
)

STATIC = Path(__file__).with_name("console_static")
PEER_TIMEOUT_MS = 3000
LATEST, EARLIEST = -1, -2
MAX_MESSAGES = 500

Json = dict[str, Any]


class ConsoleApi:
    """The console's JSON, computed from the services and the other brokers (see the module docstring)."""

    def __init__(self, services: BrokerServices) -> None:
        self.services = services
        self.transport = services.controller.transport

    # -- helpers -------------------------------------------------------------------------------
    def _addresses(self) -> dict[int, str]:
        return {broker.broker_id: broker.address for broker in self.services.metadata.describe_cluster().brokers}

    async def _ask(self, address: str, method: str, path: str, body: Json | None = None) -> Json | None:
        try:
            answer = await self.transport.request_json(address, method, path, body, timeout_ms=PEER_TIMEOUT_MS)
        except KafkaliteError:
            return None
        return answer if isinstance(answer, dict) else None

    async def _offsets(self, partitions: list[protocol.PartitionMetadata], topic: str,
                       timestamp: int) -> dict[int, int]:
        """Offsets of ``topic``'s partitions for ``timestamp`` (-1 latest, -2 earliest), asked of their leaders."""
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for partition in partitions:
            if partition.leader >= 0:
                by_leader.setdefault(partition.leader, []).append((topic, partition.partition))
        found = await offsets_at_leaders(self.services.metadata.cache, self.transport, by_leader, timestamp,
                                         PEER_TIMEOUT_MS)
        return {number: offset for (_, number), offset in found.items()}

    async def _scrape(self) -> tuple[list[Any], list[int]]:
        """Every broker's /metrics, parsed: (families, ids of brokers that did not answer)."""
        addresses = self._addresses()

        async def scrape(address: str) -> str | None:
            try:
                body = await self.transport.request(address, "GET", protocol.METRICS, timeout_ms=PEER_TIMEOUT_MS)
            except KafkaliteError:
                return None
            return body.decode("utf-8", "replace")

        texts = await asyncio.gather(*(scrape(address) for address in addresses.values()))
        missing = [broker_id for broker_id, text in zip(addresses, texts) if text is None]
        # a cluster's metrics (a series per partition) take a while to parse: a worker does it
        families = await asyncio.to_thread(_parse_all, [text for text in texts if text is not None])
        return families, missing

    async def _topic_metadata(self, topic: str | None) -> protocol.ClusterMetadata:
        return await self.services.metadata.cluster_metadata(None if topic is None else [topic], False)

    # -- handlers ------------------------------------------------------------------------------
    async def cluster(self, request: web.Request) -> Json:
        metadata = await self._topic_metadata(None)
        partitions = [partition for topic in metadata.topics for partition in topic.partitions]
        return {
            "cluster_id": metadata.cluster_id, "controller_id": metadata.controller_id,
            "served_by": self.services.config.broker_id,
            "brokers": [broker.to_json() for broker in metadata.brokers],
            "zookeeper_state": self.services.metadata.cache.zookeeper.state.value,
            "topics": len(metadata.topics), "partitions": len(partitions),
            "offline_partitions": sum(1 for partition in partitions if partition.leader < 0),
            "under_replicated_partitions": sum(1 for partition in partitions
                                               if len(partition.isr) < len(partition.replicas)),
        }

    async def topics(self, request: web.Request) -> Json:
        metadata = await self._topic_metadata(None)
        answers = []
        for topic in sorted(metadata.topics, key=lambda item: item.name):
            replication = max((len(partition.replicas) for partition in topic.partitions), default=0)
            answers.append({"name": topic.name, "internal": topic.is_internal, "partitions": len(topic.partitions),
                            "replication_factor": replication,
                            "under_replicated": sum(1 for partition in topic.partitions
                                                    if len(partition.isr) < len(partition.replicas)),
                            "offline": sum(1 for partition in topic.partitions if partition.leader < 0)})
        return {"topics": answers}

    async def topic(self, request: web.Request) -> Json:
        name = request.match_info["topic"]
        metadata = await self._topic_metadata(name)
        found = [topic for topic in metadata.topics if topic.name == name and topic.error_code == 0]
        if not found:
            raise UnknownTopicOrPartitionError(f"topic {name} does not exist")
        partitions = sorted(found[0].partitions, key=lambda item: item.partition)
        starts, ends, (families, missing) = await asyncio.gather(
            self._offsets(partitions, name, EARLIEST), self._offsets(partitions, name, LATEST), self._scrape())
        sizes: dict[int, int] = {}
        for family in families:
            if family.name == "kafkalite_log_size":
                for sample in family.samples:
                    if sample.labels.get("topic") == name:
                        number = int(sample.labels["partition"])
                        sizes[number] = max(sizes.get(number, 0), int(sample.value))
        described = await self.services.admin.describe_configs([ConfigResource("topic", name)])
        configs = described[0].result or [] if described else []
        return {"name": name, "internal": found[0].is_internal, "missing_brokers": missing,
                "partitions": [{**partition.to_json(), "log_start_offset": starts.get(partition.partition),
                                "log_end_offset": ends.get(partition.partition),
                                "size_bytes": sizes.get(partition.partition)} for partition in partitions],
                "configs": [{"name": entry.get("name"), "value": entry.get("value"),
                             "is_default": entry.get("is_default", False)} for entry in configs]}

    async def groups(self, request: web.Request) -> Json:
        addresses = self._addresses()
        answers = await asyncio.gather(*(self._ask(address, "POST", protocol.LIST_GROUPS, {})
                                         for address in addresses.values()))
        groups: list[Json] = []
        missing: list[int] = []
        for broker_id, answer in zip(addresses, answers):
            if answer is None:
                missing.append(broker_id)
                continue
            groups.extend({**item, "coordinator": broker_id} for item in answer.get("groups", []))
        return {"groups": sorted(groups, key=lambda item: str(item.get("group_id"))), "missing_brokers": missing}

    async def group(self, request: web.Request) -> Json:
        group_id = request.match_info["group"]
        found = await self.services.groups.find_coordinator(FindCoordinatorRequest(group_id))
        if found.error is not None:
            raise found.error
        address = f"{found.host}:{found.port}"
        described, fetched = await asyncio.gather(
            self._ask(address, "POST", protocol.DESCRIBE_GROUPS, {"group_id": group_id, "groups": [group_id]}),
            self._ask(address, "POST", protocol.OFFSET_FETCH, {"group_id": group_id, "topics": None}))
        if described is None or fetched is None:
            raise CoordinatorNotAvailableError(f"the coordinator of {group_id} (broker {found.node_id}) did not answer")
        description = (described.get("groups") or [{}])[0]
        committed = [(str(topic["name"]), int(item["partition"]), int(item["offset"]))
                     for topic in fetched.get("topics") or [] for item in topic.get("partitions", [])
                     if int(item.get("offset", -1)) >= 0]
        metadata = await self._topic_metadata(None)
        by_topic = {topic.name: topic.partitions for topic in metadata.topics}
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic in sorted({topic for topic, _, _ in committed}):
            for partition in by_topic.get(topic, []):
                if partition.leader >= 0:
                    by_leader.setdefault(partition.leader, []).append((topic, partition.partition))
        ends = await offsets_at_leaders(self.services.metadata.cache, self.transport, by_leader, LATEST,
                                        PEER_TIMEOUT_MS)
        return {
            "group_id": group_id, "coordinator": found.node_id, "state": description.get("state"),
            "protocol_type": description.get("protocol_type"), "protocol": description.get("protocol"),
            "members": [{"member_id": member.get("member_id"), "client_id": member.get("client_id"),
                         "client_host": member.get("client_host"),
                         "assignment": decode_assignment(member.get("assignment"))}
                        for member in description.get("members", [])],
            "offsets": [{"topic": topic, "partition": number, "committed_offset": offset,
                         "log_end_offset": ends.get((topic, number)),
                         "lag": max(0, ends[(topic, number)] - offset) if (topic, number) in ends else None}
                        for topic, number, offset in sorted(committed)],
        }

    async def messages(self, request: web.Request) -> Json:
        query = request.query
        topic = query.get("topic", "")
        partition = _integer(query.get("partition", "0"), "partition")
        limit = min(_integer(query.get("limit", "50"), "limit"), MAX_MESSAGES)
        if "timestamp" in query:
            timestamp = _integer(query["timestamp"], "timestamp")
            metadata = await self._topic_metadata(topic)
            partitions = [item for found in metadata.topics if found.name == topic for item in found.partitions
                          if item.partition == partition]
            offset = (await self._offsets(partitions, topic, timestamp)).get(partition, -1)
            if offset < 0:  # nothing at or after that time
                return {"topic": topic, "partition": partition, "records": [], "next_offset": None}
        else:
            offset = _integer(query.get("offset", "0"), "offset")
        fetched = await self.services.records.fetch(topic, partition, offset, 1024 * 1024, 0)
        answer = codec.encode_fetched(fetched)
        answer["records"] = answer["records"][:limit]
        return answer

    async def throughput(self, request: web.Request) -> Json:
        families, missing = await self._scrape()
        totals = {"messages_in": 0.0, "bytes_in": 0.0, "bytes_out": 0.0}
        for family in families:
            for key in totals:
                if family.name == f"kafkalite_server_broker_topic_metrics_{key}":
                    totals[key] += sum(sample.value for sample in family.samples
                                       if sample.name.endswith("_total") and not
                                       str(sample.labels.get("topic", "")).startswith("__"))
        return {**totals, "missing_brokers": missing}


def _parse_all(texts: list[str]) -> list[Any]:
    return [family for text in texts for family in text_string_to_metric_families(text)]


def _integer(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidRequestError(f"{name} must be an integer, got {text[:40]!r}") from None
    if name != "timestamp" and value < 0:
        raise InvalidRequestError(f"{name} must not be negative, got {value}")
    return value


def decode_assignment(encoded: Any) -> list[dict[str, Any]] | None:
    """A member's assignment in Kafka's ConsumerProtocolAssignment encoding (base64, as the
    group API answers it): ``[{"topic", "partitions"}]``; None when it is not that encoding."""
    if not encoded:
        return []
    try:
        data = base64.b64decode(str(encoded), validate=True)
        offset = 2  # the int16 version
        (count,) = struct.unpack_from(">i", data, offset)
        offset += 4
        if not 0 <= count <= len(data):
            return None
        topics = []
        for _ in range(count):
            (size,) = struct.unpack_from(">h", data, offset)
            name = data[offset + 2:offset + 2 + size].decode("utf-8")
            offset += 2 + size
            (partitions,) = struct.unpack_from(">i", data, offset)
            offset += 4
            if not 0 <= partitions <= len(data):
                return None
            numbers = list(struct.unpack_from(f">{partitions}i", data, offset))
            offset += 4 * partitions
            topics.append({"topic": name, "partitions": numbers})
        return topics
    except (binascii.Error, ValueError, struct.error, UnicodeDecodeError):
        return None


def routes(services: BrokerServices, json_response: Callable[[Json], web.Response]) -> list[web.AbstractRouteDef]:
    """The console's routes: the pages (``/console``, its static files) and its JSON."""
    api = ConsoleApi(services)

    def handler(method: Callable[[web.Request], Awaitable[Json]]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def respond(request: web.Request) -> web.Response:
            return json_response(await method(request))
        return respond

    async def index(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def redirect(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/console/")

    return [
        web.get("/console", redirect),
        web.get("/console/", index),
        web.get("/console/api/cluster", handler(api.cluster)),
        web.get("/console/api/topics", handler(api.topics)),
        web.get("/console/api/topics/{topic}", handler(api.topic)),
        web.get("/console/api/groups", handler(api.groups)),
        web.get("/console/api/groups/{group}", handler(api.group)),
        web.get("/console/api/messages", handler(api.messages)),
        web.get("/console/api/throughput", handler(api.throughput)),
        web.static("/console/static", STATIC),
    ]
