#!/usr/bin/env bash
# Entrypoint of the kafkalite images (compose/Dockerfile).
#
#   broker      python -m kafkalite.broker $KAFKALITE_CONFIG --override k=v ..., one override per
#               KAFKALITE_* environment variable: the name without the prefix, lower case, "_"
#               becoming "." and "__" becoming "_" (KAFKALITE_BROKER_ID=2 → broker.id=2,
#               KAFKALITE_ZOOKEEPER_CONNECT → zookeeper.connect, KAFKALITE_LISTENERS → listeners).
#               Not turned into overrides: KAFKALITE_HOME, KAFKALITE_PYTHON, KAFKALITE_VENV,
#               KAFKALITE_CONFIG (the properties file; default $KAFKALITE_HOME/config/server.properties),
#               KAFKALITE_EXTRA_CONFIG (a properties file whose key=value lines become overrides
#               before the variables', e.g. the secure variant's generated settings) and
#               KAFKALITE_LOG_LEVEL (the broker's logging level, default INFO).
#   zookeeper   Debian's ZooKeeper (QuorumPeerMain) with a zoo.cfg written from the official
#               image's variables: ZOO_CLIENT_PORT (2181), ZOO_CLIENT_PORT_ADDRESS (127.0.0.1),
#               ZOO_DATA_DIR (/var/lib/zookeeper/data), ZOO_DATA_LOG_DIR, ZOO_TICK_TIME (2000),
#               ZOO_INIT_LIMIT (10), ZOO_SYNC_LIMIT (5), ZOO_MAX_CLIENT_CNXNS (60),
#               ZOO_4LW_COMMANDS_WHITELIST (ruok,srvr,stat,mntr,conf), ZOO_MY_ID and ZOO_SERVERS
#               (an ensemble: "server.1=host:2888:3888;2181 server.2=..."), ZOO_CFG_EXTRA
#               (extra "key=value" words); JVM options in ZOO_JVM_OPTS (-Xmx256m).
#   anything else is run as a command (e.g. kafkalite-topics.sh --list --bootstrap-server ...).
set -euo pipefail

run_broker() {
    local config="${KAFKALITE_CONFIG:-$KAFKALITE_HOME/config/server.properties}"
    local -a overrides=()
    local variable key line
    if [[ -n "${KAFKALITE_EXTRA_CONFIG:-}" ]]; then
        [[ -r "$KAFKALITE_EXTRA_CONFIG" ]] || { echo "KAFKALITE_EXTRA_CONFIG: cannot read $KAFKALITE_EXTRA_CONFIG" >&2; exit 1; }
        while IFS= read -r line || [[ -n "$line" ]]; do
            [[ -z "$line" || "$line" == \#* ]] || overrides+=(--override "$line")
        done <"$KAFKALITE_EXTRA_CONFIG"
    fi
    for variable in $(compgen -e | LC_ALL=C sort); do
        case "$variable" in
            KAFKALITE_HOME|KAFKALITE_PYTHON|KAFKALITE_VENV|KAFKALITE_CONFIG|KAFKALITE_EXTRA_CONFIG|KAFKALITE_LOG_LEVEL) continue ;;
            KAFKALITE_*) ;;
            *) continue ;;
        esac
        key="${variable#KAFKALITE_}"
        key="${key,,}"
        key="${key//__/$'\x01'}"
        key="${key//_/.}"
        key="${key//$'\x01'/_}"
        overrides+=(--override "$key=${!variable}")
    done
    exec "${KAFKALITE_PYTHON:-python3}" -m kafkalite.broker "$config" --log-level "${KAFKALITE_LOG_LEVEL:-INFO}" \
        "${overrides[@]}" "$@"
}

run_zookeeper() {
    local data_dir="${ZOO_DATA_DIR:-/var/lib/zookeeper/data}"
    local config_dir="${ZOO_CONF_DIR:-/var/lib/zookeeper/conf}"
    mkdir -p "$data_dir" "$config_dir"
    {
        echo "tickTime=${ZOO_TICK_TIME:-2000}"
        echo "initLimit=${ZOO_INIT_LIMIT:-10}"
        echo "syncLimit=${ZOO_SYNC_LIMIT:-5}"
        echo "dataDir=$data_dir"
        if [[ -n "${ZOO_DATA_LOG_DIR:-}" ]]; then
            mkdir -p "$ZOO_DATA_LOG_DIR"
            echo "dataLogDir=$ZOO_DATA_LOG_DIR"
        fi
        echo "clientPort=${ZOO_CLIENT_PORT:-2181}"
        echo "clientPortAddress=${ZOO_CLIENT_PORT_ADDRESS:-127.0.0.1}"
        echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}"
        echo "admin.enableServer=${ZOO_ADMINSERVER_ENABLED:-false}"
        echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-ruok,srvr,stat,mntr,conf}"
        echo "minSessionTimeout=${ZOO_MIN_SESSION_TIMEOUT:-1000}"
        echo "maxSessionTimeout=${ZOO_MAX_SESSION_TIMEOUT:-60000}"
        local word
        for word in ${ZOO_SERVERS:-}; do echo "$word"; done
        for word in ${ZOO_CFG_EXTRA:-}; do echo "$word"; done
    } > "$config_dir/zoo.cfg"
    if [[ -n "${ZOO_MY_ID:-}" ]]; then
        echo "$ZOO_MY_ID" > "$data_dir/myid"
    fi
    local classpath="/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
    # shellcheck disable=SC2086  # ZOO_JVM_OPTS holds several words
    exec java ${ZOO_JVM_OPTS:--Xmx256m} -cp "$classpath" org.apache.zookeeper.server.quorum.QuorumPeerMain \
        "$config_dir/zoo.cfg"
}

role="${1:-broker}"
case "$role" in
    broker) shift || true; run_broker "$@" ;;
    zookeeper) run_zookeeper ;;
    *) exec "$@" ;;
esac
