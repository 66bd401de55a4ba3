#!/usr/bin/env bash
# kafkalite-delete-records.sh: see --help (Kafka's kafka-delete-records.sh flags).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.delete_records "$@"
