"""Client side of kafkalite: partitioners, consumer-group assignors, producer and consumer."""
