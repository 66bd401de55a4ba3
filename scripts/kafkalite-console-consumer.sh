#!/usr/bin/env bash
# kafkalite-console-consumer.sh: see --help (Kafka's kafka-console-consumer.sh flags).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.console_consumer "$@"
