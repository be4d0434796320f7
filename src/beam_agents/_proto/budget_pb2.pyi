from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class TokenBudgetBlob(_message.Message):
    __slots__ = ("state_schema_version", "window_start_ms", "tokens_used")
    STATE_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_MS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_USED_FIELD_NUMBER: _ClassVar[int]
    state_schema_version: int
    window_start_ms: int
    tokens_used: int
    def __init__(self, state_schema_version: _Optional[int] = ..., window_start_ms: _Optional[int] = ..., tokens_used: _Optional[int] = ...) -> None: ...
