"""Which implementation of the record codec's hot loops runs: the compiled extension or Python.

:mod:`kafkalite.record._speedups` (C, built by ``pip install`` when the machine has a compiler and
Python's headers) decodes, validates and encodes the records section of a batch; the
pure-Python twin in :mod:`kafkalite.record.decoder` and :mod:`kafkalite.record.batch` does the
same, record for record and error for error. :data:`EXTENSION` is the loaded extension, or None
when it is missing or when the environment sets ``KAFKALITE_NO_EXTENSIONS=1`` (read once, at
import); every caller then runs the Python code. :data:`IMPLEMENTATION` names the choice for
logs and benchmark output.

Concurrency: decided once at import; the extension's functions are pure.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from kafkalite.errors import CorruptRecordError, InvalidRecordError

__all__ = ["EXTENSION", "IMPLEMENTATION", "extensions_disabled", "load_extension"]


def extensions_disabled() -> bool:
    """Whether ``KAFKALITE_NO_EXTENSIONS`` asks for the pure-Python code."""
    return os.environ.get("KAFKALITE_NO_EXTENSIONS", "").strip().lower() not in ("", "0", "false", "no")


def load_extension(name: str) -> ModuleType | None:
    """The compiled module ``name`` (``kafkalite.record._speedups``, ``kafkalite.client._speedups``),
    or None when it was not built or ``KAFKALITE_NO_EXTENSIONS`` asks for the Python code."""
    if extensions_disabled():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _load() -> ModuleType | None:
    extension = load_extension("kafkalite.record._speedups")
    if extension is not None:
        extension.configure(CorruptRecordError, InvalidRecordError)
    return extension


EXTENSION: ModuleType | None = _load()
IMPLEMENTATION = "compiled" if EXTENSION is not None else "pure-python"
