"""Auto-discovery shim: PySpark registers ``DefaultSource`` of any importable ``pyspark_*``
module under its name, so with this package on the Python path ``format("kafkalite")`` works
without calling :func:`kafkalite.spark.register`. Everything lives in :mod:`kafkalite.spark`."""

from kafkalite.spark import KafkaliteDataSource as DefaultSource

__all__ = ["DefaultSource"]
