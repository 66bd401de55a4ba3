#!/usr/bin/env bash
# kafkalite-consumer-perf-test.sh: see --help (Kafka's kafka-consumer-perf-test.sh flags and output).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.consumer_perf_test "$@"
