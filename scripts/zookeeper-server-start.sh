#!/usr/bin/env bash
# Runs one ZooKeeper server (Debian's package) from a zookeeper.properties file, like Kafka's
# bin/zookeeper-server-start.sh. Installs ZooKeeper through zk/zookeeper.sh when it is missing.
#
# Owns, inside the dataDir of the properties file: zoo.cfg (the properties with absolute
# paths, the file the JVM reads), zookeeper.pid, and with -daemon zookeeper.log. The layout
# is the one zk/zookeeper.sh uses, so `zk/zookeeper.sh status|stop --data-dir DATADIR` works
# on these servers too; scripts/zookeeper-server-stop.sh stops them.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

readonly ZOOKEEPER_JAR=/usr/share/java/zookeeper.jar
readonly SLF4J_JAR=/usr/share/java/slf4j-simple.jar
readonly MAIN_CLASS=org.apache.zookeeper.server.quorum.QuorumPeerMain
readonly START_TIMEOUT_SECONDS=30
# Marks the JVMs this script starts (read back by zookeeper-server-stop.sh from /proc).
STARTED_BY="zookeeper-server-start.sh:$(cd "$KAFKALITE_HOME" && pwd -P)"

usage() {
    cat <<'EOF'
Usage: zookeeper-server-start.sh [-daemon] ZOOKEEPER_PROPERTIES

Run a ZooKeeper server from ZOOKEEPER_PROPERTIES (e.g. config/zookeeper.properties; it needs
dataDir and clientPort). In the foreground by default (Ctrl-C stops it, logs on the
terminal). With -daemon the server runs in the background: the script waits until it
serves, then exits; pid and log are dataDir/zookeeper.pid and dataDir/zookeeper.log.

Options:
  -daemon, --daemon   run in the background
  -h, --help          show this help

Exit status: 0 started (or already running from the same dataDir), 1 the server could not
start, 2 bad arguments or properties.
Stop it with scripts/zookeeper-server-stop.sh ZOOKEEPER_PROPERTIES.
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

# property FILE KEY: the last value of KEY in a properties file (trimmed; empty when absent).
property() {
    local value
    value="$(sed -n "s/^[[:space:]]*$2[[:space:]]*[=:][[:space:]]*//p" "$1" | tail -n 1)"
    value="${value%"${value##*[![:space:]]}"}"
    printf '%s' "$value"
}

# alive PID: the process exists and is not a zombie.
alive() {
    local stat rest
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    rest="${stat##*) }"
    [[ "${rest%% *}" != "Z" ]]
}

# running_pid DIR: the pid in DIR/zookeeper.pid when it is alive and runs DIR/zoo.cfg.
running_pid() {
    local pid
    [[ -f "$1/zookeeper.pid" ]] || return 1
    pid="$(tr -dc '0-9' <"$1/zookeeper.pid")"
    [[ -n "$pid" ]] && alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -F -- "$MAIN_CLASS $1/zoo.cfg" >/dev/null || return 1
    echo "$pid"
}

# four_letter_word HOST PORT WORD: the server's answer (empty when nothing answers).
four_letter_word() {
    timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1; printf "%s" "$2" >&3; cat <&3' \
        "$1" "$2" "$3" 2>/dev/null || true
}

# serving HOST PORT: the server serves clients ("srvr" reports its mode; when srvr is not in
# 4lw.commands.whitelist, "ruok" answering "imok" has to do).
serving() {
    local reply
    reply="$(four_letter_word "$1" "$2" srvr)"
    [[ "$reply" == *"Mode: "* ]] && return 0
    [[ "$reply" == *whitelist* && "$(four_letter_word "$1" "$2" ruok)" == imok ]]
}

# accepts HOST PORT: something listens there.
accepts() {
    timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null
}

log_tail() {
    if [[ -s "$1" ]]; then
        echo "--- last lines of $1 ---" >&2
        tail -n 30 "$1" >&2
    fi
}

daemon=false
config=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -daemon|--daemon) daemon=true; shift ;;
        -*) usage_error "unknown option '$1'" ;;
        *)
            [[ -z "$config" ]] || usage_error "unexpected argument '$1' (one properties file only)"
            config="$1"; shift ;;
    esac
done
[[ -n "$config" ]] || usage_error "missing ZOOKEEPER_PROPERTIES"
[[ -f "$config" && -r "$config" ]] || usage_error "cannot read properties file '$config'"

data_dir="$(property "$config" dataDir)"
client_port="$(property "$config" clientPort)"
client_address="$(property "$config" clientPortAddress)"
data_log_dir="$(property "$config" dataLogDir)"
[[ -n "$data_dir" ]] || usage_error "$config sets no dataDir"
[[ "$client_port" =~ ^[0-9]+$ ]] && (( client_port >= 1 && client_port <= 65535 )) \
    || usage_error "$config: clientPort must be a port number, got '${client_port}'"
case "$client_address" in
    ""|0.0.0.0|"*") probe_host=127.0.0.1 ;;
    *) probe_host="$client_address" ;;
esac

if [[ ! -f "$ZOOKEEPER_JAR" || ! -f "$SLF4J_JAR" ]]; then
    echo "ZooKeeper is not installed; installing it with zk/zookeeper.sh install"
    bash "$KAFKALITE_HOME/zk/zookeeper.sh" install || fail "installing ZooKeeper failed"
fi
command -v java >/dev/null 2>&1 || fail "java not found on PATH (install a Java runtime, e.g. default-jre-headless)"

mkdir -p -- "$data_dir" 2>/dev/null || fail "cannot create dataDir $data_dir"
data_dir="$(cd -- "$data_dir" && pwd -P)"
if [[ -n "$data_log_dir" ]]; then
    mkdir -p -- "$data_log_dir" 2>/dev/null || fail "cannot create dataLogDir $data_log_dir"
    data_log_dir="$(cd -- "$data_log_dir" && pwd -P)"
fi

if pid="$(running_pid "$data_dir")"; then
    if $daemon; then
        echo "ZooKeeper already running (pid $pid, $probe_host:$client_port, dataDir $data_dir)"
        exit 0
    fi
    fail "ZooKeeper already running from $data_dir (pid $pid); stop it with scripts/zookeeper-server-stop.sh $config"
fi
rm -f -- "$data_dir/zookeeper.pid"
if accepts "$probe_host" "$client_port"; then
    fail "port $client_port on $probe_host is already in use (another ZooKeeper?)"
fi

# The JVM reads dataDir/zoo.cfg: the properties with dataDir (and dataLogDir) made absolute.
{
    echo "# Written by scripts/zookeeper-server-start.sh from $(cd -- "$(dirname -- "$config")" && pwd -P)/$(basename -- "$config")."
    echo "# Edit that file instead: this one is rewritten at every start."
    grep -Ev '^[[:space:]]*(dataDir|dataLogDir)[[:space:]]*[=:]' "$config" || true
    echo "dataDir=$data_dir"
    [[ -z "$data_log_dir" ]] || echo "dataLogDir=$data_log_dir"
} >"$data_dir/zoo.cfg.tmp"
mv -f -- "$data_dir/zoo.cfg.tmp" "$data_dir/zoo.cfg"

java_command=(java -Xmx256m -cp "$ZOOKEEPER_JAR:$SLF4J_JAR" "$MAIN_CLASS" "$data_dir/zoo.cfg")
export KAFKALITE_STARTED_BY="$STARTED_BY"

if ! $daemon; then
    # exec keeps this pid: the pid file names the JVM.
    echo "$$" >"$data_dir/zookeeper.pid"
    exec "${java_command[@]}"
fi

log_file="$data_dir/zookeeper.log"
: >>"$log_file"
setsid "${java_command[@]}" >>"$log_file" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$data_dir/zookeeper.pid"

deadline=$((SECONDS + START_TIMEOUT_SECONDS))
until serving "$probe_host" "$client_port"; do
    if ! alive "$pid"; then
        rm -f -- "$data_dir/zookeeper.pid"
        log_tail "$log_file"
        fail "ZooKeeper exited during startup (log $log_file)"
    fi
    if (( SECONDS >= deadline )); then
        kill -TERM "$pid" 2>/dev/null || true
        sleep 2
        kill -KILL "$pid" 2>/dev/null || true
        rm -f -- "$data_dir/zookeeper.pid"
        log_tail "$log_file"
        fail "ZooKeeper did not serve on $probe_host:$client_port within ${START_TIMEOUT_SECONDS}s; stopped it"
    fi
    sleep 0.2
done
echo "ZooKeeper started (pid $pid, $probe_host:$client_port, dataDir $data_dir, log $log_file)"
