#!/usr/bin/env bash
# kafkalite-acls.sh: see --help (Kafka's kafka-acls.sh flags: --add/--remove/--list, principals, resources).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.acls "$@"
