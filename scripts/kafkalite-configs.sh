#!/usr/bin/env bash
# kafkalite-configs.sh: see --help (Kafka's kafka-configs.sh flags).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.configs "$@"
