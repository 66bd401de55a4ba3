"""``kafkalite-transactions.sh``: inspect and repair transactions, like Kafka's
``kafka-transactions.sh`` (same sub-commands, flags and columns).

* ``list`` — every transactional id, asked of every broker: ``TransactionalId Coordinator
  ProducerId TransactionState``;
* ``describe --transactional-id ID`` — at its coordinator: ``CoordinatorId TransactionalId
  ProducerId ProducerEpoch TransactionState TransactionTimeoutMs CurrentTransactionStartTimeMs
  TransactionDurationMs TopicPartitions``;
* ``describe-producers --topic T --partition P`` — the partition leader's producer state:
  ``ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp
  CurrentTransactionStartOffset``;
* ``find-hanging --broker-id B [--max-transaction-timeout MINUTES]`` — transactions open on the
  partitions broker B leads for longer than the timeout (default 15) that their coordinator
  does not know as ongoing on that partition;
* ``abort --topic T --partition P --start-offset O`` — writes an abort marker (WriteTxnMarkers,
  through the partition's leader) for the transaction that started at offset O.

Exit codes: 0 done, 1 the operation failed (a message says why), 2 bad arguments.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
from typing import Any

from kafkalite import protocol
from kafkalite.errors import BrokerResponseError, KafkaliteError
from kafkalite.tools.common import (
    EXIT_FAILED,
    EXIT_OK,
    ToolArgumentParser,
    UsageError,
    command_config_options,
    run_cli,
    transport_ssl_context,
)
from kafkalite.transport import AsyncTransport

TRANSACTION_KEY = 1


def build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(prog="kafkalite-transactions.sh",
                                description="This tool is used to analyze the transactional state of producers "
                                            "in the cluster. It can be used to detect and recover from hanging "
                                            "transactions.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the server(s) to connect to, e.g. localhost:9092")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties file: security.protocol, ssl.*, sasl.*")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("list", help="list transactions")
    describe = commands.add_parser("describe", help="describe the state of an active transactional-id")
    describe.add_argument("--transactional-id", required=True, metavar="ID")
    producers = commands.add_parser("describe-producers", help="describe the states of active producers "
                                                                "for a topic partition")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", required=True, type=int)
    hanging = commands.add_parser("find-hanging", help="find hanging transactions")
    hanging.add_argument("--broker-id", required=True, type=int)
    hanging.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                         help="transactions open longer than this are candidates (default 15)")
    abort = commands.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", required=True, type=int)
    abort.add_argument("--start-offset", required=True, type=int, metavar="OFFSET")
    return parser


def _check(answer: dict[str, Any]) -> dict[str, Any]:
    code = answer.get("error_code", 0)
    if code:
        raise protocol.error_for(int(code), str(answer.get("message") or answer.get("error") or ""))
    return answer


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """Kafka's tool layout: left-aligned columns separated by tabs-like padding."""
    cells = [headers] + [[str(value) for value in row] for row in rows]
    widths = [max(len(row[index]) for row in cells) for index in range(len(headers))]
    return "\n".join("\t".join(value.ljust(width) for value, width in zip(row, widths)).rstrip() for row in cells)


class Tool:
    """One run's broker calls (HTTP, the brokers' own API)."""

    def __init__(self, bootstrap: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.bootstrap = [item.strip() for item in bootstrap.split(",") if item.strip()]
        self.transport = AsyncTransport(request_timeout_ms=30_000, client_id="kafkalite-transactions",
                                        ssl_context=ssl_context)

    async def close(self) -> None:
        await self.transport.close()

    async def call(self, address: str, path: str, body: Any) -> dict[str, Any]:
        answer = await self.transport.request_json(address, "POST", path, body)
        return answer if isinstance(answer, dict) else {}

    async def metadata(self, topics: list[str] | None) -> protocol.ClusterMetadata:
        last: KafkaliteError | None = None
        for address in self.bootstrap:
            try:
                return protocol.ClusterMetadata.from_json(await self.call(address, protocol.METADATA,
                                                                          {"topics": topics}))
            except KafkaliteError as exc:
                last = exc
        raise last or KafkaliteError("no --bootstrap-server given")

    @staticmethod
    def address(metadata: protocol.ClusterMetadata, broker_id: int) -> str:
        for broker in metadata.brokers:
            if broker.broker_id == broker_id:
                return f"{broker.host}:{broker.port}"
        raise KafkaliteError(f"broker {broker_id} is not alive")

    async def leader(self, topic: str, partition: int) -> str:
        metadata = await self.metadata([topic])
        for item in metadata.topics:
            for entry in item.partitions:
                if item.name == topic and entry.partition == partition and entry.leader >= 0:
                    return self.address(metadata, entry.leader)
        raise KafkaliteError(f"{topic}-{partition} has no leader (or does not exist)")

    async def producers(self, address: str, topic: str, partition: int) -> list[dict[str, Any]]:
        answer = await self.call(address, protocol.DESCRIBE_PRODUCERS,
                                 {"partitions": [{"topic": topic, "partition": partition}]})
        entry = _check(answer)["partitions"][0]
        return list(_check(entry)["producers"])

    async def coordinator(self, transactional_id: str) -> tuple[int, str]:
        answer = _check(await self.call(self.bootstrap[0], protocol.FIND_COORDINATOR,
                                        {"key": transactional_id, "key_type": TRANSACTION_KEY}))
        return int(answer["node_id"]), f"{answer['host']}:{answer['port']}"

    # -- commands -----------------------------------------------------------------------------
    async def list(self) -> str:
        metadata = await self.metadata([])
        rows = []
        for broker in metadata.brokers:
            answer = await self.call(f"{broker.host}:{broker.port}", protocol.LIST_TRANSACTIONS, {})
            for item in answer.get("transactions", []):
                rows.append([item["transactional_id"], broker.broker_id, item["producer_id"], item["state"]])
        return table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], sorted(rows))

    async def describe(self, transactional_id: str) -> str:
        node_id, address = await self.coordinator(transactional_id)
        answer = _check(await self.call(address, protocol.DESCRIBE_TRANSACTIONS,
                                        {"transactional_ids": [transactional_id]}))
        item = _check(answer["transactions"][0])
        start = int(item["start_ms"])
        duration = int(time.time() * 1000) - start if start >= 0 else "None"
        partitions = ",".join(f"{entry['topic']}-{entry['partition']}" for entry in item["partitions"])
        return table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                      "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                      "TopicPartitions"],
                     [[node_id, transactional_id, item["producer_id"], item["producer_epoch"], item["state"],
                       item["transaction_timeout_ms"], start if start >= 0 else "None", duration, partitions]])

    async def describe_producers(self, topic: str, partition: int) -> str:
        producers = await self.producers(await self.leader(topic, partition), topic, partition)
        return table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                      "CurrentTransactionStartOffset"],
                     [[item["producer_id"], item["producer_epoch"], item.get("coordinator_epoch", -1),
                       item["last_sequence"], item["last_timestamp"],
                       item["current_txn_start_offset"] if item.get("current_txn_start_offset", -1) >= 0 else "None"]
                      for item in producers])

    async def find_hanging(self, broker_id: int, max_timeout_minutes: int) -> str:
        metadata = await self.metadata(None)
        address = self.address(metadata, broker_id)
        now = int(time.time() * 1000)
        limit_ms = max_timeout_minutes * 60_000
        rows = []
        for topic in metadata.topics:
            for entry in topic.partitions:
                if entry.leader != broker_id:
                    continue
                for producer in await self.producers(address, topic.name, entry.partition):
                    start = int(producer.get("current_txn_start_offset", -1))
                    if start < 0 or now - int(producer["last_timestamp"]) <= limit_ms:
                        continue
                    if await self._known_ongoing(metadata, int(producer["producer_id"]), topic.name,
                                                 entry.partition):
                        continue
                    rows.append([topic.name, entry.partition, producer["producer_id"], producer["producer_epoch"],
                                 producer.get("coordinator_epoch", -1), start, producer["last_timestamp"],
                                 (now - int(producer["last_timestamp"])) // 60_000])
        return table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                      "LastTimestamp", "Duration(min)"], rows)

    async def _known_ongoing(self, metadata: protocol.ClusterMetadata, producer_id: int, topic: str,
                             partition: int) -> bool:
        """Whether some coordinator has this producer's transaction ongoing on the partition."""
        for broker in metadata.brokers:
            address = f"{broker.host}:{broker.port}"
            answer = await self.call(address, protocol.LIST_TRANSACTIONS, {"producer_ids": [producer_id]})
            ids = [item["transactional_id"] for item in answer.get("transactions", [])]
            if not ids:
                continue
            described = await self.call(address, protocol.DESCRIBE_TRANSACTIONS, {"transactional_ids": ids})
            for item in described.get("transactions", []):
                if item.get("state") in ("Ongoing", "PrepareCommit", "PrepareAbort") and \
                        {"topic": topic, "partition": partition} in item.get("partitions", []):
                    return True
        return False

    async def abort(self, topic: str, partition: int, start_offset: int) -> str:
        address = await self.leader(topic, partition)
        for producer in await self.producers(address, topic, partition):
            if int(producer.get("current_txn_start_offset", -1)) == start_offset:
                break
        else:
            raise KafkaliteError(f"no open transaction of {topic}-{partition} starts at offset {start_offset}")
        body = {"timeout_ms": 30_000, "markers": [{
            "producer_id": producer["producer_id"], "producer_epoch": producer["producer_epoch"],
            "committed": False, "coordinator_epoch": max(0, int(producer.get("coordinator_epoch", -1))),
            "partitions": [{"topic": topic, "partition": partition}]}]}
        answer = await self.call(address, protocol.WRITE_TXN_MARKERS, body)
        for marker in answer.get("markers", []):
            for entry in marker.get("partitions", []):
                _check(entry)
        return (f"Aborted the transaction of producer {producer['producer_id']} (epoch "
                f"{producer['producer_epoch']}) on {topic}-{partition} that started at offset {start_offset}")


async def _run(arguments: Any) -> str:
    tool = Tool(arguments.bootstrap_server,
                transport_ssl_context(command_config_options(arguments.command_config)))
    try:
        if arguments.command == "list":
            return await tool.list()
        if arguments.command == "describe":
            return await tool.describe(arguments.transactional_id)
        if arguments.command == "describe-producers":
            return await tool.describe_producers(arguments.topic, arguments.partition)
        if arguments.command == "find-hanging":
            return await tool.find_hanging(arguments.broker_id, arguments.max_transaction_timeout)
        return await tool.abort(arguments.topic, arguments.partition, arguments.start_offset)
    finally:
        await tool.close()


def main(argv: list[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    if not arguments.bootstrap_server:
        raise UsageError("Missing required option(s): --bootstrap-server")
    if arguments.command is None:
        raise UsageError("a command is required: list, describe, describe-producers, find-hanging or abort")
    for name in ("partition", "start_offset", "broker_id"):
        if getattr(arguments, name, 0) < 0:
            raise UsageError(f"--{name.replace('_', '-')} must not be negative")
    try:
        print(asyncio.run(_run(arguments)))
    except BrokerResponseError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(run_cli(main))
