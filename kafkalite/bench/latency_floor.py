"""The floor under end-to-end latency (P4): P4's messages between five minimal processes.

P4 times a record from ``send()`` to the consumer at 10,000 records/s, acks=all, on one
partition with three replicas, with :mod:`kafkalite.tools.e2e_latency`. Whatever a broker does,
each record then travels as at least these one-way messages over loopback TCP between five
processes: the produce (producer → leader); a fetch answer to each follower; each follower's
next fetch, which tells the leader its new offset and so moves the high watermark; the answer
to the consumer's long-poll fetch and the consumer's next fetch; and the produce answer.

This program sends that pattern with the least Python per message there can be, and prints the
latencies it measures, so that P4's figures can be read against what this machine's kernel and
interpreter allow at all:

* the leader runs on asyncio (uvloop when it is installed, as the brokers do) with one
  ``asyncio.Protocol`` per connection; its log is a list of values, its high watermark the least
  of its log end and the followers' fetch offsets; it answers a fetch at once when there is
  something to give and parks it otherwise, as the brokers' long-poll fetches do;
* the two followers and the consumer loop over blocking sockets: send a fetch, read the answer;
* the producer (this process) paces its sends with the e2e tool's throttler (Kafka's
  ThroughputThrottler: bursts every 2 ms), one record per message (``linger.ms=0``), and a
  thread reads the produce answers.

Every message is a 4-byte length and a body; no checksums, no batches, no protocol parsing.

Run: ``python -m kafkalite.bench.latency_floor [--records N] [--rate R] [--record-size S]``.
Prints one line::

    latency floor: p50 <ms> ms, p99 <ms> ms, p99.9 <ms> ms, avg <ms> ms (<N> records at <R> records/s sent)

Exit status 0, or 1 when a record did not arrive within the drain time.

Concurrency: the producer's thread and its answer-reading thread share nothing but a counter
written by the reader; each child process is single-threaded.
"""

from __future__ import annotations

import array
import asyncio
import multiprocessing
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from kafkalite.tools.common import ToolArgumentParser
from kafkalite.tools.e2e_latency import DRAIN_TIMEOUT_SECONDS, HEADER, percentile
from kafkalite.tools.producer_perf_test import ThroughputThrottler

LENGTH = struct.Struct(">I")
OFFSET = struct.Struct(">q")
PRODUCE, FOLLOWER_FETCH, CONSUMER_FETCH = b"P", b"F", b"C"
FOLLOWERS = 2
STARTUP_SECONDS = 30.0


def _frame(body: bytes) -> bytes:
    return LENGTH.pack(len(body)) + body


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    """``size`` bytes from ``sock``, or None once the peer has closed."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        count = sock.recv_into(view[got:])
        if count == 0:
            return None
        got += count
    return bytes(buffer)


def _read_frame(sock: socket.socket) -> bytes | None:
    header = _read_exactly(sock, LENGTH.size)
    if header is None:
        return None
    return _read_exactly(sock, LENGTH.unpack(header)[0])


def _records(values: list[bytes]) -> bytes:
    return b"".join(LENGTH.pack(len(value)) + value for value in values)


def _split_records(body: bytes) -> list[bytes]:
    values: list[bytes] = []
    position = 0
    while position < len(body):
        (size,) = LENGTH.unpack_from(body, position)
        position += LENGTH.size
        values.append(body[position:position + size])
        position += size
    return values


class _Leader:
    """The leader's state; every method runs on its event loop."""

    def __init__(self, on_all_waiting: Callable[[], None]) -> None:
        self.on_all_waiting: Callable[[], None] | None = on_all_waiting
        self.transports: list[asyncio.Transport] = []
        self.log: list[bytes] = []
        self.high_watermark = 0
        self.follower_offsets: dict[int, int] = {}
        self.parked_followers: dict[int, asyncio.Transport] = {}
        self.parked_consumer: tuple[asyncio.Transport, int] | None = None
        self.pending_acks: list[tuple[int, asyncio.Transport, bytes]] = []  # (offset, producer, sequence)

    def produce(self, transport: asyncio.Transport, value: bytes) -> None:
        offset = len(self.log)
        self.log.append(value)
        self.pending_acks.append((offset, transport, value[8:16]))
        for follower, waiting in list(self.parked_followers.items()):
            del self.parked_followers[follower]
            self._answer_follower(waiting, self.follower_offsets.get(follower, 0))

    def follower_fetch(self, transport: asyncio.Transport, follower: int, offset: int) -> None:
        self.follower_offsets[follower] = offset
        if len(self.follower_offsets) == FOLLOWERS:
            self._advance(min(len(self.log), *self.follower_offsets.values()))
        if offset < len(self.log):
            self._answer_follower(transport, offset)
        else:
            self.parked_followers[follower] = transport
            self._maybe_all_waiting()

    def consumer_fetch(self, transport: asyncio.Transport, offset: int) -> None:
        if offset < self.high_watermark:
            transport.write(_frame(_records(self.log[offset:self.high_watermark])))
        else:
            self.parked_consumer = (transport, offset)
            self._maybe_all_waiting()

    def _maybe_all_waiting(self) -> None:
        """Tell the producer once: both followers and the consumer wait for the first record."""
        if (self.on_all_waiting is not None and len(self.parked_followers) == FOLLOWERS
                and self.parked_consumer is not None):
            self.on_all_waiting()
            self.on_all_waiting = None

    def _answer_follower(self, transport: asyncio.Transport, offset: int) -> None:
        transport.write(_frame(_records(self.log[offset:])))

    def _advance(self, high_watermark: int) -> None:
        if high_watermark <= self.high_watermark:
            return
        self.high_watermark = high_watermark
        if self.parked_consumer is not None and self.parked_consumer[1] < high_watermark:
            transport, offset = self.parked_consumer
            self.parked_consumer = None
            self.consumer_fetch(transport, offset)
        done = 0
        for offset, producer, sequence in self.pending_acks:
            if offset >= high_watermark:
                break
            producer.write(_frame(sequence))
            done += 1
        del self.pending_acks[:done]


class _Connection(asyncio.Protocol):
    """One client of the leader: frames in, calls on the leader's state."""

    def __init__(self, leader: _Leader) -> None:
        self.leader = leader
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.leader.transports.append(self.transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        position = 0
        transport = self.transport
        assert transport is not None
        while len(buffer) - position >= LENGTH.size:
            (size,) = LENGTH.unpack_from(buffer, position)
            if len(buffer) - position - LENGTH.size < size:
                break
            body = bytes(buffer[position + LENGTH.size:position + LENGTH.size + size])
            position += LENGTH.size + size
            kind = body[:1]
            if kind == PRODUCE:
                self.leader.produce(transport, body[1:])
            elif kind == FOLLOWER_FETCH:
                self.leader.follower_fetch(transport, body[1], OFFSET.unpack_from(body, 2)[0])
            elif kind == CONSUMER_FETCH:
                self.leader.consumer_fetch(transport, OFFSET.unpack_from(body, 1)[0])
        del buffer[:position]


def _leader_process(ready: Any, stop: Any) -> None:
    """The leader: listen on a free loopback port and send it through ``ready``, then send
    ``"waiting"`` once the followers and the consumer wait for records; serve until ``stop``."""

    async def serve() -> None:
        leader = _Leader(lambda: ready.send("waiting"))
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Connection(leader), "127.0.0.1", 0)
        ready.send(server.sockets[0].getsockname()[1])
        await loop.run_in_executor(None, stop.wait)
        server.close()
        for transport in leader.transports:
            transport.close()

    try:
        import uvloop
    except ImportError:
        asyncio.run(serve())
        return
    uvloop.run(serve())


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _follower_process(port: int, follower: int) -> None:
    """A follower: fetch from its log end, append what comes back, until the leader closes."""
    sock = _connect(port)
    log: list[bytes] = []
    with sock:
        while True:
            sock.sendall(_frame(FOLLOWER_FETCH + bytes([follower]) + OFFSET.pack(len(log))))
            body = _read_frame(sock)
            if body is None:
                return
            log.extend(_split_records(body))


def _consumer_process(port: int, count: int, results: Any) -> None:
    """The consumer: fetch from its position and time each record's arrival, ``count`` records."""
    sock = _connect(port)
    latencies = array.array("d")
    clock = time.monotonic_ns
    offset = 0
    sock.settimeout(DRAIN_TIMEOUT_SECONDS)
    with sock:
        try:
            while offset < count:
                sock.sendall(_frame(CONSUMER_FETCH + OFFSET.pack(offset)))
                body = _read_frame(sock)
                if body is None:
                    break
                now = clock()
                for value in _split_records(body):
                    sent, _ = HEADER.unpack_from(value)
                    latencies.append((now - sent) / 1e6)
                    offset += 1
        except TimeoutError:
            pass
    results.send_bytes(latencies.tobytes())


def measure(records: int, rate: float, record_size: int) -> tuple[list[float], float]:
    """Run the five processes once; return the latencies (ms, in arrival order) and the rate sent."""
    context = multiprocessing.get_context("spawn")
    ready_parent, ready_child = context.Pipe()
    results_parent, results_child = context.Pipe()
    stop = context.Event()
    leader = context.Process(target=_leader_process, args=(ready_child, stop), name="floor-leader", daemon=True)
    children = [leader]
    leader.start()
    try:
        if not ready_parent.poll(STARTUP_SECONDS):
            raise RuntimeError("the leader process did not start")
        port = int(ready_parent.recv())
        for follower in range(FOLLOWERS):
            children.append(context.Process(target=_follower_process, args=(port, follower),
                                            name=f"floor-follower-{follower}", daemon=True))
        children.append(context.Process(target=_consumer_process, args=(port, records, results_child),
                                        name="floor-consumer", daemon=True))
        for child in children[1:]:
            child.start()
        if not ready_parent.poll(STARTUP_SECONDS) or ready_parent.recv() != "waiting":
            raise RuntimeError("the followers and the consumer did not connect")
        sent_rate = _produce(port, records, rate, record_size)
        if not results_parent.poll(DRAIN_TIMEOUT_SECONDS + STARTUP_SECONDS):
            raise RuntimeError("the consumer process did not report")
        latencies = array.array("d")
        latencies.frombytes(results_parent.recv_bytes())
        return latencies.tolist(), sent_rate
    finally:
        stop.set()
        for child in children:
            child.join(5)
            if child.is_alive():
                child.kill()
                child.join()


def _produce(port: int, records: int, rate: float, record_size: int) -> float:
    """Send ``records`` values at ``rate``; return the rate achieved. A thread reads the answers."""
    sock = _connect(port)
    answered = [0]

    def read_answers() -> None:
        while answered[0] < records:
            if _read_frame(sock) is None:
                return
            answered[0] += 1

    reader = threading.Thread(target=read_answers, name="floor-produce-answers", daemon=True)
    reader.start()
    filler = b"x" * max(0, record_size - HEADER.size)
    clock: Callable[[], int] = time.monotonic_ns
    throttler = ThroughputThrottler(rate, time.monotonic())
    started = time.monotonic()
    send = sock.sendall
    for sequence in range(records):
        if throttler.should_throttle(sequence, time.monotonic()):
            throttler.throttle()
        send(_frame(PRODUCE + HEADER.pack(clock(), sequence) + filler))
    seconds = time.monotonic() - started
    reader.join(DRAIN_TIMEOUT_SECONDS)
    sock.close()
    return records / max(seconds, 1e-9)


def main(argv: list[str] | None = None) -> int:
    parser = ToolArgumentParser(prog="python -m kafkalite.bench.latency_floor",
                                     description="The floor under P4's end-to-end latency (module docstring).")
    parser.add_argument("--records", type=int, default=100_000, help="records to send (default 100000)")
    parser.add_argument("--rate", type=float, default=10_000.0, help="records/s (default 10000)")
    parser.add_argument("--record-size", type=int, default=100, help="bytes per value (default 100)")
    arguments = parser.parse_args(argv)
    if arguments.records < 1 or arguments.rate <= 0 or arguments.record_size < HEADER.size:
        parser.error(f"--records must be >= 1, --rate > 0 and --record-size >= {HEADER.size}")
    latencies, sent_rate = measure(arguments.records, arguments.rate, arguments.record_size)
    ordered = sorted(latencies) or [float("nan")]
    average = sum(ordered) / len(ordered)
    print(f"latency floor: p50 {percentile(ordered, 0.5):.3f} ms, p99 {percentile(ordered, 0.99):.3f} ms, "
          f"p99.9 {percentile(ordered, 0.999):.3f} ms, avg {average:.3f} ms "
          f"({len(latencies)} records at {sent_rate:.0f} records/s sent)", flush=True)
    if len(latencies) < arguments.records:
        print(f"Error: {arguments.records - len(latencies)} of {arguments.records} records did not arrive within "
              f"{DRAIN_TIMEOUT_SECONDS:.0f} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
