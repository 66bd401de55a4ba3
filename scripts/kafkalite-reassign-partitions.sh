#!/usr/bin/env bash
# kafkalite-reassign-partitions.sh: move replicas between brokers (--generate, --execute, --verify); see --help.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.reassign_partitions "$@"
