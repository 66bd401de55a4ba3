#!/usr/bin/env bash
# kafkalite-transactions.sh: see --help (Kafka's kafka-transactions.sh sub-commands and flags).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.transactions "$@"
