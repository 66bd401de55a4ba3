#!/usr/bin/env bash
# Stops ZooKeeper servers started by scripts/zookeeper-server-start.sh from this repository,
# like Kafka's bin/zookeeper-server-stop.sh. With a properties file: the server of its dataDir
# (pid file dataDir/zookeeper.pid). Without: every server this repository's start script
# launched (found in /proc). The stopping itself (SIGTERM, SIGKILL after 10 s) is
# zk/zookeeper.sh's. Servers started any other way are left alone.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

readonly MAIN_CLASS=org.apache.zookeeper.server.quorum.QuorumPeerMain
STARTED_BY="zookeeper-server-start.sh:$(cd "$KAFKALITE_HOME" && pwd -P)"
LAUNCHER="$KAFKALITE_HOME/zk/zookeeper.sh"

usage() {
    cat <<'EOF'
Usage: zookeeper-server-stop.sh [ZOOKEEPER_PROPERTIES]

Stop the ZooKeeper server started by zookeeper-server-start.sh from ZOOKEEPER_PROPERTIES
(found by the pid file in its dataDir). Without an argument, stop every ZooKeeper server that
zookeeper-server-start.sh of this repository started. SIGTERM first, SIGKILL after 10 s.

Options:
  -h, --help   show this help

Exit status: 0 stopped (or nothing was running), 1 a server could not be stopped, 2 bad
arguments.
EOF
}

usage_error() {
    echo "Error: $*" >&2
    usage >&2
    exit 2
}

property() {
    local value
    value="$(sed -n "s/^[[:space:]]*$2[[:space:]]*[=:][[:space:]]*//p" "$1" | tail -n 1)"
    value="${value%"${value##*[![:space:]]}"}"
    printf '%s' "$value"
}

# started_here PID: the process is a ZooKeeper JVM launched by this repository's start script.
started_here() {
    tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | grep -xF -- "KAFKALITE_STARTED_BY=$STARTED_BY" >/dev/null
}

stop_data_dir() {
    bash "$LAUNCHER" stop --data-dir "$1"
}

config=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -*) usage_error "unknown option '$1'" ;;
        *)
            [[ -z "$config" ]] || usage_error "unexpected argument '$1' (one properties file only)"
            config="$1"; shift ;;
    esac
done

if [[ -n "$config" ]]; then
    [[ -f "$config" && -r "$config" ]] || usage_error "cannot read properties file '$config'"
    data_dir="$(property "$config" dataDir)"
    [[ -n "$data_dir" ]] || usage_error "$config sets no dataDir"
    if [[ ! -d "$data_dir" ]]; then
        echo "No ZooKeeper to stop (no dataDir $data_dir)"
        exit 0
    fi
    stop_data_dir "$(cd -- "$data_dir" && pwd -P)"
    exit
fi

# No properties file: every JVM that runs QuorumPeerMain with a dataDir/zoo.cfg and carries
# this repository's start-script marker.
found=0
status=0
for cmdline_file in /proc/[0-9]*/cmdline; do
    pid="${cmdline_file#/proc/}"
    pid="${pid%/cmdline}"
    [[ "$pid" != "$$" ]] || continue
    arguments="$(tr '\0' '\n' <"$cmdline_file" 2>/dev/null)" || continue
    grep -qxF -- "$MAIN_CLASS" <<<"$arguments" || continue
    started_here "$pid" || continue
    zoo_cfg="$(grep -A1 -xF -- "$MAIN_CLASS" <<<"$arguments" | tail -n 1)"
    [[ "$zoo_cfg" == */zoo.cfg ]] || continue
    found=1
    stop_data_dir "$(dirname -- "$zoo_cfg")" || status=1
done
if (( found == 0 )); then
    echo "No ZooKeeper started from $KAFKALITE_HOME to stop"
fi
exit "$status"
