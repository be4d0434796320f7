from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Intent(_message.Message):
    __slots__ = ("entity_key", "seq", "index", "kind", "payload", "event_id", "traceparent")
    ENTITY_KEY_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    entity_key: bytes
    seq: int
    index: int
    kind: str
    payload: bytes
    event_id: str
    traceparent: str
    def __init__(self, entity_key: _Optional[bytes] = ..., seq: _Optional[int] = ..., index: _Optional[int] = ..., kind: _Optional[str] = ..., payload: _Optional[bytes] = ..., event_id: _Optional[str] = ..., traceparent: _Optional[str] = ...) -> None: ...
