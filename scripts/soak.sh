#!/usr/bin/env bash
# soak.sh: the long fault runs that the test command keeps short.
#   - the Spark crash test with every kill point hit ROUNDS times (3 unless --rounds is given; the
#     test command runs one round): a copy query's driver is killed (-9) at each point of the source's
#     and the exactly-once sink's protocol, one broker of three dies after the first third of the kills
#     and comes back after the second, and the output must hold each of 30,000 values exactly once.
# Each round takes about 3 minutes on two cores; the test's own timeout grows with the rounds.
# Usage: scripts/soak.sh [--rounds N] [extra pytest arguments]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds=3
arguments=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds)
      [ $# -ge 2 ] || { echo "Error: --rounds needs a number" >&2; exit 2; }
      rounds="$2"; shift 2 ;;
    -h|--help)
      sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) arguments+=("$1"); shift ;;
  esac
done
if ! [[ "$rounds" =~ ^[1-9][0-9]*$ ]]; then
  echo "Error: --rounds $rounds: expected a whole number of rounds, 1 or more" >&2
  exit 2
fi
"$here/scripts/install.sh" --spark
cd "$here"
echo "Spark crash test, $rounds round(s) of a kill at every point"
KAFKALITE_SPARK_FAULT_ROUNDS="$rounds" exec .venv/bin/python -m pytest -s -p no:cacheprovider \
  tests/integration/test_spark_faults.py "${arguments[@]}"
