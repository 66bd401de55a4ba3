#!/usr/bin/env bash
# kafkalite-console-producer.sh: see --help (Kafka's kafka-console-producer.sh flags).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.console_producer "$@"
