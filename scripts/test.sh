#!/usr/bin/env bash
# Runs the whole test suite: ruff (lint, rules in pyproject.toml), lint-imports (the import contracts in
# setup.cfg [importlinter]: the layers drawn in the README, no import cycles), mypy --strict (setup.cfg
# [mypy]), then pytest (unit and integration, with real ZooKeeper and broker processes); the first that
# fails stops it.
# Installs what it needs first (scripts/install.sh). Extra arguments go to pytest; without any, the unit
# tests also run once with KAFKALITE_NO_EXTENSIONS=1, so the pure-Python twin of the compiled record codec is
# tested as well as the compiled one (the contract tests compare the two directly in both runs), and both runs
# spread their modules over KAFKALITE_TEST_WORKERS pytest-xdist workers (2 unless set; 1 runs serially):
# a module runs whole on one worker, the longest first (tests/conftest.py), each worker with ports of its own.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$here/scripts/install.sh" --spark
cd "$here"
echo "ruff check kafkalite pyspark_kafkalite tests scripts"
if ! .venv/bin/python -m ruff check --quiet kafkalite pyspark_kafkalite tests scripts; then
  echo "Error: ruff found the problems above; fix them before the tests run" >&2
  exit 1
fi
echo "lint-imports (setup.cfg [importlinter])"
if ! .venv/bin/lint-imports; then
  echo "Error: lint-imports found imports that break the layer contracts above; fix them before the tests run" >&2
  exit 1
fi
echo "mypy --strict kafkalite pyspark_kafkalite"
if ! .venv/bin/python -m mypy; then
  echo "Error: mypy found the type errors above; fix them before the tests run" >&2
  exit 1
fi
# Compile the bytecode once: every broker, tool and Spark worker process the tests start imports
# the package, and where PYTHONDONTWRITEBYTECODE is set each of them would compile it anew.
.venv/bin/python -m compileall -q kafkalite pyspark_kafkalite tests >/dev/null
echo "record codec: $(.venv/bin/python -c 'from kafkalite.record.speedups import IMPLEMENTATION; print(IMPLEMENTATION)')"
echo "TLS records reader: $(.venv/bin/python -c 'from kafkalite.security.tls_stream import records_reader_name; print(records_reader_name())')"
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
workers="${KAFKALITE_TEST_WORKERS:-2}"
if ! [[ "$workers" =~ ^[1-9][0-9]*$ ]]; then
  echo "Error: KAFKALITE_TEST_WORKERS=$workers: expected a whole number of workers, 1 or more" >&2
  exit 2
fi
parallel=()
if [ "$workers" -gt 1 ]; then
  parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
fi
echo "pytest tests/unit with KAFKALITE_NO_EXTENSIONS=1 (the pure-Python record codec), $workers worker(s)"
KAFKALITE_NO_EXTENSIONS=1 .venv/bin/python -m pytest -q --durations=5 "${parallel[@]}" tests/unit
echo "pytest (every test), $workers worker(s)"
exec .venv/bin/python -m pytest "${parallel[@]}"
