"""Everything that talks to Kafka: settings, the embedded broker, admin and offsets."""
