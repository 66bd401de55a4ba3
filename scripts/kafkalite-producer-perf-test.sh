#!/usr/bin/env bash
# kafkalite-producer-perf-test.sh: see --help (Kafka's kafka-producer-perf-test.sh flags and output).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.producer_perf_test "$@"
