#!/usr/bin/env bash
# kafkalite-broker-api-versions.sh: see --help (Kafka's kafka-broker-api-versions.sh flags).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.broker_api_versions "$@"
