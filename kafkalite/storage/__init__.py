"""One broker's on-disk logs: segments, indexes, recovery, retention and compaction.

Synchronous file I/O only (no asyncio, aiohttp or kazoo): the broker runs the blocking parts
on worker threads. Layers, bottom up: ``files`` (naming) → ``index`` → ``segment`` →
``log`` (one partition) → ``cleaner`` (compaction pass) → ``manager`` (every partition).
"""

from kafkalite.storage.log import AppendInfo, FetchData, PartitionLog
from kafkalite.storage.manager import LogManager

__all__ = ["AppendInfo", "FetchData", "LogManager", "PartitionLog"]
