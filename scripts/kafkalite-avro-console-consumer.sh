#!/usr/bin/env bash
# kafkalite-avro-console-consumer.sh: see --help (Confluent's kafka-avro-console-consumer flags:
# --property schema.registry.url=... value.schema=...).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
kafkalite_tool kafkalite.tools.avro_console_consumer "$@"
