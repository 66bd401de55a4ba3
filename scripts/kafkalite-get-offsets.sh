#!/usr/bin/env bash
# kafkalite-get-offsets.sh: see --help (the flags of Kafka's GetOffsetShell / kafka-get-offsets.sh).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.get_offsets "$@"
