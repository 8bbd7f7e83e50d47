"""Storage engine: RecordBatch v2 codec, segments, indexes, checkpoints, recovery, LogManager,
and the log cleaner (compaction: cleaner_decisions, cleaner, segment_swap, cleaner_manager).

DESIGN.md section 3. Public entry points: kafkalite.log.records (codec),
kafkalite.log.log.Log, kafkalite.log.log_manager.LogManager, kafkalite.log.errors.
"""
