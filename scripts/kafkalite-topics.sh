#!/usr/bin/env bash
# kafkalite-topics.sh: see --help (Kafka's kafka-topics.sh flags).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.topics "$@"
