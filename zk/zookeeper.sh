#!/usr/bin/env bash
# kafkalite ZooKeeper launcher: installs Debian's ZooKeeper and runs standalone servers or a
# 3-node loopback ensemble in the background, without systemd. Everything a server owns (its
# zoo.cfg, data, pid file and log) lives in the --data-dir given. See --help.
set -euo pipefail

readonly SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The zoo.cfg templates are package data of kafkalite.local, which renders them too.
readonly STANDALONE_TEMPLATE="$SCRIPT_DIR/../kafkalite/local/zoo.cfg.template"
readonly ENSEMBLE_TEMPLATE="$SCRIPT_DIR/../kafkalite/local/zoo-ensemble.cfg.template"
readonly ZOOKEEPER_JAR=/usr/share/java/zookeeper.jar
readonly SLF4J_JAR=/usr/share/java/slf4j-simple.jar
readonly MAIN_CLASS=org.apache.zookeeper.server.quorum.QuorumPeerMain
readonly START_TIMEOUT_SECONDS=30
readonly STOP_TIMEOUT_SECONDS=10
readonly ENSEMBLE_SIZE=3
# Ensemble member N (1-based) of base port B listens for clients on B+N-1, for followers on
# B+20700+N-1 and for leader election on B+21700+N-1: base 2181 gives 22881.. and 23881..
readonly PEER_PORT_OFFSET=20700
readonly ELECTION_PORT_OFFSET=21700

usage() {
    cat <<'EOF'
Usage:
  zk/zookeeper.sh install
      Install Debian's zookeeper and libslf4j-java when /usr/share/java/zookeeper.jar is
      missing (runs apt-get update only if the first install attempt fails).
  zk/zookeeper.sh start  --data-dir DIR [--port 2181] [--tick-time 2000]
      Write DIR/zoo.cfg, start ZooKeeper in the background (pid DIR/zookeeper.pid, log
      DIR/zookeeper.log) and wait until it answers "ruok" with "imok" and serves.
      Already running: says so and exits 0.
  zk/zookeeper.sh stop   --data-dir DIR
      SIGTERM, then SIGKILL after 10 s. Not running: says so and exits 0.
  zk/zookeeper.sh status --data-dir DIR
      Exit 0 when running and serving, 1 when running but not serving, 3 when not running.
  zk/zookeeper.sh ensemble start|stop|status --data-dir DIR [--base-port 2181] [--tick-time 2000]
      A 3-node ensemble on 127.0.0.1: members in DIR/node1..node3, client ports BASE..BASE+2,
      follower ports BASE+20700.., election ports BASE+21700.. (base 2181: 2288N/2388N).
      Two ensembles coexist when their base ports are at least 3 apart.
  zk/zookeeper.sh --help

Servers bind to 127.0.0.1 only.
EOF
}

die() {
    echo "zookeeper.sh: error: $*" >&2
    exit 2
}

info() {
    echo "zookeeper.sh: $*"
}

require_value() {
    # require_value OPTION VALUE: the option needs an argument.
    [[ -n "${2:-}" && "${2:0:2}" != "--" ]] || die "$1 needs a value (see --help)"
}

require_port() {
    [[ "$2" =~ ^[0-9]+$ ]] && (( $2 >= 1 && $2 <= 65535 )) || die "$1 must be a port number, got '$2'"
}

absolute_dir() {
    mkdir -p -- "$1" || die "cannot create directory $1"
    (cd -- "$1" && pwd -P)
}

# --- installation -------------------------------------------------------------------------

run_as_root() {
    if (( EUID == 0 )); then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        die "installing packages needs root (or sudo): $*"
    fi
}

apt_install() {
    run_as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 \
        install -y --no-install-recommends zookeeper libslf4j-java
}

command_install() {
    if [[ -f "$ZOOKEEPER_JAR" && -f "$SLF4J_JAR" ]]; then
        info "ZooKeeper already installed ($ZOOKEEPER_JAR)"
        return 0
    fi
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install ZooKeeper 3.8 and SLF4J by hand"
    info "installing zookeeper and libslf4j-java"
    if ! apt_install; then
        info "install failed; running apt-get update and retrying"
        run_as_root apt-get -o DPkg::Lock::Timeout=300 update
        apt_install || die "apt-get install zookeeper libslf4j-java failed"
    fi
    [[ -f "$ZOOKEEPER_JAR" ]] || die "$ZOOKEEPER_JAR still missing after installation"
    [[ -f "$SLF4J_JAR" ]] || die "$SLF4J_JAR still missing after installation"
    info "installed"
}

require_installed() {
    [[ -f "$ZOOKEEPER_JAR" ]] || die "$ZOOKEEPER_JAR missing: run '$0 install' first"
    [[ -f "$SLF4J_JAR" ]] || die "$SLF4J_JAR missing: run '$0 install' first"
    command -v java >/dev/null 2>&1 || die "java not found on PATH"
}

# --- talking to a server ------------------------------------------------------------------

# four_letter_word PORT WORD: print the server's answer (empty when it does not answer).
four_letter_word() {
    timeout 3 bash -c '
        exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1
        printf "%s" "$1" >&3
        cat <&3
    ' "$1" "$2" 2>/dev/null || true
}

answers_imok() {
    [[ "$(four_letter_word "$1" ruok)" == "imok" ]]
}

# serving_mode PORT: "standalone", "leader" or "follower" once the server serves clients.
serving_mode() {
    four_letter_word "$1" srvr | sed -n 's/^Mode: //p'
}

config_value() {
    # config_value FILE KEY
    sed -n "s/^$2=//p" "$1" | tail -n 1
}

# running_pid DIR: print the pid of the ZooKeeper recorded in DIR/zookeeper.pid if that process
# is alive and really is this directory's ZooKeeper (guards against pid reuse).
running_pid() {
    local pid_file="$1/zookeeper.pid" pid
    [[ -f "$pid_file" ]] || return 1
    pid="$(tr -dc '0-9' <"$pid_file")"
    [[ -n "$pid" ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$MAIN_CLASS $1/zoo.cfg" || return 1
    echo "$pid"
}

log_tail() {
    if [[ -f "$1/zookeeper.log" ]]; then
        echo "--- last lines of $1/zookeeper.log ---" >&2
        tail -n 30 "$1/zookeeper.log" >&2
    fi
}

# render TEMPLATE OUTPUT DATA_DIR PORT TICK [SERVER_LINES]: fill the @NAME@ placeholders.
# Quoted replacements keep '&' literal (bash 5.2 patsub_replacement).
render() {
    local template="$1" output="$2" data_dir="$3" port="$4" tick="$5" servers="${6:-}" line
    [[ -f "$template" ]] || die "template $template missing"
    {
        while IFS= read -r line || [[ -n "$line" ]]; do
            if [[ "$line" == "@SERVER_LINES@" ]]; then
                printf '%s\n' "$servers"
                continue
            fi
            line="${line//@DATA_DIR@/"$data_dir"}"
            line="${line//@CLIENT_PORT@/"$port"}"
            line="${line//@TICK_TIME@/"$tick"}"
            printf '%s\n' "$line"
        done <"$template"
    } >"$output.tmp"
    mv -f -- "$output.tmp" "$output"
}

# launch DIR: start the JVM for DIR/zoo.cfg in its own session, detached from this shell.
launch() {
    local dir="$1" pid
    : >>"$dir/zookeeper.log"
    setsid java -Xmx256m -cp "$ZOOKEEPER_JAR:$SLF4J_JAR" "$MAIN_CLASS" "$dir/zoo.cfg" \
        >>"$dir/zookeeper.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$dir/zookeeper.pid"
}

# wait_serving DIR PORT QUORUM: wait for imok (and, for QUORUM=yes, a leader/follower mode).
wait_serving() {
    local dir="$1" port="$2" deadline=$((SECONDS + START_TIMEOUT_SECONDS)) mode
    while (( SECONDS < deadline )); do
        if ! running_pid "$dir" >/dev/null; then
            log_tail "$dir"
            rm -f -- "$dir/zookeeper.pid"
            die "ZooKeeper in $dir exited during startup"
        fi
        if answers_imok "$port"; then
            mode="$(serving_mode "$port")"
            [[ -n "$mode" ]] && return 0
        fi
        sleep 0.2
    done
    return 1
}

# terminate DIR: SIGTERM, wait, SIGKILL after STOP_TIMEOUT_SECONDS. Prints what happened.
terminate() {
    local dir="$1" pid
    if ! pid="$(running_pid "$dir")"; then
        rm -f -- "$dir/zookeeper.pid"
        info "not running ($dir)"
        return 0
    fi
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    await_exit "$dir" "$pid"
}

# await_exit DIR PID: wait for a SIGTERMed server to exit, SIGKILL it after the timeout.
await_exit() {
    local dir="$1" pid="$2" deadline=$((SECONDS + STOP_TIMEOUT_SECONDS))
    while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        info "pid $pid ignored SIGTERM for ${STOP_TIMEOUT_SECONDS}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    rm -f -- "$dir/zookeeper.pid"
    info "stopped (pid $pid, $dir)"
}

# --- standalone ---------------------------------------------------------------------------

command_start() {
    local dir="$1" port="$2" tick="$3" pid
    require_installed
    if pid="$(running_pid "$dir")"; then
        info "already running (pid $pid, port $(config_value "$dir/zoo.cfg" clientPort), $dir)"
        return 0
    fi
    rm -f -- "$dir/zookeeper.pid"
    if answers_imok "$port"; then
        die "port $port already serves another ZooKeeper (not the one in $dir)"
    fi
    mkdir -p -- "$dir/data"
    render "$STANDALONE_TEMPLATE" "$dir/zoo.cfg" "$dir/data" "$port" "$tick"
    launch "$dir"
    if ! wait_serving "$dir" "$port"; then
        log_tail "$dir"
        terminate "$dir" >/dev/null
        die "ZooKeeper in $dir did not serve on port $port within ${START_TIMEOUT_SECONDS}s"
    fi
    info "started (pid $(cat "$dir/zookeeper.pid"), 127.0.0.1:$port, $dir)"
}

command_status() {
    local dir="$1" pid port mode
    if ! pid="$(running_pid "$dir")"; then
        info "not running ($dir)"
        return 3
    fi
    port="$(config_value "$dir/zoo.cfg" clientPort)"
    mode=""
    if answers_imok "$port"; then
        mode="$(serving_mode "$port")"
    fi
    if [[ -z "$mode" ]]; then
        info "running but not serving (pid $pid, port $port, $dir)"
        return 1
    fi
    info "running (pid $pid, 127.0.0.1:$port, mode $mode, $dir)"
}

# --- ensemble -----------------------------------------------------------------------------

ensemble_server_lines() {
    local base="$1" member
    for ((member = 1; member <= ENSEMBLE_SIZE; member++)); do
        printf 'server.%d=127.0.0.1:%d:%d\n' "$member" \
            $((base + PEER_PORT_OFFSET + member - 1)) $((base + ELECTION_PORT_OFFSET + member - 1))
    done
}

command_ensemble() {
    local action="$1" dir="$2" base="$3" tick="$4" member member_dir port pid failed=0 servers
    (( base + ELECTION_PORT_OFFSET + ENSEMBLE_SIZE - 1 <= 65535 )) \
        || die "--base-port $base too high: election ports would pass 65535"
    case "$action" in
        start)
            require_installed
            servers="$(ensemble_server_lines "$base")"
            for ((member = 1; member <= ENSEMBLE_SIZE; member++)); do
                member_dir="$(absolute_dir "$dir/node$member")"
                port=$((base + member - 1))
                if pid="$(running_pid "$member_dir")"; then
                    info "member $member already running (pid $pid, port $port)"
                    continue
                fi
                rm -f -- "$member_dir/zookeeper.pid"
                if answers_imok "$port"; then
                    die "port $port already serves another ZooKeeper"
                fi
                mkdir -p -- "$member_dir/data"
                echo "$member" >"$member_dir/data/myid"
                render "$ENSEMBLE_TEMPLATE" "$member_dir/zoo.cfg" "$member_dir/data" "$port" \
                    "$tick" "$servers"
                launch "$member_dir"
            done
            for ((member = 1; member <= ENSEMBLE_SIZE; member++)); do
                member_dir="$dir/node$member"
                if ! wait_serving "$member_dir" $((base + member - 1)); then
                    log_tail "$member_dir"
                    die "ensemble member $member did not join a quorum within ${START_TIMEOUT_SECONDS}s"
                fi
            done
            info "ensemble serving on 127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
            ;;
        stop)
            # SIGTERM every member first, so they shut down in parallel.
            local -a pids=()
            for ((member = 1; member <= ENSEMBLE_SIZE; member++)); do
                pids[member]=""
                member_dir="$dir/node$member"
                if [[ -d "$member_dir" ]] && pid="$(running_pid "$member_dir")"; then
                    pids[member]="$pid"
                    kill -CONT "$pid" 2>/dev/null || true
                    kill -TERM "$pid" 2>/dev/null || true
                fi
            done
            for ((member = 1; member <= ENSEMBLE_SIZE; member++)); do
                member_dir="$dir/node$member"
                if [[ -n "${pids[member]}" ]]; then
                    await_exit "$member_dir" "${pids[member]}"
                elif [[ -d "$member_dir" ]]; then
                    rm -f -- "$member_dir/zookeeper.pid"
                    info "member $member not running ($member_dir)"
                else
                    info "member $member not created ($member_dir)"
                fi
            done
            ;;
        status)
            for ((member = 1; member <= ENSEMBLE_SIZE; member++)); do
                member_dir="$dir/node$member"
                if [[ ! -d "$member_dir" ]]; then
                    info "member $member not created ($member_dir)"
                    failed=1
                    continue
                fi
                echo -n "member $member: "
                command_status "$member_dir" || failed=1
            done
            return "$failed"
            ;;
        *)
            die "unknown ensemble action '$action' (start, stop or status)"
            ;;
    esac
}

# --- command line -------------------------------------------------------------------------

main() {
    local command="" action="" data_dir="" port=2181 base_port=2181 tick=2000
    [[ $# -gt 0 ]] || { usage >&2; exit 2; }
    case "$1" in
        -h|--help|help) usage; exit 0 ;;
        install|start|stop|status) command="$1"; shift ;;
        ensemble)
            command="ensemble"; shift
            [[ $# -gt 0 ]] || die "ensemble needs an action: start, stop or status"
            action="$1"; shift
            [[ "$action" =~ ^(start|stop|status)$ ]] || die "unknown ensemble action '$action'"
            ;;
        *) die "unknown command '$1' (see --help)" ;;
    esac
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --data-dir) require_value "$1" "${2:-}"; data_dir="$2"; shift 2 ;;
            --port) require_value "$1" "${2:-}"; require_port "$1" "$2"; port="$2"; shift 2 ;;
            --base-port) require_value "$1" "${2:-}"; require_port "$1" "$2"; base_port="$2"; shift 2 ;;
            --tick-time)
                require_value "$1" "${2:-}"
                [[ "$2" =~ ^[0-9]+$ ]] && (( $2 >= 1 )) || die "--tick-time must be milliseconds, got '$2'"
                tick="$2"; shift 2 ;;
            -h|--help) usage; exit 0 ;;
            *) die "unknown option '$1' (see --help)" ;;
        esac
    done
    if [[ "$command" == "install" ]]; then
        command_install
        return
    fi
    [[ -n "$data_dir" ]] || die "$command needs --data-dir DIR"
    if [[ "$command" == "start" || "$action" == "start" ]]; then
        data_dir="$(absolute_dir "$data_dir")"
    elif [[ -d "$data_dir" ]]; then
        data_dir="$(cd -- "$data_dir" && pwd -P)"
    else
        info "not running (no directory $data_dir)"
        [[ "$command" == "stop" || "$action" == "stop" ]] && exit 0
        exit 3
    fi
    case "$command" in
        start) command_start "$data_dir" "$port" "$tick" ;;
        stop) terminate "$data_dir" ;;
        status) command_status "$data_dir" ;;
        ensemble) command_ensemble "$action" "$data_dir" "$base_port" "$tick" ;;
    esac
}

main "$@"
