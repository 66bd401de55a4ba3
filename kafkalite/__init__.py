"""kafkalite: a Kafka-style distributed commit log."""
