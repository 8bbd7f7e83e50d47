"""The compose `spark` profile's job: a streaming count over the input topic.

    python3 count_job.py --bootstrap B --master URL --input T --output T --checkpoint DIR

A streaming query reads every record of --input with the `kafkalite` source (from the
earliest offsets, Trigger.AvailableNow: what the topic holds now, then stop), counts them
in Spark's state store (complete output mode) and writes the running count after each
micro-batch to --output with the `kafkalite` sink: JSON {"records": N}, key "count". The
last record in the output topic is the count of everything read.
"""

from __future__ import annotations

import argparse
import os

from pyspark.sql import SparkSession, functions

from kafkalite.spark import KafkaliteDataSource

QUERY_TIMEOUT_S = 300


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--checkpoint", required=True)
    args = p.parse_args()
    spark = (SparkSession.builder.master(args.master).appName("kafkalite-compose-count")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.executor.memory", "512m")
             .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaliteDataSource)
    records = (spark.readStream.format("kafkalite").option("kafka.bootstrap.servers", args.bootstrap)
               .option("subscribe", args.input).option("startingOffsets", "earliest").load())
    counts = records.groupBy().count().select(
        functions.lit("count").alias("key"),
        functions.to_json(functions.struct(functions.col("count").alias("records"))).alias("value"))
    query = (counts.writeStream.format("kafkalite").outputMode("complete")
             .option("kafka.bootstrap.servers", args.bootstrap).option("topic", args.output)
             .option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start())
    finished = query.awaitTermination(QUERY_TIMEOUT_S)
    if not finished:
        query.stop()
        print(f"count job: the query did not finish within {QUERY_TIMEOUT_S} s")
        return 1
    print(f"count job: done, last progress {query.lastProgress}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
