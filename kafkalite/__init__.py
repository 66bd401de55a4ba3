"""kafkalite: a Kafka-style distributed commit log."""

__version__ = "0.1.0"
