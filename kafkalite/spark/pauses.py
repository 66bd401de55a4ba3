"""Test-only pause points of the Spark source and sink (see :func:`pause_for_tests`).

Concurrency: any thread of any process; the pause files are the only shared state.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid

# One logger for the whole data source, as when it was one module: log settings keep working.
log = logging.getLogger("kafkalite.spark")


# --- test-only fault injection -------------------------------------------------------------------


PAUSE_POINT_ENV = "KAFKALITE_SPARK_TEST_PAUSE_AT"
PAUSE_DIRECTORY_ENV = "KAFKALITE_SPARK_TEST_PAUSE_DIR"
PAUSE_POINTS = ("source-planned", "task-started", "mid-write", "task-done", "commit")


def pause_for_tests(point: str) -> None:
    """FOR TESTS ONLY: block forever at the named point of the source's or sink's protocol, so
    a fault test can kill the driver exactly there. Does nothing unless the environment sets
    ``KAFKALITE_SPARK_TEST_PAUSE_AT`` to ``point`` or ``point:N`` and
    ``KAFKALITE_SPARK_TEST_PAUSE_DIR`` to a directory. Every arrival at the point (in any
    driver or worker process of the run) leaves a ``reached-<point>-*`` file there; the N-th
    arrival and every later one (N defaults to 1) writes ``paused-<point>-<pid>`` and blocks
    its thread until the process is killed. The points (:data:`PAUSE_POINTS`):

    * ``source-planned``: the stream reader's ``partitions()``: Spark has logged the
      micro-batch's offsets but not run or committed it;
    * ``task-started``: a write task recorded its attempt as started, nothing written yet;
    * ``mid-write``: a write task had its first Arrow batch of rows acknowledged;
    * ``task-done``: a write task recorded its attempt as done; the batch is not committed;
    * ``commit``: the driver's commit recorded the batch as committed in the sink journal but
      has not cleaned the journal up, and Spark has not recorded the commit.

    Concurrency: any thread of any process; the files are the only shared state.
    """
    wanted = os.environ.get(PAUSE_POINT_ENV, "")
    name, _, count = wanted.partition(":")
    if name != point:
        return
    directory = os.environ.get(PAUSE_DIRECTORY_ENV, "")
    if not directory:
        return
    with open(os.path.join(directory, f"reached-{point}-{uuid.uuid4().hex}"), "w"):
        pass
    reached = sum(1 for entry in os.listdir(directory) if entry.startswith(f"reached-{point}-"))
    if reached < (int(count) if count else 1):
        return
    marker = os.path.join(directory, f"paused-{point}-{os.getpid()}")
    with open(marker + ".tmp", "w") as handle:
        handle.write(f"{point} reached {reached} times\n")
    os.replace(marker + ".tmp", marker)
    log.warning("test pause at %s (%s=%s): blocking until killed", point, PAUSE_POINT_ENV, wanted)
    threading.Event().wait()
