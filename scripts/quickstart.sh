#!/usr/bin/env bash
# One command from a fresh clone to a working kafkalite cluster:
#   1. installs what running needs (scripts/install.sh --run: ZooKeeper, Java, .venv with PySpark;
#      no browser, no Node, no test tools),
#   2. starts ZooKeeper and 3 brokers on 127.0.0.1 (scripts/kafkalite-cluster.sh start;
#      ZooKeeper on 2181, brokers on 9092-9094; pass --base-port P to move them),
#   3. creates a topic, produces records with and without keys, consumes them back,
#      and shows a consumer group with its lag,
#   4. reads the topic with a Spark batch job (records per key), and runs a Structured Streaming
#      job (availableNow) that aggregates sample orders per hour into another topic, printed.
# The cluster keeps running afterwards; stop it with: scripts/kafkalite-cluster.sh stop
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
cluster_args=()
base_port=""
while [ $# -gt 0 ]; do
  case "$1" in
    --base-port) base_port="${2:?--base-port needs a port}"; cluster_args+=(--base-port "$2"); shift 2 ;;
    --data-dir) cluster_args+=(--data-dir "${2:?--data-dir needs a directory}"); shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; echo "usage: scripts/quickstart.sh [--base-port P] [--data-dir DIR]"; exit 0 ;;
    *) echo "Error: unknown option $1" >&2; exit 2 ;;
  esac
done
began=$(date +%s)
scripts/install.sh --run
scripts/kafkalite-cluster.sh start --brokers 3 "${cluster_args[@]}"
if [ -n "$base_port" ]; then
  bootstrap="127.0.0.1:$((base_port + 1))"
else
  bootstrap="127.0.0.1:9092"
fi
topic="quickstart-events"
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

step scripts/kafkalite-topics.sh --bootstrap-server "$bootstrap" --create --if-not-exists --topic "$topic" --partitions 3 --replication-factor 3
scripts/kafkalite-topics.sh --bootstrap-server "$bootstrap" --create --if-not-exists --topic "$topic" --partitions 3 --replication-factor 3
step scripts/kafkalite-topics.sh --bootstrap-server "$bootstrap" --describe --topic "$topic"
scripts/kafkalite-topics.sh --bootstrap-server "$bootstrap" --describe --topic "$topic"

step "printf 'This is my first event\nThis is my second event\n' | scripts/kafkalite-console-producer.sh --bootstrap-server $bootstrap --topic $topic"
printf 'This is my first event\nThis is my second event\n' | scripts/kafkalite-console-producer.sh --bootstrap-server "$bootstrap" --topic "$topic"
step "printf 'alice:signed up\nbob:ordered 2 widgets\nalice:paid\n' | scripts/kafkalite-console-producer.sh --bootstrap-server $bootstrap --topic $topic --property parse.key=true --property key.separator=:"
printf 'alice:signed up\nbob:ordered 2 widgets\nalice:paid\n' | scripts/kafkalite-console-producer.sh --bootstrap-server "$bootstrap" --topic "$topic" --property parse.key=true --property key.separator=:

step scripts/kafkalite-console-consumer.sh --bootstrap-server "$bootstrap" --topic "$topic" --from-beginning --max-messages 5 --property print.key=true --property print.partition=true --property print.offset=true
scripts/kafkalite-console-consumer.sh --bootstrap-server "$bootstrap" --topic "$topic" --from-beginning --max-messages 5 --timeout-ms 30000 --property print.key=true --property print.partition=true --property print.offset=true

if [ -x scripts/kafkalite-consumer-groups.sh ]; then
  step scripts/kafkalite-console-consumer.sh --bootstrap-server "$bootstrap" --topic "$topic" --group quickstart-group --from-beginning --max-messages 3
  scripts/kafkalite-console-consumer.sh --bootstrap-server "$bootstrap" --topic "$topic" --group quickstart-group --from-beginning --max-messages 3 --timeout-ms 30000 >/dev/null
  step scripts/kafkalite-consumer-groups.sh --bootstrap-server "$bootstrap" --describe --group quickstart-group
  scripts/kafkalite-consumer-groups.sh --bootstrap-server "$bootstrap" --describe --group quickstart-group
fi

# The pipeline kafkalite is for: the topic read by Spark, in a batch job and a streaming job
# (Spark's driver on the loopback address, like the cluster).
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
step .venv/bin/python examples/spark_batch_counts.py --bootstrap-server "$bootstrap" --topic "$topic"
.venv/bin/python examples/spark_batch_counts.py --bootstrap-server "$bootstrap" --topic "$topic"
checkpoint="$(mktemp -d "${TMPDIR:-/tmp}/kafkalite-quickstart-XXXXXX")"
trap 'rm -rf "$checkpoint"' EXIT
step .venv/bin/python examples/spark_streaming_orders.py --bootstrap-server "$bootstrap" --input-topic quickstart-orders \
  --output-topic quickstart-order-stats --produce-sample 200 --available-now --output-mode complete \
  --window "'1 hour'" --checkpoint "$checkpoint"
.venv/bin/python examples/spark_streaming_orders.py --bootstrap-server "$bootstrap" --input-topic quickstart-orders \
  --output-topic quickstart-order-stats --produce-sample 200 --available-now --output-mode complete \
  --window "1 hour" --checkpoint "$checkpoint"
step scripts/kafkalite-console-consumer.sh --bootstrap-server "$bootstrap" --topic quickstart-order-stats --from-beginning --timeout-ms 5000 --property print.key=true
scripts/kafkalite-console-consumer.sh --bootstrap-server "$bootstrap" --topic quickstart-order-stats --from-beginning --timeout-ms 5000 --property print.key=true

printf '\nkafkalite is running: ZooKeeper and 3 brokers (bootstrap %s); quick start done in %d s.\n' "$bootstrap" \
  "$(( $(date +%s) - began ))"
if [ -n "$base_port" ]; then registry_port=$((base_port + 100)); else registry_port=8081; fi
printf 'Schema registry: http://127.0.0.1:%s (and http://%s/registry on every broker).\n' "$registry_port" "$bootstrap"
printf 'Status: scripts/kafkalite-cluster.sh status    Stop: scripts/kafkalite-cluster.sh stop\n'
