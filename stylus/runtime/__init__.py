"""Running processors against Kafka: consumer groups, producers, checkpoints, rebalances, signals."""
