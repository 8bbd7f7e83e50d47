"""The Spark job's defaults, importable without pyspark or pyarrow (the CLI's help shows them)."""

INPUT_TOPIC = "pipeline-input"
OUTPUT_TOPIC = "pipeline-windows"
DEAD_LETTER_TOPIC = "pipeline-dead-letters"
MASTER = "local[2]"
TRIGGER_INTERVAL_S = 5.0
