"""The streaming pipeline of issue 11: events, their validation, and the plain-Python
reference of the windowed aggregates the Spark job computes."""
