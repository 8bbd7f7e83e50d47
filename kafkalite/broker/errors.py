"""The one table that maps every layer's operating errors to Kafka wire codes (STYLE habit 7).

The protocol layer's KafkaliteError subclasses carry their code; the storage engine's and the
core's typed errors are mapped here. Handlers catch OPERATING_ERRORS only. Anything else
(a failed assertion, an illegal state transition) is a programmer error: it is never
mapped to a wire code; it propagates, is logged with its traceback, and the connection
that carried the request is closed (issue 8).
"""

from __future__ import annotations

from kafkalite import dynamic_config
from kafkalite.core.codes import CoreError
from kafkalite.log import errors as log_errors
from kafkalite.protocol.errors import ErrorCode, KafkaliteError, error_from_code
from kafkalite.zk.errors import ZnodeTooLargeError

OPERATING_ERRORS: tuple[type[Exception], ...] = (KafkaliteError, CoreError, log_errors.LogError,
                                                 dynamic_config.InvalidConfig, dynamic_config.InvalidConfigRequest,
                                                 ZnodeTooLargeError)

_LOG_ERRORS: dict[type[BaseException], ErrorCode] = {
    log_errors.CorruptRecordError: ErrorCode.CORRUPT_MESSAGE,
    log_errors.InvalidRecordError: ErrorCode.INVALID_RECORD,
    log_errors.OffsetOutOfRangeError: ErrorCode.OFFSET_OUT_OF_RANGE,
    log_errors.LogDirError: ErrorCode.KAFKA_STORAGE_ERROR,
    log_errors.OffsetMismatchError: ErrorCode.UNKNOWN_SERVER_ERROR,
    # Issue 16: an alteration naming an unknown or read-only config or a bad value, and one
    # that is malformed (a name twice, an unknown operation).
    dynamic_config.InvalidConfig: ErrorCode.INVALID_CONFIG,
    dynamic_config.InvalidConfigRequest: ErrorCode.INVALID_REQUEST,
    # A request whose state would not fit in one znode (a topic's assignment and config, an
    # entity's config): refused before ZooKeeper sees it, as Kafka's controller refuses an
    # "excessively large" operation.
    ZnodeTooLargeError: ErrorCode.POLICY_VIOLATION,
}


def error_code_for(exc: BaseException) -> int:
    if isinstance(exc, KafkaliteError):
        return int(exc.code)
    for cls in type(exc).__mro__:
        code = _LOG_ERRORS.get(cls)
        if code is not None:
            return int(code)
    code = getattr(exc, "code", None)  # the core's CoreError carries Kafka's number
    if isinstance(code, int):
        return int(code)
    return int(ErrorCode.UNKNOWN_SERVER_ERROR)


def fail(code: int, message: str | None = None) -> KafkaliteError:
    """The typed error for a code, ready to raise."""
    return error_from_code(code, message)
