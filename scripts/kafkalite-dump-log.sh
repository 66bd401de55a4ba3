#!/usr/bin/env bash
# Print the record batches of log segments: kafkalite-dump-log.sh --files 00000000000000000000.log [--print-data-log]
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.dump_log "$@"
