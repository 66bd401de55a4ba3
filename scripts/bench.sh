#!/usr/bin/env bash
# bench.sh: the benchmark suite (P1-P5), one markdown table of figures against targets.
# Usage: scripts/bench.sh [--quick] [--only P1,P3] [--dir DIR] [--docs PATH | --no-docs]; see --help.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.bench.suite "$@"
