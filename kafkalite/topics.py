"""Rules every layer shares about topics: legal names and which partition a key belongs to.

This module sits at the bottom of the package (it imports :mod:`kafkalite.errors` only), so the
broker, the clients, the coordination layer and storage all apply one set of rules with one set
of messages:

* **Topic names** (Kafka's rules): 1 to :data:`MAX_TOPIC_NAME_LENGTH` characters, each an ASCII
  letter, a digit, ``.``, ``_`` or ``-``; and neither ``.`` nor ``..``. :func:`topic_name_problem`
  says what is wrong with a name (or ``None``); :func:`validate_topic_name` raises
  :class:`~kafkalite.errors.InvalidTopicError` (``INVALID_TOPIC_EXCEPTION``) with that message.
  Callers that must raise another error (storage raises ``StorageError``) use the problem text.
  :func:`has_legal_characters` is the character rule alone, for parsing names found on disk.
* **Key placement**: :func:`murmur2` is Kafka's hash (the Java client's variant, signed 32-bit
  result), :func:`to_positive` is Kafka's ``Utils.toPositive`` and :func:`partition_for_key`
  combines them the way Kafka's default partitioner places a keyed record:
  ``to_positive(murmur2(key)) % partition_count``.

Concurrency: pure functions and constants, safe from any thread.
"""

from __future__ import annotations

import re
import struct

from kafkalite.errors import InvalidTopicError

__all__ = [
    "LEGAL_TOPIC_CHARACTERS",
    "MAX_TOPIC_NAME_LENGTH",
    "has_legal_characters",
    "murmur2",
    "partition_for_key",
    "to_positive",
    "topic_name_problem",
    "validate_topic_name",
]

# --- topic names ------------------------------------------------------------------------------

#: Longest legal topic name (Kafka's limit: a partition directory ``<topic>-<partition>`` must
#: still fit in a 255-byte file name).
MAX_TOPIC_NAME_LENGTH = 249
#: The legal characters, spelled out for error messages.
LEGAL_TOPIC_CHARACTERS = "ASCII letters, digits, '.', '_' and '-'"

_LEGAL_CHARACTERS = re.compile(r"[A-Za-z0-9._-]+")  # used with fullmatch: `$` would admit a final newline


def has_legal_characters(name: str) -> bool:
    """True when ``name`` is non-empty and made only of legal topic-name characters.

    Length and the ``.``/``..`` rule are not checked: this is the test for parsing names that
    already exist (partition directories); new names go through :func:`topic_name_problem`.
    """
    return _LEGAL_CHARACTERS.fullmatch(name) is not None


def topic_name_problem(topic: object) -> str | None:
    """Why ``topic`` is not a legal Kafka topic name, or None when it is."""
    if not isinstance(topic, str):
        return f"topic name must be a string, not {type(topic).__name__}"
    if not topic:
        return "topic name is empty"
    if topic in (".", ".."):
        return f"topic name cannot be {topic!r}"
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        return f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters"
    if not has_legal_characters(topic):
        return f"topic name {topic!r} has characters other than {LEGAL_TOPIC_CHARACTERS}"
    return None


def validate_topic_name(topic: str) -> str:
    """Return ``topic`` if it is a legal topic name, else raise InvalidTopicError saying why."""
    problem = topic_name_problem(topic)
    if problem is not None:
        raise InvalidTopicError(problem)
    return topic


# --- key placement ----------------------------------------------------------------------------

_MASK_32 = 0xFFFFFFFF
_SEED = 0x9747B28C
_MULTIPLIER = 0x5BD1E995
_SHIFT = 24
_WORDS = struct.Struct("<I")


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's murmur2 hash of ``data`` as a signed 32-bit integer (Java ``int`` semantics).

    Full 4-byte words are read little-endian; the tail (1–3 bytes) is mixed in and
    multiplied only when present; all arithmetic is modulo 2**32 and the shifts are logical.
    """
    raw = bytes(data)
    length = len(raw)
    hash_value = (_SEED ^ length) & _MASK_32
    whole = length & ~3
    for (word,) in _WORDS.iter_unpack(raw[:whole]):
        word = (word * _MULTIPLIER) & _MASK_32
        word ^= word >> _SHIFT
        word = (word * _MULTIPLIER) & _MASK_32
        hash_value = ((hash_value * _MULTIPLIER) & _MASK_32) ^ word
    tail = length & 3
    if tail:
        if tail == 3:
            hash_value ^= raw[whole + 2] << 16
        if tail >= 2:
            hash_value ^= raw[whole + 1] << 8
        hash_value ^= raw[whole]
        hash_value = (hash_value * _MULTIPLIER) & _MASK_32
    hash_value ^= hash_value >> 13
    hash_value = (hash_value * _MULTIPLIER) & _MASK_32
    hash_value ^= hash_value >> 15
    return hash_value - (1 << 32) if hash_value & 0x80000000 else hash_value


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (``n & 0x7fffffff``), unlike ``abs``."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, partition_count: int) -> int:
    """The partition of a keyed record among ``partition_count`` partitions (Kafka's default rule).

    ``partition_count`` must be positive; the caller raises its own error for a topic without
    partitions.
    """
    return to_positive(murmur2(key)) % partition_count
