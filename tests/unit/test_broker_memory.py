"""The broker's large buffers come from glibc's heap and their memory is kept for the next ones
(instead of each being mapped from the kernel, faulted in page by page, and unmapped when freed),
unless the operator tuned malloc through the environment. Each case runs in a fresh interpreter,
since the setting is process-wide."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys

import pytest

from tests.support.cluster import ROOT

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="a glibc setting")

_PROBE = """
import sys
from kafkalite.broker.__main__ import keep_freed_buffers

def heap() -> int:
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[heap]"):
            start, end = line.split()[0].split("-")
            return int(end, 16) - int(start, 16)
    return 0

applied = keep_freed_buffers() if sys.argv[1] == "keep" else False
before = heap()
data = bytearray(8 << 20)
grown = heap() - before
del data
kept = heap() - before
print(applied, grown >= 4 << 20, kept >= 4 << 20)
"""


def _probe(mode: str, **environment: str) -> str:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("MALLOC_") and key != "GLIBC_TUNABLES"}
    env.update(environment)
    return subprocess.run([sys.executable, "-c", _PROBE, mode], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=True, timeout=60).stdout.split()


def test_a_large_buffer_comes_from_the_heap_and_its_memory_stays_after_it_is_freed() -> None:
    assert _probe("keep") == ["True", "True", "True"]


def test_without_the_setting_a_large_buffer_is_mapped_on_its_own() -> None:
    assert _probe("default") == ["False", "False", "False"]


def test_an_operators_malloc_environment_is_left_as_it_is() -> None:
    assert _probe("keep", MALLOC_MMAP_THRESHOLD_="1048576") == ["False", "False", "False"]
    assert _probe("keep", GLIBC_TUNABLES="glibc.malloc.trim_threshold=1048576")[0] == "False"


def test_the_broker_raises_its_soft_open_files_limit_to_the_hard_limit() -> None:
    from kafkalite.broker.__main__ import OPEN_FILES_WHEN_UNLIMITED, raise_open_files_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_WHEN_UNLIMITED if hard == resource.RLIM_INFINITY else hard
    lowered = min(256, wanted)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        before, after = raise_open_files_limit()
        assert (before, after) == (lowered, wanted) or (before == after == lowered and lowered == wanted)
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (after, hard)
        assert raise_open_files_limit() == (after, after)  # already raised: nothing changes
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
