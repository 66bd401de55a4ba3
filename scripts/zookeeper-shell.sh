#!/usr/bin/env bash
# zookeeper-shell.sh HOST:PORT[/CHROOT] [ls|get|stat PATH]: see --help (Kafka's zookeeper-shell.sh).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.zookeeper_shell "$@"
