#!/usr/bin/env bash
# The one-command local kafkalite cluster: one ZooKeeper and N brokers (ids 1..N) on
# 127.0.0.1, all kept in one data directory (default: var/cluster in the repository):
#
#   DIR/cluster.properties          the cluster's shape (broker count, base port)
#   DIR/zookeeper/                  zookeeper.properties (generated from config/zookeeper.properties),
#                                   snapshots, zoo.cfg, zookeeper.pid, zookeeper.log
#   DIR/broker-<i>/                 server.properties (generated from config/server.properties),
#                                   data/ (log.dirs), kafkalite-server-<i>.log and .pid
#
# Processes are started with zookeeper-server-start.sh -daemon and kafkalite-server-start.sh
# -daemon and stopped with the matching stop scripts; status and stop find them in /proc by
# the paths under DIR in their command lines, so two clusters with different data
# directories and ports run side by side.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

SCRIPTS="$KAFKALITE_HOME/scripts"
readonly READY_TIMEOUT_SECONDS=60
readonly STOP_TIMEOUT_SECONDS=60
readonly MAX_BROKERS=99
readonly MAIN_CLASS=org.apache.zookeeper.server.quorum.QuorumPeerMain
readonly CHROOT=/kafkalite

usage() {
    cat <<'EOF'
Usage: kafkalite-cluster.sh start|stop|status [--brokers N] [--base-port P] [--data-dir DIR] [--secure]

A local kafkalite cluster on 127.0.0.1: one ZooKeeper and N brokers with ids 1..N.

Commands:
  start    start ZooKeeper and the brokers that are not running, then wait until every
           broker is registered and a controller is elected (60 s at most)
  stop     stop the brokers (SIGTERM: graceful, controlled shutdown; the controller last),
           then ZooKeeper
  status   one line per process: "ROLE ID HOST:PORT PID STATE" (role zookeeper|broker,
           state running|not-ready|stopped, "-" for no id or pid; a broker is not-ready while
           its GET /ready does not answer 200: not registered yet, or its ZooKeeper session
           suspended); exit 1 when any process is down or a broker is not ready

Options:
  --brokers N      number of brokers (default 3; 1..99)
  --base-port P    ZooKeeper on port P, broker i on P+i; without it Kafka's ports:
                   ZooKeeper 2181, brokers 9092, 9093, 9094, ...
  --data-dir DIR   where the cluster keeps everything (default: var/cluster in the
                   repository)
  --secure         (start) a secure cluster: TLS and SASL/SCRAM-SHA-512 on every listener
                   (SASL_SSL, brokers too), the ACL authorizer with the super user "admin";
                   makes a CA and broker certificate under DIR/security and writes
                   DIR/admin.properties (the admin's client settings, for --command-config,
                   kcat -F or confluent-kafka); remembered like the shape
  -h, --help       show this help

The broker count, ports and --secure are remembered in DIR: later commands on DIR need no
options. They can change only while the whole cluster is stopped.
Each broker's server.properties is config/server.properties with the broker's id,
listener, log.dirs and zookeeper.connect, zookeeper.session.timeout.ms=6000 and
default.replication.factor = offsets.topic.replication.factor = min(3, N). Broker 1 also
serves the schema registry on http://127.0.0.1:8081 (P+100 with --base-port); every broker
serves it under http://127.0.0.1:<broker port>/registry.

Exit status: 0 success, 1 a process failed to start or stop (or, for status, is down),
2 bad arguments.
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

say() {
    echo "kafkalite-cluster: $*"
}

alive() {
    local stat rest
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    rest="${stat##*) }"
    [[ "${rest%% *}" != "Z" ]]
}

positive_number() {
    [[ "$1" =~ ^[0-9]+$ ]] && (( 10#$1 >= 1 ))
}

# --- command line -------------------------------------------------------------------------

command=""
brokers_option=""
base_port_option=""
secure_option=""
data_dir="$KAFKALITE_HOME/var/cluster"
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help|help) usage; exit 0 ;;
        start|stop|status)
            [[ -z "$command" ]] || usage_error "give one command, got '$command' and '$1'"
            command="$1"; shift ;;
        --brokers|--base-port|--data-dir)
            [[ $# -ge 2 && -n "$2" && "$2" != --* ]] || usage_error "$1 needs a value"
            set -- "$1=$2" "${@:3}" ;;
        --brokers=*)
            brokers_option="${1#*=}"
            positive_number "$brokers_option" && (( 10#$brokers_option <= MAX_BROKERS )) \
                || usage_error "--brokers must be a number from 1 to $MAX_BROKERS, got '$brokers_option'"
            brokers_option="$((10#$brokers_option))"
            shift ;;
        --base-port=*)
            base_port_option="${1#*=}"
            positive_number "$base_port_option" && (( 10#$base_port_option <= 65535 )) \
                || usage_error "--base-port must be a port number, got '$base_port_option'"
            base_port_option="$((10#$base_port_option))"
            shift ;;
        --secure) secure_option=true; shift ;;
        --data-dir=*)
            data_dir="${1#*=}"
            [[ -n "$data_dir" ]] || usage_error "--data-dir needs a value"
            shift ;;
        *) usage_error "unknown argument '$1'" ;;
    esac
done
[[ -n "$command" ]] || usage_error "missing command: start, stop or status"

# --- cluster shape ------------------------------------------------------------------------

state_value() {
    sed -n "s/^$1=//p" "$data_dir/cluster.properties" 2>/dev/null | tail -n 1
}

# Fills brokers and base_port (empty: Kafka's ports) from the options and the saved shape.
load_shape() {
    local saved_brokers="" saved_base="" saved_secure=""
    have_state=false
    if [[ -f "$data_dir/cluster.properties" ]]; then
        have_state=true
        saved_brokers="$(state_value brokers)"
        saved_base="$(state_value base.port)"
        saved_secure="$(state_value secure)"
    fi
    secure="${secure_option:-${saved_secure:-false}}"
    brokers="${brokers_option:-${saved_brokers:-3}}"
    if [[ -n "$base_port_option" ]]; then
        base_port="$base_port_option"
    elif $have_state; then
        base_port="$saved_base"
    else
        base_port=""
    fi
    shape_changed=false
    if $have_state && [[ "$brokers" != "$saved_brokers" || "$base_port" != "$saved_base" \
                         || "$secure" != "${saved_secure:-false}" ]]; then
        shape_changed=true
    fi
    if [[ -n "$base_port" ]] && (( base_port + brokers > 65535 )); then
        usage_error "--base-port $base_port leaves no room for $brokers brokers below port 65536"
    fi
    saved_shape="--brokers ${saved_brokers:-?}${saved_base:+ --base-port $saved_base}"
    if [[ "$saved_secure" == true ]]; then saved_shape+=" --secure"; fi
}

zookeeper_port() {
    if [[ -n "$base_port" ]]; then echo "$base_port"; else echo 2181; fi
}

broker_port() {
    if [[ -n "$base_port" ]]; then echo $((base_port + $1)); else echo $((9091 + $1)); fi
}

# Broker 1 also serves the schema registry at the root of this port (Confluent's default 8081;
# base port + 100 with --base-port, above every broker port). Every broker serves it under
# /registry on its own port too.
schema_registry_port() {
    if [[ -n "$base_port" ]]; then echo $((base_port + 100)); else echo 8081; fi
}

replication_factor() {
    if (( brokers < 3 )); then echo "$brokers"; else echo 3; fi
}

# --- processes ----------------------------------------------------------------------------

# Finds this cluster's processes in /proc by the paths under DIR in their command lines:
# zookeeper_pid, and broker_pids[i] for every broker directory in use.
declare -A broker_pids
scan_processes() {
    local cmdline_file pid argument previous config broker
    local -a arguments
    zookeeper_pid=""
    broker_pids=()
    for cmdline_file in /proc/[0-9]*/cmdline; do
        pid="${cmdline_file#/proc/}"
        pid="${pid%/cmdline}"
        mapfile -d "" arguments 2>/dev/null <"$cmdline_file" || continue
        previous=""
        for argument in "${arguments[@]}"; do
            if [[ "$previous" == "$MAIN_CLASS" && "$argument" == "$data_dir/zookeeper/zoo.cfg" ]]; then
                alive "$pid" && zookeeper_pid="$pid"
                break
            fi
            if [[ "$previous" == kafkalite.broker && "$argument" == "$data_dir"/broker-*/server.properties ]]; then
                config="${argument#"$data_dir"/broker-}"
                broker="${config%/server.properties}"
                if [[ "$broker" =~ ^[0-9]+$ ]] && alive "$pid"; then
                    broker_pids[$broker]="$pid"
                fi
                break
            fi
            previous="$argument"
        done
    done
}

# Prints the status lines; returns 1 when a process is down.
print_status() {
    local broker down=0 pid
    scan_processes
    if [[ -n "$zookeeper_pid" ]]; then
        echo "zookeeper - 127.0.0.1:$(zookeeper_port) $zookeeper_pid running"
    else
        echo "zookeeper - 127.0.0.1:$(zookeeper_port) - stopped"
        down=1
    fi
    for ((broker = 1; broker <= brokers; broker++)); do
        pid="${broker_pids[$broker]:-}"
        if [[ -n "$pid" ]]; then
            if broker_ready "$(broker_port "$broker")"; then
                echo "broker $broker 127.0.0.1:$(broker_port "$broker") $pid running"
            else
                echo "broker $broker 127.0.0.1:$(broker_port "$broker") $pid not-ready"
                down=1
            fi
        else
            echo "broker $broker 127.0.0.1:$(broker_port "$broker") - stopped"
            down=1
        fi
    done
    return "$down"
}

# broker_ready PORT: the broker on 127.0.0.1:PORT answers GET /ready with 200.
broker_ready() {
    "$PYTHON" -c 'import sys; from kafkalite.local.secure import get_json; get_json(sys.argv[2], int(sys.argv[1]), "/ready", 3)' \
        "$1" "$(secure_dir)" >/dev/null 2>&1
}

# secure_dir: the data directory when the cluster is secure (the probes then go over TLS as
# the admin), else nothing.
secure_dir() {
    if [[ "$secure" == true ]]; then echo "$data_dir"; fi
}

# port_in_use PORT: something accepts connections on 127.0.0.1:PORT.
port_in_use() {
    timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null
}

# generate TEMPLATE OUTPUT KEY=VALUE...: TEMPLATE with each KEY's line replaced (or appended).
generate() {
    "$PYTHON" - "$@" <<'PY'
import os
import re
import sys

template, output, *pairs = sys.argv[1:]
overrides = dict(pair.split("=", 1) for pair in pairs)
written = set()
lines = [f"# Generated by scripts/kafkalite-cluster.sh from {template}\n",
         "# at every start of a stopped process: edit the template (or the script) instead.\n"]
with open(template, encoding="utf-8") as handle:
    for line in handle:
        match = re.match(r"\s*([^#!\s][^=:\s]*)\s*[=:]", line)
        if match and match.group(1) in overrides:
            key = match.group(1)
            if key not in written:
                lines.append(f"{key}={overrides[key]}\n")
                written.add(key)
            continue
        lines.append(line if line.endswith("\n") else line + "\n")
missing = [key for key in overrides if key not in written]
if missing:
    lines.append("\n# Set by kafkalite-cluster.sh\n")
    lines.extend(f"{key}={overrides[key]}\n" for key in missing)
with open(output + ".tmp", "w", encoding="utf-8") as handle:
    handle.writelines(lines)
os.replace(output + ".tmp", output)
PY
}

zookeeper_properties() {
    echo "$data_dir/zookeeper/zookeeper.properties"
}

broker_properties() {
    echo "$data_dir/broker-$1/server.properties"
}

broker_log() {
    echo "$data_dir/broker-$1/kafkalite-server-$1.log"
}

write_zookeeper_properties() {
    mkdir -p -- "$data_dir/zookeeper"
    generate "$KAFKALITE_HOME/config/zookeeper.properties" "$(zookeeper_properties)" \
        "dataDir=$data_dir/zookeeper" "clientPort=$(zookeeper_port)" "clientPortAddress=127.0.0.1"
}

write_broker_properties() {
    local broker="$1" port registry=() scheme=PLAINTEXT line
    port="$(broker_port "$broker")"
    if [[ "$secure" == true ]]; then
        # every listener is SASL_SSL: no plaintext schema-registry port (it stays under /registry)
        scheme=SASL_SSL
        while IFS= read -r line; do
            [[ -z "$line" || "$line" == \#* ]] || registry+=("$line")
        done <"$data_dir/security/server.properties"
    elif (( broker == 1 )); then
        registry=("schema.registry.listeners=http://127.0.0.1:$(schema_registry_port)")
    fi
    mkdir -p -- "$data_dir/broker-$broker"
    generate "$KAFKALITE_HOME/config/server.properties" "$(broker_properties "$broker")" \
        "broker.id=$broker" \
        "listeners=$scheme://127.0.0.1:$port" \
        "advertised.listeners=$scheme://127.0.0.1:$port" \
        "log.dirs=$data_dir/broker-$broker/data" \
        "zookeeper.connect=127.0.0.1:$(zookeeper_port)$CHROOT" \
        "zookeeper.session.timeout.ms=6000" \
        "default.replication.factor=$(replication_factor)" \
        "offsets.topic.replication.factor=$(replication_factor)" \
        "${registry[@]}"
}

show_log_tail() {
    if [[ -s "$1" ]]; then
        echo "--- last lines of $1 ---" >&2
        tail -n 20 -- "$1" >&2
    fi
}

# wait_registered: every broker's describe_cluster lists brokers 1..N and an elected
# controller. Prints the controller id; on timeout prints what is missing (stderr) and the
# ids of the brokers to blame (stdout, "suspects: ...") and returns 1.
wait_registered() {
    local -a ports=()
    local broker
    for ((broker = 1; broker <= brokers; broker++)); do
        ports+=("$(broker_port "$broker")")
    done
    "$PYTHON" - "$READY_TIMEOUT_SECONDS" "$(secure_dir)" "${ports[@]}" <<'PY'
import sys
import time

from kafkalite.local.secure import get_json

timeout = float(sys.argv[1])
secure_dir = sys.argv[2]
ports = [int(port) for port in sys.argv[3:]]
wanted = set(range(1, len(ports) + 1))
deadline = time.monotonic() + timeout
while True:
    views = {}
    for broker, port in enumerate(ports, start=1):
        try:
            views[broker] = get_json(secure_dir, port, "/v1/admin/describe_cluster", 2)
        except (OSError, ValueError):
            views[broker] = None
    complete = [view for view in views.values()
                if view and wanted <= {item.get("id") for item in view.get("brokers", [])}
                and view.get("controller_id") in wanted]
    if len(complete) == len(ports):
        print(f"controller: {complete[0]['controller_id']}")
        sys.exit(0)
    if time.monotonic() >= deadline:
        break
    time.sleep(0.2)
registered = set()
suspects = set()
for broker, view in views.items():
    if view is None:
        print(f"broker {broker} (127.0.0.1:{ports[broker - 1]}) does not answer", file=sys.stderr)
        suspects.add(broker)
        continue
    seen = {item.get("id") for item in view.get("brokers", [])}
    registered |= seen
    print(f"broker {broker} sees brokers {sorted(seen)} and controller {view.get('controller_id')}",
          file=sys.stderr)
suspects |= wanted - registered
if not suspects:
    suspects = wanted
print("suspects: " + " ".join(str(broker) for broker in sorted(suspects)))
sys.exit(1)
PY
}

# terminate PID WHAT: SIGTERM, wait, SIGKILL after STOP_TIMEOUT_SECONDS (for processes the
# stop scripts did not recognise).
terminate() {
    local pid="$1" deadline=$((SECONDS + STOP_TIMEOUT_SECONDS))
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    while alive "$pid" && (( SECONDS < deadline )); do sleep 0.2; done
    if alive "$pid"; then
        echo "$2 (pid $pid) did not stop within ${STOP_TIMEOUT_SECONDS}s; sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        while alive "$pid"; do sleep 0.1; done
        return 1
    fi
}

lock() {
    exec 9>>"$data_dir/cluster.lock"
    flock -n 9 || fail "another kafkalite-cluster.sh start or stop is working on $data_dir"
}

# --- commands -----------------------------------------------------------------------------

command_start() {
    local broker failed=() outputs=() launcher_pids=() index controller result template
    for template in "$KAFKALITE_HOME/config/zookeeper.properties" "$KAFKALITE_HOME/config/server.properties"; do
        [[ -r "$template" ]] || fail "template $template is missing"
    done
    mkdir -p -- "$data_dir" 2>/dev/null || fail "cannot create data directory $data_dir"
    data_dir="$(cd -- "$data_dir" && pwd -P)"
    lock
    load_shape
    scan_processes
    if $shape_changed && { [[ -n "$zookeeper_pid" ]] || (( ${#broker_pids[@]} > 0 )); }; then
        echo "Error: the cluster in $data_dir runs with $saved_shape; stop it before changing" \
             "--brokers or --base-port" >&2
        exit 2
    fi
    # Refuse before starting anything when a port this cluster needs is taken by another process.
    if [[ -z "$zookeeper_pid" ]] && port_in_use "$(zookeeper_port)"; then
        fail "port $(zookeeper_port) (ZooKeeper) is already in use by another process; choose other ports with --base-port"
    fi
    for ((broker = 1; broker <= brokers; broker++)); do
        if [[ -z "${broker_pids[$broker]:-}" ]] && port_in_use "$(broker_port "$broker")"; then
            fail "port $(broker_port "$broker") (broker $broker) is already in use by another process; choose other ports with --base-port"
        fi
    done
    printf '# kafkalite-cluster.sh: the shape of the cluster in this directory.\nbrokers=%s\nbase.port=%s\nsecure=%s\n' \
        "$brokers" "$base_port" "$secure" >"$data_dir/cluster.properties"

    if [[ -n "$zookeeper_pid" ]]; then
        say "ZooKeeper already running (pid $zookeeper_pid, 127.0.0.1:$(zookeeper_port))"
    else
        say "starting ZooKeeper on 127.0.0.1:$(zookeeper_port)"
        write_zookeeper_properties
        "$SCRIPTS/zookeeper-server-start.sh" -daemon "$(zookeeper_properties)" 9>&- \
            || fail "ZooKeeper did not start (see above); nothing else was started"
    fi

    if [[ "$secure" == true ]]; then
        say "preparing security: CA and broker certificate, the admin user's SCRAM credential in ZooKeeper"
        "$PYTHON" -m kafkalite.local.secure prepare --data-dir "$data_dir" \
            --zookeeper "127.0.0.1:$(zookeeper_port)$CHROOT" 9>&- \
            || fail "could not prepare the secure cluster (see above); ZooKeeper keeps running"
    fi

    # Brokers start in parallel; each launcher waits until its broker has started.
    for ((broker = 1; broker <= brokers; broker++)); do
        if [[ -n "${broker_pids[$broker]:-}" ]]; then
            say "broker $broker already running (pid ${broker_pids[$broker]}, 127.0.0.1:$(broker_port "$broker"))"
            continue
        fi
        say "starting broker $broker on 127.0.0.1:$(broker_port "$broker")"
        write_broker_properties "$broker"
        outputs[broker]="$data_dir/broker-$broker/start.out"
        env -u KAFKALITE_LOG_DIR "$SCRIPTS/kafkalite-server-start.sh" -daemon "$(broker_properties "$broker")" \
            >"${outputs[broker]}" 2>&1 9>&- &
        launcher_pids[broker]=$!
    done
    for index in "${!launcher_pids[@]}"; do
        if wait "${launcher_pids[index]}"; then
            sed 's/^/kafkalite-cluster: /' "${outputs[index]}"
        else
            cat "${outputs[index]}" >&2
            failed+=("$index")
        fi
        rm -f -- "${outputs[index]}"
    done
    if (( ${#failed[@]} > 0 )); then
        echo "Error: broker(s) ${failed[*]} failed to start (see above). The processes that did start" \
             "keep running: '$0 status --data-dir $data_dir' shows them, '$0 stop --data-dir $data_dir' stops them." >&2
        exit 1
    fi

    say "waiting until all $brokers brokers are registered and a controller is elected"
    if ! result="$(wait_registered)"; then
        for broker in ${result#suspects: }; do
            show_log_tail "$(broker_log "$broker")"
        done
        fail "the cluster in $data_dir did not come up within ${READY_TIMEOUT_SECONDS}s (brokers ${result#suspects: }; details above)"
    fi
    controller="${result#controller: }"
    print_status || true
    local bootstrap=""
    for ((broker = 1; broker <= brokers; broker++)); do
        bootstrap+="${bootstrap:+,}127.0.0.1:$(broker_port "$broker")"
    done
    say "cluster ready: $brokers broker(s), controller $controller, ZooKeeper 127.0.0.1:$(zookeeper_port)$CHROOT"
    say "bootstrap servers: $bootstrap"
    if [[ "$secure" == true ]]; then
        say "secure: SASL_SSL with SCRAM-SHA-512 and ACLs; the super user's client settings are in $data_dir/admin.properties"
        say "  kafkalite tools:  scripts/kafkalite-topics.sh --bootstrap-server $bootstrap --command-config $data_dir/admin.properties --list"
        say "  kcat:             kcat -b $bootstrap -F $data_dir/admin.properties -L"
        say "  confluent-kafka:  the keys of admin.properties as the client's configuration"
        say "  other users:      scripts/kafkalite-configs.sh --bootstrap-server $bootstrap --command-config $data_dir/admin.properties --alter --entity-type users --entity-name alice --add-config 'SCRAM-SHA-512=[password=alice-secret]'"
        say "  their rights:     scripts/kafkalite-acls.sh --bootstrap-server $bootstrap --command-config $data_dir/admin.properties --add --allow-principal User:alice --operation Read --topic orders"
    fi
}

command_stop() {
    local broker controller="" status=0 order=() pid answer
    if [[ ! -d "$data_dir" ]]; then
        say "no cluster in $data_dir; nothing to stop"
        return 0
    fi
    data_dir="$(cd -- "$data_dir" && pwd -P)"
    lock
    load_shape
    if $shape_changed && [[ -n "$brokers_option$base_port_option" ]]; then
        echo "Error: the cluster in $data_dir has $saved_shape; stop it without --brokers/--base-port" >&2
        exit 2
    fi
    scan_processes
    # The controller stops last, so that leadership moves only once.
    if (( ${#broker_pids[@]} > 0 )); then
        for broker in "${!broker_pids[@]}"; do
            answer="$("$PYTHON" - "$(broker_port "$broker")" "$(secure_dir)" <<'PY' 2>/dev/null || true
import sys

from kafkalite.local.secure import get_json

print(get_json(sys.argv[2], int(sys.argv[1]), "/v1/admin/describe_cluster", 3)["controller_id"])
PY
)"
            if [[ "$answer" =~ ^[0-9]+$ ]]; then
                controller="$answer"
                break
            fi
        done
    fi
    for broker in $(printf '%s\n' "${!broker_pids[@]}" | sort -n); do
        [[ "$broker" == "$controller" ]] || order+=("$broker")
    done
    if [[ -n "$controller" && -n "${broker_pids[$controller]:-}" ]]; then
        order+=("$controller")
    fi
    for broker in "${order[@]}"; do
        pid="${broker_pids[$broker]}"
        say "stopping broker $broker (pid $pid)"
        "$SCRIPTS/kafkalite-server-stop.sh" --config "$(broker_properties "$broker")" >/dev/null || status=1
        if alive "$pid"; then
            terminate "$pid" "broker $broker" || status=1
        fi
    done
    scan_processes
    if [[ -n "$zookeeper_pid" ]]; then
        say "stopping ZooKeeper (pid $zookeeper_pid)"
        "$SCRIPTS/zookeeper-server-stop.sh" "$(zookeeper_properties)" >/dev/null || status=1
        if alive "$zookeeper_pid"; then
            terminate "$zookeeper_pid" "ZooKeeper" || status=1
        fi
    fi
    scan_processes
    if [[ -n "$zookeeper_pid" ]] || (( ${#broker_pids[@]} > 0 )); then
        fail "processes of the cluster in $data_dir are still running: ${zookeeper_pid} ${broker_pids[*]}"
    fi
    if (( status != 0 )); then
        fail "the cluster in $data_dir is stopped, but not every process stopped gracefully (see above)"
    fi
    say "cluster in $data_dir stopped"
}

command_status() {
    if [[ -d "$data_dir" ]]; then
        data_dir="$(cd -- "$data_dir" && pwd -P)"
    fi
    load_shape
    if $shape_changed && [[ -n "$brokers_option$base_port_option" ]]; then
        echo "Error: the cluster in $data_dir has $saved_shape" >&2
        exit 2
    fi
    $have_state || echo "kafkalite-cluster: no cluster in $data_dir" >&2
    print_status
}

case "$command" in
    start) command_start ;;
    stop) command_stop ;;
    status) command_status ;;
esac
