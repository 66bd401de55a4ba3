#!/usr/bin/env bash
# kafkalite-consumer-groups.sh: see --help (Kafka's kafka-consumer-groups.sh flags).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.consumer_groups "$@"
