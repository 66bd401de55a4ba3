"""Transactional against idempotent producer throughput, with kafkalite's own ``KafkaProducer``.

``python -m kafkalite.bench.transactions --bootstrap HOST:PORT --topic T --records N
[--transaction-records 100,10000] [--rounds R]`` sends ``N`` records of 100-byte values (no
key, acks=all) to partition 0 of ``T`` three ways, in ``R`` alternating rounds (default 3) of
``N / R`` records each way: idempotent, then each transactional size, then again. A machine's
speed drifts over seconds (other tenants, CPU frequency, page cache), so each transactional run
is compared with the idempotent run of its own round, measured moments before, and the ratio
reported is the median of the rounds' ratios. It prints one line per run (``txn round ...``),
then the totals::

    txn produce idempotent: <N> records in <s> s, <rate> records/s
    txn produce transactional <size>: <N> records in <s> s, <rate> records/s (<txns> transactions);
        median ratio to idempotent over <R> rounds: <ratio>x

(the second on one line), rates over all rounds. The idempotent run sends every record and
flushes once; a transactional run with ``size``
records per transaction repeats ``begin_transaction()``, ``size`` ``send()`` calls and
``commit_transaction()`` (which flushes, then ends the transaction: EndTxn at the coordinator,
whose commit markers are written to the partition with acks=all). Each run has its own producer,
created and initialised (``init_transactions()``, the topic's metadata fetched) before its clock
starts, so the figures compare steady-state sending; a run's rate is from its first ``send()``
to the end of its last flush or commit. No run registers per-record callbacks (they would cost
more than the transactions being measured): a transactional run's ``commit_transaction()``
raises when a batch failed, and every run checks afterwards that the partition grew by its
records (and, for transactions, one commit marker each).

Exit status 0, 1 when a record or a commit failed.

Concurrency: single-threaded driver; each producer runs its own I/O thread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from typing import Any

from kafkalite.client.admin import KafkaAdminClient
from kafkalite.client.producer import KafkaProducer
from kafkalite.client.types import TopicPartition
from kafkalite.errors import KafkaliteError

VALUE_SIZE = 100
#: Producer settings of every run (the transactional runs add ``transactional_id``).
PRODUCER_SETTINGS: dict[str, Any] = {
    "acks": "all", "enable_idempotence": True, "linger_ms": 5, "batch_size": 256 * 1024,
}


def settings_line() -> str:
    """The producer settings of every run, as one printable line."""
    return "txn settings: " + " ".join(f"{key}={value}" for key, value in PRODUCER_SETTINGS.items())


def _report(label: str, records: int, seconds: float, suffix: str = "", prefix: str = "txn produce") -> str:
    rate = records / seconds if seconds > 0 else float("inf")
    return f"{prefix} {label}: {records} records in {seconds:.2f} s, {rate:.0f} records/s{suffix}"


def _producer(bootstrap: str, topic: str, transactional_id: str | None) -> KafkaProducer:
    options = dict(PRODUCER_SETTINGS, bootstrap_servers=bootstrap)
    if transactional_id is not None:
        options["transactional_id"] = transactional_id
    producer = KafkaProducer(**options)
    producer.partitions_for(topic)
    if transactional_id is not None:
        producer.init_transactions()
    return producer


def end_offset(bootstrap: str, topic: str) -> int:
    """Partition 0's log end offset (read_uncommitted: markers included)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        return int(admin.list_offsets({tp: -1})[tp].offset)
    finally:
        admin.close()


def run_idempotent(bootstrap: str, topic: str, records: int) -> float:
    """Seconds to send ``records`` values with an idempotent producer and flush once."""
    producer = _producer(bootstrap, topic, None)
    value = b"v" * VALUE_SIZE
    try:
        send = producer.send
        started = time.perf_counter()
        for _ in range(records):
            send(topic, value, partition=0)
        producer.flush()
        return time.perf_counter() - started
    finally:
        producer.close()


def run_transactional(bootstrap: str, topic: str, records: int, per_transaction: int) -> tuple[float, int]:
    """Seconds to send ``records`` values in transactions of ``per_transaction`` records each
    (the last may be shorter), and the number of transactions committed."""
    producer = _producer(bootstrap, topic, f"bench-txn-{uuid.uuid4().hex[:8]}")
    value = b"v" * VALUE_SIZE
    transactions = 0
    try:
        send = producer.send
        started = time.perf_counter()
        sent = 0
        while sent < records:
            size = min(per_transaction, records - sent)
            producer.begin_transaction()
            for _ in range(size):
                send(topic, value, partition=0)
            producer.commit_transaction()  # raises when a batch of the transaction failed
            transactions += 1
            sent += size
        return time.perf_counter() - started, transactions
    finally:
        producer.close()


def _add(totals: dict[str, list[float]], label: str, records: int, seconds: float, transactions: int) -> None:
    total = totals.setdefault(label, [0.0, 0.0, 0.0])
    total[0] += records
    total[1] += seconds
    total[2] += transactions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--bootstrap", required=True, help="a broker's address")
    parser.add_argument("--topic", required=True, help="an existing topic (partition 0 is written)")
    parser.add_argument("--records", type=int, default=1_000_000, help="records per run")
    parser.add_argument("--transaction-records", default="100,10000",
                        help="comma-separated records per transaction, one transactional run each")
    parser.add_argument("--small-transaction-records", type=int, default=0,
                        help="records for runs of fewer than 1,000 records per transaction (default: --records)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds; each run of a round sends its share of the records (default 3)")
    arguments = parser.parse_args(argv)
    try:
        sizes = [int(part) for part in arguments.transaction_records.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--transaction-records must be comma-separated integers, got {arguments.transaction_records!r}")
    if arguments.records <= 0 or arguments.rounds <= 0 or any(size <= 0 for size in sizes):
        parser.error("--records, --rounds and every --transaction-records entry must be positive")
    print(settings_line(), flush=True)
    bootstrap, topic, rounds = arguments.bootstrap, arguments.topic, arguments.rounds
    idempotent_share = -(-arguments.records // rounds)
    shares = {size: -(-((arguments.small_transaction_records or arguments.records) if size < 1000
                        else arguments.records) // rounds) for size in sizes}
    totals: dict[str, list[float]] = {}  # label: [records, seconds, transactions]
    ratios: dict[int, list[float]] = {size: [] for size in sizes}
    try:
        before = end_offset(bootstrap, topic)
        for number in range(1, rounds + 1):
            seconds = run_idempotent(bootstrap, topic, idempotent_share)
            written, before = end_offset(bootstrap, topic) - before, end_offset(bootstrap, topic)
            if written != idempotent_share:
                raise KafkaliteError(f"the partition grew by {written} offsets for {idempotent_share} records")
            reference = idempotent_share / seconds
            _add(totals, "idempotent", idempotent_share, seconds, 0)
            print(_report("idempotent", idempotent_share, seconds, prefix=f"txn round {number}/{rounds}:"), flush=True)
            for size in sizes:
                share = shares[size]
                seconds, transactions = run_transactional(bootstrap, topic, share, size)
                written, before = end_offset(bootstrap, topic) - before, end_offset(bootstrap, topic)
                if written != share + transactions:
                    raise KafkaliteError(f"the partition grew by {written} offsets for {share} records in "
                                         f"{transactions} transactions")
                ratio = share / seconds / reference
                ratios[size].append(ratio)
                _add(totals, f"transactional {size}", share, seconds, transactions)
                print(_report(f"transactional {size}", share, seconds,
                              f" ({transactions} transactions), {ratio:.2f}x the round's idempotent",
                              prefix=f"txn round {number}/{rounds}:"), flush=True)
        total_records, total_seconds, _ = totals["idempotent"]
        print(_report("idempotent", int(total_records), total_seconds), flush=True)
        for size in sizes:
            total_records, total_seconds, total_transactions = totals[f"transactional {size}"]
            print(_report(f"transactional {size}", int(total_records), total_seconds,
                          f" ({int(total_transactions)} transactions); median ratio to idempotent over {rounds} "
                          f"rounds: {statistics.median(ratios[size]):.2f}x"), flush=True)
    except KafkaliteError as exc:
        print(f"txn produce: failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
