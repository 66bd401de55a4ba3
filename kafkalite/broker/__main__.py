"""``python -m kafkalite.broker server.properties [--override key=value ...]``: run one broker.

Runs until SIGTERM or SIGINT, then shuts down gracefully (controlled shutdown first). Exit
codes: 0 after a clean stop, 1 when the broker could not start (the reason is logged), 2 for
bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import logging
import os
import platform
import resource
import signal
import sys

# kio (Kafka's message schemas) imports hypothesis for its own test strategies whenever hypothesis
# is installed (a development or test environment). A broker never uses them, and that import
# is a fifth of a second of every broker start: a broker process goes without it.
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from kafkalite.broker.log_format import configure_logging, use_format  # noqa: E402
from kafkalite.broker.server import Broker, load_config  # noqa: E402
from kafkalite.errors import KafkaliteError  # noqa: E402

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: glibc's mallopt parameters (malloc.h) and the values the broker sets.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 * 1024 * 1024
_TRIM_THRESHOLD = 64 * 1024 * 1024


def keep_freed_buffers() -> bool:
    """On glibc, let the broker reuse the memory of its large buffers instead of mapping it anew.

    A fetch reads megabytes of segment data into a new buffer and (over TLS) encrypts it into
    more; glibc maps each such buffer from the kernel and unmaps it when freed, so every fetch
    paid for page faults and for zeroing fresh pages. Buffers below 32 MiB now come from the
    heap, and up to 64 MiB freed at its top is kept for the next ones. An operator's own
    ``MALLOC_*_`` or ``GLIBC_TUNABLES`` settings are left as they are. True when set."""
    if platform.libc_ver()[0] != "glibc" or "GLIBC_TUNABLES" in os.environ \
            or any(name.startswith("MALLOC_") and name.endswith("_") for name in os.environ):
        return False
    try:
        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) \
            and bool(libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    except (OSError, AttributeError):
        return False


#: The soft open-files limit asked for when the hard limit is unlimited.
OPEN_FILES_WHEN_UNLIMITED = 1_048_576


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard limit (each partition keeps its active
    segment's log, index and time index open, so thousands of partitions need tens of thousands
    of descriptors); returns (before, after). When the limit is reached anyway, an append that
    must roll a segment fails with KAFKA_STORAGE_ERROR naming "Too many open files" and is
    undone, and the log stays online."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_WHEN_UNLIMITED if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            return soft, wanted
        except (ValueError, OSError):
            pass  # e.g. above the kernel's nr_open: keep the soft limit
    return soft, soft


async def _run(broker: Broker) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stop.set)
    try:
        await broker.start()
    except KafkaliteError as exc:
        logging.getLogger("kafkalite.broker").error("broker failed to start: %s", exc)
        await broker.stop()
        return 1
    # What start-up built (modules, configuration, loaded logs) lives as long as the process:
    # keep it out of the collector's full passes, which then cost what the traffic allocates.
    gc.collect()
    gc.freeze()
    await stop.wait()
    await broker.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafkalite-server-start.sh",
                                     description="Start a kafkalite broker from a server.properties file.")
    parser.add_argument("config", help="path to server.properties")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override a property of the file (may be repeated)")
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                        help="logging level (default INFO)")
    arguments = parser.parse_args(argv)
    handler = configure_logging(arguments.log_level)
    try:
        config = load_config(arguments.config, arguments.override)
    except KafkaliteError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    use_format(handler, config.log_format, config.broker_id)
    keep_freed_buffers()
    before, after = raise_open_files_limit()
    logging.getLogger("kafkalite.broker").info(
        "open files limit %d%s (one per log segment, plus connections)", after,
        f", raised from {before}" if after != before else "")
    try:
        broker = Broker(config)  # builds the TLS contexts: ssl.* settings it cannot honour stop it here
    except KafkaliteError as exc:
        logging.getLogger("kafkalite.broker").error("broker failed to start: %s", exc)
        return 2
    try:
        import uvloop
    except ImportError:
        code = asyncio.run(_run(broker))
    else:
        code = uvloop.run(_run(broker))
    # Everything is flushed, fsynced and closed: end without tearing down the objects of
    # thousands of partitions one by one (seconds at 10,000 partitions).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
