#!/bin/bash
# The compose `spark` profile's job service: events into the input topic with
# `kafkalite pipeline generate`, then a Spark streaming job on the standalone master that
# reads them with the `kafkalite` source and writes its result to the output topic.
# Settings (environment): KAFKALITE_BOOTSTRAP, SPARK_MASTER_URL, PIPELINE_RATE (records/s),
# PIPELINE_SECONDS, PIPELINE_INPUT, PIPELINE_OUTPUT, PIPELINE_DIR (checkpoint and outputs;
# the worker must see the same directory: a shared volume).
set -euo pipefail
bootstrap=${KAFKALITE_BOOTSTRAP:-broker1:19092,broker2:19092,broker3:19092}
master=${SPARK_MASTER_URL:-spark://spark-master:7077}
input=${PIPELINE_INPUT:-pipeline-input}
output=${PIPELINE_OUTPUT:-pipeline-count}
dir=${PIPELINE_DIR:-/var/lib/kafkalite/spark/job}

for topic in "$input" "$output"; do
    kafkalite topics create "$topic" --partitions 3 --replication-factor 3 --bootstrap "$bootstrap" \
        || kafkalite topics describe "$topic" --bootstrap "$bootstrap" >/dev/null
done
kafkalite pipeline generate --rate "${PIPELINE_RATE:-200}" --seconds "${PIPELINE_SECONDS:-5}" --topic "$input" \
    --seed 12 --json --bootstrap "$bootstrap"
exec python3 /usr/local/lib/kafkalite/count_job.py --bootstrap "$bootstrap" --master "$master" \
    --input "$input" --output "$output" --checkpoint "$dir/checkpoint"
