#!/usr/bin/env bash
# kafkalite-leader-election.sh: see --help (Kafka's kafka-leader-election.sh flags).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.leader_election "$@"
