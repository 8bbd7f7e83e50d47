"""Typed operating errors of the storage engine.

The protocol layer maps these to Kafka wire error codes in one table elsewhere
(STYLE.md habit 7). Programmer errors are asserts, never these.
"""


class LogError(Exception):
    """Base class of every operating error raised by kafkalite.log."""


class CorruptRecordError(LogError):
    """Bytes that are not a well-formed RecordBatch v2: torn, bad length, bad magic, bad CRC.

    Wire code: CORRUPT_MESSAGE (2).
    """


class InvalidRecordError(LogError):
    """A well-formed batch whose contents break a rule (record count, offsets, control batch
    from a client). Wire code: INVALID_RECORD (87)."""


class OffsetOutOfRangeError(LogError):
    """A read below the log start offset or above the log end offset. Wire code: OFFSET_OUT_OF_RANGE (1)."""


class OffsetMismatchError(LogError):
    """A follower append that does not start at the log end offset, or offsets that go backwards."""


class LogDirError(LogError):
    """A log directory that cannot be read or understood; start-up fails, nothing is deleted.
    Wire code: KAFKA_STORAGE_ERROR (56)."""


class LogDirFailure(LogDirError):
    """I/O on a log dir failed while the broker serves (a full disk, EIO): the whole dir
    goes offline (KIP-112). Wire code: KAFKA_STORAGE_ERROR (56)."""

    def __init__(self, log_dir: str, cause: OSError) -> None:
        super().__init__(f"log dir {log_dir} failed: {cause}")
        self.log_dir = log_dir
        self.cause = cause


class CorruptBatchError(CorruptRecordError):
    """A batch already in a local log fails its CRC (a flipped bit on disk, found when it
    is read to be served): the replica must not serve or replicate it (issue 14)."""

    def __init__(self, message: str, base_offset: int) -> None:
        super().__init__(message)
        self.base_offset = base_offset
