#!/bin/bash
# The compose `spark` profile's job service: events into the input topic with `kafkalite
# pipeline generate`, then the streaming pipeline, `kafkalite pipeline run`, on the
# standalone master with Trigger.AvailableNow (everything the input holds, then exit): its
# windows go to pipeline-windows and Parquet, bad records to pipeline-dead-letters.
#
# Two generate runs: PIPELINE_SECONDS of events starting a minute ago, then one second of
# events starting now, whose event times move the watermark past every window of the first,
# so those windows are closed and written (append mode writes a window once it is final).
# Settings (environment): KAFKALITE_BOOTSTRAP, SPARK_MASTER_URL, PIPELINE_RATE (records/s),
# PIPELINE_SECONDS, PIPELINE_DIR (checkpoint and Parquet; the worker must see the same
# directory: a shared volume).
set -euo pipefail
export KAFKALITE_BOOTSTRAP=${KAFKALITE_BOOTSTRAP:-broker1:19092,broker2:19092,broker3:19092}
master=${SPARK_MASTER_URL:-spark://spark-master:7077}
rate=${PIPELINE_RATE:-200}
dir=${PIPELINE_DIR:-/var/lib/kafkalite/spark/job}

kafkalite topics create pipeline-input --partitions 3 --replication-factor 3 \
    || kafkalite topics describe pipeline-input >/dev/null
now_ms=$(date +%s%3N)
kafkalite pipeline generate --rate "$rate" --seconds "${PIPELINE_SECONDS:-5}" --seed 12 --start-ms $((now_ms - 60000)) --json
kafkalite pipeline generate --rate "$rate" --seconds 1 --seed 13 --start-ms "$now_ms" --json
# A failed run is run again from its checkpoint, as a supervisor would restart it (bounded):
# on a loaded machine Spark gives a Python worker 10 s to connect back, a fixed limit.
for attempt in $(seq 1 "${PIPELINE_RUN_ATTEMPTS:-2}"); do
    if kafkalite pipeline run --available-now --master "$master" --checkpoint "$dir/checkpoint" --parquet "$dir/parquet"; then
        break
    fi
    if [ "$attempt" -ge "${PIPELINE_RUN_ATTEMPTS:-2}" ]; then
        exit 1
    fi
    echo "pipeline-job: pipeline run failed (attempt $attempt); running it again from its checkpoint"
done
exec kafkalite pipeline results --parquet "$dir/parquet" --json
