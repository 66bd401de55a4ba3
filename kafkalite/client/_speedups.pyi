# Signatures of the compiled extension built from _speedups.c (see kafkalite/client/producer_core.py).
from typing import Any

def configure(record_accumulator: type[Any], producer_batch: type[Any], partition_state: type[Any],
              record_future: type[Any], topic_partition: type[Any], /) -> None: ...

class SendLane:
    def __init__(self, core: Any, /) -> None: ...
    def send(self, topic: str, value: Any, key: Any, headers: Any, partition: int | None,
             timestamp_ms: int | None, /) -> Any: ...

def configure_futures(record_metadata: type[Any], /) -> None: ...

class FutureFields:
    _batch: Any
    _index: int
    timestamp_ms: int
    _key_size: int
    _value_size: int
    _header_size: int
    def __init__(self, batch: Any, index: int, timestamp_ms: int, key_size: int, value_size: int,
                 header_size: int) -> None: ...
    def _metadata(self) -> Any: ...
