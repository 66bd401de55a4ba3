#!/usr/bin/env bash
# Runs one kafkalite broker (python -m kafkalite.broker) from a server.properties file, like
# Kafka's bin/kafka-server-start.sh: in the foreground by default, in the background with
# -daemon.
#
# Owns, for -daemon only, two files named after the broker id, kept next to the broker's
# first log directory (in its parent directory) or in $KAFKALITE_LOG_DIR when that is set:
# kafkalite-server-<id>.log (the broker's output) and kafkalite-server-<id>.pid.
# Every broker it starts carries a marker in its environment by which
# scripts/kafkalite-server-stop.sh recognises the brokers of this repository.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

START_TIMEOUT_SECONDS="${KAFKALITE_START_TIMEOUT:-60}"
STARTED_BY="kafkalite-server-start.sh:$(cd "$KAFKALITE_HOME" && pwd -P)"

usage() {
    cat <<'EOF'
Usage: kafkalite-server-start.sh [-daemon] SERVER_PROPERTIES [--override KEY=VALUE]...

Run a kafkalite broker from SERVER_PROPERTIES (e.g. config/server.properties); each
--override replaces one property of the file. In the foreground by default: logs on the
terminal, Ctrl-C (or SIGTERM) shuts the broker down gracefully.

With -daemon the broker runs in the background and the script waits until it has started
(registered in ZooKeeper and serving on its listener), up to $KAFKALITE_START_TIMEOUT
seconds (default 60). Its output goes to kafkalite-server-<broker.id>.log and its pid to
kafkalite-server-<broker.id>.pid, both in the parent directory of the first log.dirs entry
(or in $KAFKALITE_LOG_DIR when set).

Options:
  -daemon, --daemon        run in the background
  --override KEY=VALUE     override a property (repeatable)
  -h, --help               show this help

Exit status: 0 started (-daemon: or already running), 1 the broker could not start,
2 bad arguments or configuration.
Stop brokers with scripts/kafkalite-server-stop.sh.
EOF
}

usage_error() {
    echo "Error: $*" >&2
    usage >&2
    exit 2
}

fail() {
    echo "Error: $*" >&2
    exit 1
}

alive() {
    local stat rest
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    rest="${stat##*) }"
    [[ "${rest%% *}" != "Z" ]]
}

# runs_config PID CONFIG: the process is a kafkalite broker started with CONFIG.
runs_config() {
    local arguments
    arguments="$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null)" || return 1
    grep -qxF -- kafkalite.broker <<<"$arguments" && grep -qxF -- "$2" <<<"$arguments"
}

daemon=false
config=""
overrides=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -daemon|--daemon) daemon=true; shift ;;
        --override)
            [[ $# -ge 2 ]] || usage_error "--override needs KEY=VALUE"
            [[ "$2" == ?*=* ]] || usage_error "--override expects KEY=VALUE, got '$2'"
            overrides+=(--override "$2"); shift 2 ;;
        --override=*)
            [[ "${1#--override=}" == ?*=* ]] || usage_error "--override expects KEY=VALUE, got '${1#--override=}'"
            overrides+=(--override "${1#--override=}"); shift ;;
        -*) usage_error "unknown option '$1'" ;;
        *)
            [[ -z "$config" ]] || usage_error "unexpected argument '$1' (one properties file only)"
            config="$1"; shift ;;
    esac
done
[[ -n "$config" ]] || usage_error "missing SERVER_PROPERTIES"
[[ "$START_TIMEOUT_SECONDS" =~ ^[0-9]+$ ]] \
    || usage_error "KAFKALITE_START_TIMEOUT must be a number of seconds, got '$START_TIMEOUT_SECONDS'"
[[ -f "$config" && -r "$config" ]] || usage_error "cannot read properties file '$config'"
# An absolute path in the command line lets kafkalite-server-stop.sh --config find the broker.
config="$(cd -- "$(dirname -- "$config")" && pwd -P)/$(basename -- "$config")"
export KAFKALITE_STARTED_BY="$STARTED_BY"

if ! $daemon; then
    exec "$PYTHON" -m kafkalite.broker "$config" "${overrides[@]}"
fi

# The settings the daemon needs (validated the way the broker reads them): broker id,
# advertised host and port, first log directory.
facts="$("$PYTHON" - "$config" "${overrides[@]}" <<'PY'
import os
import sys

from kafkalite.config import BrokerConfig, load_properties
from kafkalite.errors import KafkaliteError

try:
    properties = load_properties(sys.argv[1])
    arguments = sys.argv[2:]
    for index in range(1, len(arguments), 2):
        key, _, value = arguments[index].partition("=")
        properties[key.strip()] = value.strip()
    config = BrokerConfig.from_properties(properties)
    host, port = config.advertised_address()
    bind_host, bind_port = config.listener_address()
except KafkaliteError as exc:
    print(f"Error: {exc}", file=sys.stderr)
    sys.exit(2)
print(config.broker_id)
print(host)
print(port)
print(os.path.abspath(config.log_dirs[0]))
print("127.0.0.1" if bind_host in ("0.0.0.0", "::", "") else bind_host)
print(bind_port)
PY
)" || exit $?
{ read -r broker_id; read -r host; read -r port; read -r first_log_dir; read -r bind_host; read -r bind_port; } <<<"$facts"

output_dir="${KAFKALITE_LOG_DIR:-$(dirname -- "$first_log_dir")}"
mkdir -p -- "$output_dir" 2>/dev/null || fail "cannot create directory $output_dir for the broker's log"
log_file="$output_dir/kafkalite-server-$broker_id.log"
pid_file="$output_dir/kafkalite-server-$broker_id.pid"

if [[ -f "$pid_file" ]]; then
    pid="$(tr -dc '0-9' <"$pid_file")"
    if [[ -n "$pid" ]] && alive "$pid" && runs_config "$pid" "$config"; then
        echo "kafkalite broker $broker_id already running (pid $pid, $host:$port, log $log_file)"
        exit 0
    fi
    rm -f -- "$pid_file"
fi
if timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$bind_host" "$bind_port" 2>/dev/null; then
    fail "$bind_host:$bind_port is already in use: broker $broker_id cannot listen there"
fi

: >>"$log_file"
log_offset="$(stat -c %s -- "$log_file")"
setsid "$PYTHON" -m kafkalite.broker "$config" "${overrides[@]}" >>"$log_file" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$pid_file"

# Started = the broker logged "[KafkaliteServer id=N] started" (it is registered in
# ZooKeeper and serves on its listener), which it does at the end of its startup.
deadline=$((SECONDS + START_TIMEOUT_SECONDS))
until tail -c "+$((log_offset + 1))" -- "$log_file" | grep -F "[KafkaliteServer id=$broker_id] started" >/dev/null; do
    if ! alive "$pid"; then
        rm -f -- "$pid_file"
        echo "--- last lines of $log_file ---" >&2
        tail -n 30 -- "$log_file" >&2
        fail "kafkalite broker $broker_id exited during startup (log $log_file)"
    fi
    if (( SECONDS >= deadline )); then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do alive "$pid" || break; sleep 0.2; done
        kill -KILL "$pid" 2>/dev/null || true
        rm -f -- "$pid_file"
        echo "--- last lines of $log_file ---" >&2
        tail -n 30 -- "$log_file" >&2
        fail "kafkalite broker $broker_id did not start within ${START_TIMEOUT_SECONDS}s; stopped it (log $log_file)"
    fi
    sleep 0.2
done
echo "kafkalite broker $broker_id started (pid $pid, $host:$port, log $log_file)"
