from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class LongtermRecord(_message.Message):
    __slots__ = ("entity_key", "key", "value", "seq", "updated_at_ms")
    ENTITY_KEY_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    entity_key: bytes
    key: str
    value: bytes
    seq: int
    updated_at_ms: int
    def __init__(self, entity_key: _Optional[bytes] = ..., key: _Optional[str] = ..., value: _Optional[bytes] = ..., seq: _Optional[int] = ..., updated_at_ms: _Optional[int] = ...) -> None: ...
