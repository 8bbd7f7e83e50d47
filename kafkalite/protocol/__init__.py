"""Kafka client protocol, sans-I/O: schema table (schema), compiled codec (codec), framing
(framing) and the error codes shared with the inter-broker layer (errors)."""
