#!/usr/bin/env bash
# kafkalite-verifiable-consumer.sh: see --help (Kafka's verifiable consumer for system tests; JSON lines on stdout).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.verifiable_consumer "$@"
