"""kafkalite: a Kafka-style replicated commit log in Python."""

__version__ = "0.1.0"
