from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorRecord(_message.Message):
    __slots__ = ("stage", "error_type", "message", "traceback", "retriable", "entity_key", "seq", "event", "event_id", "attempts", "event_bytes", "event_sha256", "tokens_used", "traceparent")
    class Stage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STAGE_UNSPECIFIED: _ClassVar[ErrorRecord.Stage]
        STAGE_DECODE: _ClassVar[ErrorRecord.Stage]
        STAGE_STATE_CORRUPT: _ClassVar[ErrorRecord.Stage]
        STAGE_AGENT: _ClassVar[ErrorRecord.Stage]
        STAGE_TIMEOUT: _ClassVar[ErrorRecord.Stage]
        STAGE_MEMORY_OVERFLOW: _ClassVar[ErrorRecord.Stage]
        STAGE_MODEL: _ClassVar[ErrorRecord.Stage]
        STAGE_LONGTERM_READ: _ClassVar[ErrorRecord.Stage]
        STAGE_LONGTERM_FLUSH: _ClassVar[ErrorRecord.Stage]
        STAGE_CONFIG: _ClassVar[ErrorRecord.Stage]
        STAGE_OUTPUT: _ClassVar[ErrorRecord.Stage]
        STAGE_JOURNAL: _ClassVar[ErrorRecord.Stage]
        STAGE_SCOPE_VIOLATION: _ClassVar[ErrorRecord.Stage]
        STAGE_BUDGET: _ClassVar[ErrorRecord.Stage]
        STAGE_BACKLOG: _ClassVar[ErrorRecord.Stage]
        STAGE_LATE: _ClassVar[ErrorRecord.Stage]
        STAGE_TOOL: _ClassVar[ErrorRecord.Stage]
        STAGE_WAIT: _ClassVar[ErrorRecord.Stage]
    STAGE_UNSPECIFIED: ErrorRecord.Stage
    STAGE_DECODE: ErrorRecord.Stage
    STAGE_STATE_CORRUPT: ErrorRecord.Stage
    STAGE_AGENT: ErrorRecord.Stage
    STAGE_TIMEOUT: ErrorRecord.Stage
    STAGE_MEMORY_OVERFLOW: ErrorRecord.Stage
    STAGE_MODEL: ErrorRecord.Stage
    STAGE_LONGTERM_READ: ErrorRecord.Stage
    STAGE_LONGTERM_FLUSH: ErrorRecord.Stage
    STAGE_CONFIG: ErrorRecord.Stage
    STAGE_OUTPUT: ErrorRecord.Stage
    STAGE_JOURNAL: ErrorRecord.Stage
    STAGE_SCOPE_VIOLATION: ErrorRecord.Stage
    STAGE_BUDGET: ErrorRecord.Stage
    STAGE_BACKLOG: ErrorRecord.Stage
    STAGE_LATE: ErrorRecord.Stage
    STAGE_TOOL: ErrorRecord.Stage
    STAGE_WAIT: ErrorRecord.Stage
    STAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    RETRIABLE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_KEY_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    EVENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    EVENT_SHA256_FIELD_NUMBER: _ClassVar[int]
    TOKENS_USED_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    stage: ErrorRecord.Stage
    error_type: str
    message: str
    traceback: str
    retriable: bool
    entity_key: bytes
    seq: int
    event: bytes
    event_id: str
    attempts: int
    event_bytes: int
    event_sha256: bytes
    tokens_used: int
    traceparent: str
    def __init__(self, stage: _Optional[_Union[ErrorRecord.Stage, str]] = ..., error_type: _Optional[str] = ..., message: _Optional[str] = ..., traceback: _Optional[str] = ..., retriable: bool = ..., entity_key: _Optional[bytes] = ..., seq: _Optional[int] = ..., event: _Optional[bytes] = ..., event_id: _Optional[str] = ..., attempts: _Optional[int] = ..., event_bytes: _Optional[int] = ..., event_sha256: _Optional[bytes] = ..., tokens_used: _Optional[int] = ..., traceparent: _Optional[str] = ...) -> None: ...
