#!/usr/bin/env bash
# kafkalite-e2e-latency.sh: see --help (Kafka's kafka-e2e-latency.sh flags and output).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.e2e_latency "$@"
