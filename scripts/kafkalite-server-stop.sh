#!/usr/bin/env bash
# Stops kafkalite brokers started by scripts/kafkalite-server-start.sh from this repository,
# like Kafka's bin/kafka-server-stop.sh: SIGTERM (the broker then shuts down gracefully,
# controlled shutdown first), wait up to 60 s, SIGKILL only after that.
#
# Brokers are found in /proc by the marker kafkalite-server-start.sh puts in their
# environment; brokers started any other way (tests, a plain python -m kafkalite.broker) are
# left alone. Removes the -daemon pid file of each broker it stops.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

readonly STOP_TIMEOUT_SECONDS=60
STARTED_BY="kafkalite-server-start.sh:$(cd "$KAFKALITE_HOME" && pwd -P)"

usage() {
    cat <<'EOF'
Usage: kafkalite-server-stop.sh [--config SERVER_PROPERTIES | --broker-id N]

Stop the kafkalite brokers that kafkalite-server-start.sh of this repository started:
  --config FILE    only the broker(s) started with this properties file
  --broker-id N    only the broker with this broker.id
  (neither)        all of them
Each broker gets SIGTERM and shuts down gracefully (controlled shutdown); a broker still
running after 60 s gets SIGKILL.

Options:
  -h, --help       show this help

Exit status: 0 stopped (or nothing to stop), 1 a broker had to be killed, 2 bad arguments.
EOF
}

usage_error() {
    echo "Error: $*" >&2
    usage >&2
    exit 2
}

alive() {
    local stat rest
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    rest="${stat##*) }"
    [[ "${rest%% *}" != "Z" ]]
}

select_config=""
select_id=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --config)
            [[ $# -ge 2 && -n "$2" ]] || usage_error "--config needs a file"
            [[ -z "$select_config" && -z "$select_id" ]] || usage_error "give at most one of --config and --broker-id"
            [[ -f "$2" ]] || usage_error "no such file '$2'"
            select_config="$(cd -- "$(dirname -- "$2")" && pwd -P)/$(basename -- "$2")"
            shift 2 ;;
        --broker-id)
            [[ $# -ge 2 ]] || usage_error "--broker-id needs a number"
            [[ "$2" =~ ^[0-9]+$ ]] || usage_error "--broker-id must be a number, got '$2'"
            [[ -z "$select_config" && -z "$select_id" ]] || usage_error "give at most one of --config and --broker-id"
            select_id="$((10#$2))"
            shift 2 ;;
        *) usage_error "unknown argument '$1'" ;;
    esac
done

# One line per broker of this repository: pid, broker id, properties file, -daemon pid file.
brokers="$("$PYTHON" - "$STARTED_BY" <<'PY'
import os
import sys

from kafkalite.config import load_properties
from kafkalite.errors import KafkaliteError

marker = f"KAFKALITE_STARTED_BY={sys.argv[1]}".encode()
for entry in os.listdir("/proc"):
    if not entry.isdigit():
        continue
    try:
        with open(f"/proc/{entry}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
        with open(f"/proc/{entry}/environ", "rb") as handle:
            environment = handle.read().split(b"\0")
        cwd = os.readlink(f"/proc/{entry}/cwd")
    except OSError:
        continue
    if marker not in environment:
        continue
    arguments = [part.decode(errors="replace") for part in argv]
    try:
        start = arguments.index("kafkalite.broker")
    except ValueError:
        continue
    if start < 1 or arguments[start - 1] != "-m" or len(arguments) <= start + 1:
        continue
    config = os.path.join(cwd, arguments[start + 1])
    overrides = {}
    rest = arguments[start + 2:]
    for index, argument in enumerate(rest):
        if argument == "--override" and index + 1 < len(rest):
            key, _, value = rest[index + 1].partition("=")
            overrides[key.strip()] = value.strip()
        elif argument.startswith("--override="):
            key, _, value = argument[len("--override="):].partition("=")
            overrides[key.strip()] = value.strip()
    try:
        properties = load_properties(config)
    except KafkaliteError:
        properties = {}
    properties.update(overrides)
    broker_id = properties.get("broker.id", "?").strip() or "?"
    log_dirs = properties.get("log.dirs") or properties.get("log.dir") or "/tmp/kafkalite-logs"
    first_log_dir = os.path.join(cwd, log_dirs.split(",")[0].strip())
    pid_environment = dict(item.split(b"=", 1) for item in environment if b"=" in item)
    output_dir = pid_environment.get(b"KAFKALITE_LOG_DIR", b"").decode() or os.path.dirname(first_log_dir)
    pid_file = os.path.join(cwd, output_dir, f"kafkalite-server-{broker_id}.pid")
    print(f"{entry}\t{broker_id}\t{config}\t{pid_file}")
PY
)"

pids=()
ids=()
pid_files=()
while IFS=$'\t' read -r pid broker_id broker_config pid_file; do
    [[ -n "$pid" ]] || continue
    if [[ -n "$select_config" && "$broker_config" != "$select_config" ]]; then continue; fi
    if [[ -n "$select_id" && "$broker_id" != "$select_id" ]]; then continue; fi
    pids+=("$pid"); ids+=("$broker_id"); pid_files+=("$pid_file")
done <<<"$brokers"

if (( ${#pids[@]} == 0 )); then
    what="kafkalite broker"
    [[ -z "$select_config" ]] || what+=" started with $select_config"
    [[ -z "$select_id" ]] || what+=" with broker.id $select_id"
    echo "No $what to stop"
    exit 0
fi

for index in "${!pids[@]}"; do
    echo "Stopping kafkalite broker ${ids[index]} (pid ${pids[index]})"
    kill -CONT "${pids[index]}" 2>/dev/null || true
    kill -TERM "${pids[index]}" 2>/dev/null || true
done

status=0
deadline=$((SECONDS + STOP_TIMEOUT_SECONDS))
for index in "${!pids[@]}"; do
    pid="${pids[index]}"
    while alive "$pid" && (( SECONDS < deadline )); do
        sleep 0.2
    done
    if alive "$pid"; then
        echo "kafkalite broker ${ids[index]} (pid $pid) did not shut down within ${STOP_TIMEOUT_SECONDS}s; sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        while alive "$pid"; do sleep 0.1; done
        status=1
    fi
    if [[ -f "${pid_files[index]}" && "$(tr -dc '0-9' <"${pid_files[index]}")" == "$pid" ]]; then
        rm -f -- "${pid_files[index]}"
    fi
    echo "Stopped kafkalite broker ${ids[index]} (pid $pid)"
done
exit "$status"
