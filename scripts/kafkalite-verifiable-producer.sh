#!/usr/bin/env bash
# kafkalite-verifiable-producer.sh: see --help (Kafka's verifiable producer for system tests; JSON lines on stdout).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.verifiable_producer "$@"
