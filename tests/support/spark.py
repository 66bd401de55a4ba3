"""One shared local[2] SparkSession for the whole test run.

:func:`shared_spark_session` starts the session on first use (a JVM of about half a GiB that
takes 10–30 s to start, so every Spark test shares it) and registers the ``kafkalite`` data
source; the session-scoped ``spark`` fixture hands it out and stops it when the test run ends.
Python workers run this interpreter (PYSPARK_PYTHON) with the repository on PYTHONPATH, so
they import this checkout's ``kafkalite`` and the ``pyspark_kafkalite`` shim.

Concurrency: the session lives in the test process; tests use it one at a time.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
_SESSION: Any = None


def _prepare_environment() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [str(ROOT)] + [item for item in os.environ.get("PYTHONPATH", "").split(os.pathsep) if item]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


def shared_spark_session() -> Any:
    """The test run's SparkSession, started on first call."""
    global _SESSION
    if _SESSION is None:
        _prepare_environment()
        from pyspark.sql import SparkSession

        from kafkalite.spark import register

        session = (SparkSession.builder.master("local[2]").appName("kafkalite-tests")
                   .config("spark.ui.enabled", "false")
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.memory", "1g")
                   .config("spark.sql.shuffle.partitions", "2")
                   .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
                   .config("spark.sql.adaptive.enabled", "false")
                   .getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
        register(session)
        _SESSION = session
    return _SESSION


def stop_shared_spark_session() -> None:
    global _SESSION
    if _SESSION is not None:
        for query in _SESSION.streams.active:
            query.stop()
        _SESSION.stop()
        _SESSION = None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The shared SparkSession (started lazily, stopped at the end of the test run)."""
    try:
        yield shared_spark_session()
    finally:
        stop_shared_spark_session()
